"""Paths named by the matrix or by a flag: bounded reads, lengths, containment, no links on a write.

- A file is read only when it is a regular file, and never past its limit: a FIFO would block
  forever, ``/dev/zero`` never ends, and a size is checked before the first byte is read. Every
  file imagekit reads that it did not just make goes through ``open_regular_file`` (or its
  ``read_regular_file``/``read_regular_text``), each with a bound from ``imagekit.core.limits``.
- A path the operating system would refuse as too long is refused first, as bad input (exit 2)
  naming where it came from, not as a broken environment.
- A path the matrix names is resolved (links followed) and must stay inside the matrix's
  directory: a link to a directory elsewhere cannot make imagekit read or hash it.
- A write never goes through a symbolic link: neither the file written nor a directory between
  the output directory that was asked for and the file (``imagekit.core.atomic`` asks here).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from imagekit.core.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.core.limits import FILE_NAME_BYTES, PATH_BYTES

# The path is wrong (a flag or the matrix names it): the user fixes it, exit 2. Anything else
# (a full or read-only disk, permissions) is the environment, exit 3.
_BAD_PATH = {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EINVAL, errno.EEXIST}


# (path, size, mtime_ns, inode, ctime_ns): a change to the file's bytes changes at least one of
# them (a rewrite in place moves mtime and ctime; a replacement by rename changes the inode; an
# mtime set back by hand, `touch -d`, still moves ctime). The hash cache (``imagekit.render.context``) and
# the no-change record (``imagekit.builds.no_change``) both key a file by it.
FileKey = tuple[str, int, int, int, int]


def file_key(path: str, found: os.stat_result) -> FileKey:
    return (path, found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns)


# Python's audit events show which files a run opens; a file a run depends on without opening it
# (a digest from the stat-keyed cache, a size from a listing) is announced with this one, so a
# recorder of a run's inputs (``imagekit.builds.read_recorder``) sees it too.
INPUT_EVENT = "imagekit.input"


def relative_path_is_inside(path: str) -> bool:
    """True when a relative path stays inside its root (no absolute path, no ``..``)."""
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts


def depends_on(path: Path | str) -> None:
    """Say that this run's outcome depends on ``path``, which it may not open."""
    sys.audit(INPUT_EVENT, os.fspath(path))


def os_problem(exc: OSError, path: Path | str, doing: str, fix: str = "") -> ImagekitError:
    """An OSError as the one-line error it is: the path's fault (exit 2) or the machine's (exit 3)."""
    reason = exc.strerror or str(exc)
    if exc.errno in _BAD_PATH:
        return InputError(f"{path}: cannot {doing}: {reason}" + (f"; {fix}" if fix else ""))
    return EnvironmentProblem(f"cannot {doing} {path}: {reason}")


def length_problem(path: Path) -> str | None:
    """Why ``path`` is too long to exist (a component or the whole), or None."""
    if len(os.fsencode(path)) > PATH_BYTES:
        return f"the path is longer than {PATH_BYTES} bytes; use a shorter one"
    for part in path.parts:
        if len(os.fsencode(part)) > FILE_NAME_BYTES:
            return (
                f"{part[:32]!r}... is longer than {FILE_NAME_BYTES} bytes, more than a file name may be;"
                " use a shorter one"
            )
    return None


