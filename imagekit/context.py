"""Build contexts as tar archives: the Dockerfile text plus the files a rendered cell names.

Headers are normalised (mtime 0, uid/gid 0, fixed modes) so the same inputs give the same bytes:
the engine's layer cache keys COPY steps on file content, and a deterministic tar keeps
benchmark and test runs comparable. Large contexts (a wheelhouse) spill to a temporary file.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from imagekit.errors import InputError
from imagekit.matrix import LocalBase
from imagekit.render import RenderedCell, walk_context

DOCKERFILE_NAME = "Dockerfile"
_SPOOL_LIMIT = 16 << 20


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


def cell_context(rendered: RenderedCell) -> IO[bytes]:
    return make_tar((DOCKERFILE_NAME, rendered.dockerfile), rendered.context_files)


def local_base_context(base: LocalBase) -> IO[bytes]:
    files = list(walk_context(base.context, base.context, f"base {base.name}"))
    return make_tar(None, files)
