"""Build contexts: the files a cell or a local base is built from, hashed and packed as tars.

Headers are normalised (mtime 0, uid/gid 0, fixed modes) so the same inputs give the same bytes:
the engine's layer cache keys COPY steps on file content, and a deterministic tar keeps
benchmark and test runs comparable. Large contexts (a wheelhouse) spill to a temporary file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from imagekit.cells import LocalBase
from imagekit.errors import InputError

DOCKERFILE_NAME = "Dockerfile"
_SPOOL_LIMIT = 16 << 20


class FileHasher:
    """sha256 of files, each read once per process (a wheelhouse is shared by many cells)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int], str] = {}

    def digest(self, path: Path) -> str:
        try:
            stat = path.stat()
            key = (str(path), stat.st_size, stat.st_mtime_ns)
            found = self._cache.get(key)
            if found is None:
                sha = hashlib.sha256()
                with path.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        sha.update(block)
                found = sha.hexdigest()
                self._cache[key] = found
        except OSError as exc:  # a file the matrix brings into a context is the matrix's input
            raise InputError(
                f"cannot read {path} for the build context: {exc.strerror}; fix its permissions"
            ) from None
        return found


def walk_context(root: Path, boundary: Path, where: str) -> Iterator[tuple[str, Path]]:
    """Files under ``root`` as (relative posix path, path), refusing links that leave ``boundary``,
    names that are not UTF-8 (a tar header and a digest line need text) and directories that
    cannot be read. A link to nothing (or to itself) is not a file and is left out, as is a FIFO."""
    if not root.is_dir():
        raise InputError(f"{where}: directory {root} does not exist; create or fill it first")
    # os.path.realpath, not Path.resolve: a link loop must not raise RuntimeError
    boundary = Path(os.path.realpath(boundary))

    def unreadable(exc: OSError) -> None:
        raise InputError(f"{where}: cannot read {exc.filename}: {exc.strerror}; fix its permissions")

    for directory, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if (Path(directory) / d).is_symlink()]:
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            try:
                relative.encode("utf-8")
            except UnicodeEncodeError:
                shown = relative.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                raise InputError(f"{where}: file name {shown!r} is not UTF-8; rename it") from None
            resolved = Path(os.path.realpath(path))
            if not resolved.is_relative_to(boundary):
                raise InputError(
                    f"{where}: {path} links outside {boundary}; copy the file in instead of linking"
                )
            if resolved.is_file():
                yield relative, path


def local_base_digest(base: LocalBase, hasher: FileHasher) -> str:
    """A digest of a local base's context: cells built on it change when it changes."""
    sha = hashlib.sha256()
    for name, path in walk_context(base.context, base.context, f"base {base.name}"):
        sha.update(f"{name}\0{hasher.digest(path)}\n".encode())
    sha.update(json.dumps([base.image, base.dockerfile, base.args]).encode())
    return sha.hexdigest()


def _info(name: str, size: int, executable: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if executable else 0o644
    return info


def make_tar(dockerfile: tuple[str, str] | None, files: Iterable[tuple[str, Path]]) -> IO[bytes]:
    """A rewound tar of ``files`` (name in context, source) and, if given, (name, Dockerfile text)."""
    archive: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_LIMIT)  # noqa: SIM115
    try:
        with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if dockerfile is not None:
                name, text = dockerfile
                data = text.encode()
                tar.addfile(_info(name, len(data), False), io.BytesIO(data))
            for name, path in sorted(files):
                try:
                    stat = path.stat()
                    with path.open("rb") as handle:
                        tar.addfile(_info(name, stat.st_size, bool(stat.st_mode & 0o111)), handle)
                except OSError as exc:
                    raise InputError(f"cannot read {path} for the build context: {exc.strerror}") from None
        archive.seek(0)
    except BaseException:
        archive.close()
        raise
    return archive


def local_base_context(base: LocalBase) -> IO[bytes]:
    files = list(walk_context(base.context, base.context, f"base {base.name}"))
    return make_tar(None, files)