def check_length(path: Path, where: str) -> Path:
    """``path`` unchanged, or an InputError naming ``where`` when it is too long to exist."""
    problem = length_problem(path)
    if problem is not None:
        raise InputError(f"{where}: {problem}")
    return path


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@contextlib.contextmanager
def open_regular_file(
    path: Path, what: str, *, follow_links: bool = True
) -> Iterator[tuple[int, os.stat_result]]:
    """The open descriptor of the regular file at ``path`` and its stat, closed on leaving: the one
    place imagekit opens a file it did not just make for reading (a flag's, the matrix's, a state
    file, a tool's output).

    The checks are made on the descriptor opened, never on a stat before the open (a rename
    between the two would outwit them): O_NONBLOCK, so that opening a FIFO does not wait for a
    writer; fstat, so that a FIFO, a device (``/dev/zero`` never ends), a socket or a directory is
    refused before a byte is read; O_NOFOLLOW where the caller refuses a symbolic link
    (``follow_links=False``). FileNotFoundError passes through (callers say what to run first);
    every other refusal is one InputError naming the path and ``what`` was expected there.
    """
    check_length(path, str(path)[:64])
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a file named as input that cannot be read is the input's problem
        if exc.errno == errno.ELOOP and not follow_links:
            raise InputError(
                f"{path}: is a symbolic link, which imagekit does not read through here; pass {what} itself"
            ) from None
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}; pass {what}") from None
    try:
        try:
            found = os.fstat(fd)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}; pass {what}") from None
        if not stat.S_ISREG(found.st_mode):
            raise InputError(f"{path}: is {_kind(found.st_mode)}, not a regular file; pass {what}")
        yield fd, found
    finally:
        os.close(fd)


def read_regular_file(path: Path, limit: int, what: str, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at ``path`` (``open_regular_file``), which may hold at most
    ``limit`` of them: a larger one is refused by its size before it is read, and one that grows
    while it is read is refused at ``limit`` + 1 bytes, never read to its end."""
    with open_regular_file(path, what, follow_links=follow_links) as (fd, found):
        if found.st_size > limit:
            raise InputError(f"{path}: larger than {limit} bytes; {what} is far smaller")
        chunks: list[bytes] = []
        left = limit + 1  # one byte more than allowed tells a file that grew since fstat
        try:
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}; pass {what}") from None
    data = b"".join(chunks)
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit} bytes; {what} is far smaller")
    return data


def read_regular_text(path: Path, limit: int, what: str, *, follow_links: bool = True) -> str:
    """``read_regular_file`` as UTF-8 text; text that is not UTF-8 is one InputError naming the byte."""
    raw = read_regular_file(path, limit, what, follow_links=follow_links)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def inside(path: Path, root: Path, where: str) -> Path:
    """``path`` resolved, which must stay inside ``root`` (resolved) once links are followed."""
    check_length(path, where)
    try:
        resolved = path.resolve()
        boundary = root.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop on Python < 3.13
        raise InputError(f"{where}: cannot resolve {path}: {exc}") from None
    if not resolved.is_relative_to(boundary):
        raise InputError(
            f"{where}: {path} leads to {resolved}, outside {boundary} (a symbolic link?); keep it inside"
            " the matrix's directory, or copy it in instead of linking"
        )
    return resolved


def refuse_links(path: Path, root: Path) -> int | None:
    """Refuse a write to ``path`` through a symbolic link: ``path`` itself, or any directory
    between ``root`` (the directory asked for) and it. Components that do not exist yet will be
    made as plain directories. Returns the mode of what stands at ``path``, None if nothing does."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise InputError(f"{path}: outside the output directory {root}") from None
    current = os.fspath(root)
    mode: int | None = None
    for part in parts:  # strings and os.lstat, not pathlib: a render checks every file it writes
        current = f"{current}/{part}"
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_problem(exc, current, "check") from None
        if stat.S_ISLNK(mode):
            raise InputError(
                f"{current} is a symbolic link; imagekit never writes through one (it could point"
                " anywhere): remove the link, or write to another directory"
            )
    return mode


def check_write_target(path: Path, root: Path) -> None:
    """``refuse_links``, and refuse to replace anything at ``path`` but a regular file. A write
    renames a new file over the old one: run as root, ``--html /dev/null`` would turn the device
    into a file, and a FIFO someone reads from would silently stop being one."""
    mode = refuse_links(path, root)
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError(f"{path}: is {_kind(mode)}; imagekit writes only regular files: name another path")
