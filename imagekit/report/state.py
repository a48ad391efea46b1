"""The state directory (``--state-dir``, ``.imagekit`` by default): the names of what imagekit
keeps there, the layout of its report file, and the lock one run holds on it.

Apart from ``imagekit.report.store`` (the report's records and their checks), so that what only needs
the directory (a no-change run answered before its command line is parsed, ``imagekit.builds.no_change``)
does not import the records' pydantic types.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.paths import check_length, os_problem

DEFAULT_STATE_DIR = Path(".imagekit")
REPORT_NAME = "report.json"
LOCK_NAME = "lock"
LOGS_DIR = "logs"


def report_json_text(data: dict[str, Any]) -> str:
    """A report's file text: ``BuildReport.as_json``, or a no-change run's update of it."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


_KEPT = "imagekit needs room there for its logs and report; the previous report is kept"
PROBE_BYTES = 64 << 10


def _probe_room(state_dir: Path) -> None:
    """Fail before any work when the state directory cannot take a report and a few logs."""
    probe = state_dir / f".room-probe.{os.getpid()}.tmp"
    try:
        probe.unlink(missing_ok=True)  # one a killed run left; never a link to write through
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        probe.unlink(missing_ok=True)


@contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """Hold ``state_dir/lock`` exclusively; a second holder fails at once instead of waiting."""
    path = state_dir / LOCK_NAME
    check_length(path, "--state-dir")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: the lock is truncated and written; a link in its place would aim that elsewhere
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(
                f"{path} is a symbolic link; remove it (imagekit never writes through one)"
            ) from None
        problem = os_problem(exc, path, "use")
        if isinstance(problem, InputError):
            raise problem from None
        raise EnvironmentProblem(f"cannot use {path}: {exc.strerror or exc}; {_KEPT}") from None
    try:
        found = os.fstat(fd)
        # A hard link in its place would have another file truncated (O_NOFOLLOW sees only
        # symbolic links); a FIFO or a device is no lock file either.
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            what = (
                "is no regular file" if not stat.S_ISREG(found.st_mode) else "has another name (a hard link)"
            )
            raise InputError(f"{path} {what}; remove it (imagekit writes only a lock file of its own there)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise EnvironmentProblem(
                f"another `imagekit build` (pid {holder}) holds {path}; wait for it to finish"
                " or use another working directory"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _probe_room(state_dir)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot write in {state_dir}: {exc.strerror or exc}; {_KEPT}") from None
        yield
    finally:
        os.close(fd)  # closing releases the flock
