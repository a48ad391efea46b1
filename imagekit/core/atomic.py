"""Whole-file writes: a reader sees the old file or the new one, never half of either.

No file holds a secret value the run knows (``imagekit.core.secret_values``): whatever put it in
the text (a check container's output, an engine's error in a record), it is written masked.

No write goes through a symbolic link or replaces what is not a regular file
(``imagekit.core.paths.check_write_target``): a link planted in an output or state directory could
otherwise point a write anywhere the user may write.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from imagekit.core.paths import check_write_target, os_problem
from imagekit.core.secret_values import mask

# O_NOFOLLOW: the file itself is never a link; O_EXCL: a temporary file is always a new one.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create(path: Path) -> IO[str]:
    """A new file at ``path`` (a leftover one is replaced, its directories made as needed)."""
    try:
        fd = os.open(path, _NEW_FILE, 0o666)
    except FileExistsError:
        path.unlink()  # a leftover (a killed writer's temporary file, an old log): ours to replace
        fd = os.open(path, _NEW_FILE, 0o666)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, _NEW_FILE, 0o666)
    return os.fdopen(fd, "w", encoding="utf-8")


def open_new(path: Path, inside: Path | None = None) -> IO[str]:
    """``path`` opened for writing, replaced if it exists, never through a symbolic link (``path``
    or a directory between ``inside``, default ``path``'s directory, and it)."""
    check_write_target(path, path.parent if inside is None else inside)
    try:
        return _create(path)
    except OSError as exc:
        raise os_problem(exc, path, "write") from None


def atomic_write(path: Path, text: str, inside: Path | None = None) -> None:
    """Write through a temporary file in the same directory, then rename it over ``path``.

    ``inside`` is the directory that was asked for (``--out``, the state directory): no directory
    between it and ``path``, and not ``path``, may be a symbolic link. An OSError becomes the
    one-line error it is: the path's fault (exit 2) or the machine's (exit 3).
    """
    # pid + thread id make the name unique among live writers; one a killed writer left behind
    # is ours to replace.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    check_write_target(path, path.parent if inside is None else inside)
    try:
        with _create(temporary) as handle:  # O_NOFOLLOW|O_EXCL: never through a planted link
            handle.write(mask(text))
        temporary.replace(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise os_problem(exc, path, "write") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_all(files: Mapping[Path, str], inside: Path) -> None:
    """Write a set of files (manifests, configs, Dockerfiles) each atomically, after checking every
    target first: a link, a directory or a FIFO where the last one goes stops the run before the
    first is written, not halfway through the set."""
    for path in files:
        check_write_target(path, inside)
    for path, text in files.items():
        atomic_write(path, text, inside=inside)
