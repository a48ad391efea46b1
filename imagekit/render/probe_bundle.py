"""The probe as it ships: one deterministic zipapp of ``imagekit/probe`` per entry point.

Every image carries it at /opt/imagekit/check.py (``python3 /opt/imagekit/check.py`` runs it: Python
runs a zip archive given as a script), every front-end image at /opt/imagekit/frontend_check.py. The
same sources give the same bytes: entries sorted, fixed timestamps and permissions, stored without
compression (no zlib version can change them), no ``__pycache__``; so a cell's input digest, which
hashes its context files, moves only when the probe's sources or the tables it carries (tables.json,
generated from imagekit/data) do.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from functools import cache
from pathlib import Path

from imagekit.core.errors import InputError
from imagekit.core.paths import read_regular_file
from imagekit.facts.probe_tables import tables_json
from imagekit.probe.tables import TABLES_NAME

PROBE_DIR = Path(__file__).parent.parent / "probe"
PACKAGE = "imagekit_probe"  # the probe's package name inside the archive (its imports are relative)
SHEBANG = b"#!/usr/bin/env python3\n"
DATE_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can say
MODE = 0o644
CACHE_ENV = "IMAGEKIT_CACHE_DIR"
# entry point -> the module whose main() the archive's __main__ runs
ENTRIES = {"check": "run", "frontend": "frontends.run"}
MAIN = "import sys\n\nfrom {package}.{module} import main\n\nsys.exit(main())\n"


def probe_sources() -> list[tuple[str, bytes]]:
    """(name in the archive, bytes) of every module of the probe package, its subpackages' too, and
    of the tables it reads (generated from imagekit/data: ``imagekit.facts.probe_tables``), sorted
    by name."""
    files = sorted(p for p in PROBE_DIR.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)
    members = [(f"{PACKAGE}/{path.relative_to(PROBE_DIR).as_posix()}", path.read_bytes()) for path in files]
    members.append((f"{PACKAGE}/{TABLES_NAME}", tables_json()))
    return sorted(members)


def _entry(name: str, data: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name, date_time=DATE_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # unix: the mode below is read as st_mode
    info.external_attr = (0o100000 | MODE) << 16
    return info, data


def build_zipapp(entry: str = "check") -> bytes:
    """The zipapp's bytes: a shebang line, then a zip of the probe and a ``__main__`` for ``entry``."""
    module = ENTRIES[entry]
    members = [("__main__.py", MAIN.format(package=PACKAGE, module=module).encode()), *probe_sources()]
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in sorted(members):
            info, payload = _entry(name, data)
            archive.writestr(info, payload)
    return buffer.getvalue()


def _cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return (Path(configured) if configured else Path.home() / ".cache" / "imagekit") / "probe"


def _write_once(directory: Path, name: str, data: bytes) -> Path:
    """``directory/name`` holding ``data``: written whole (a temporary file, then a rename) unless a
    file with those bytes is already there."""
    path = directory / name
    try:
        # no link, no more than ``data``'s bytes, a regular file: anything else there is not
        # this probe, and is replaced whole below, never read (a FIFO would hold the run)
        if read_regular_file(path, len(data), "the probe imagekit caches", follow_links=False) == data:
            return path
    except (OSError, InputError):
        pass
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        Path(temporary).chmod(MODE)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


@cache
def zipapp_path(entry: str = "check") -> Path:
    """A file holding ``build_zipapp(entry)``: a build context copies it, a digest hashes it. Kept in
    the cache directory under its own digest (so a path never changes content), or, where that
    cannot be written, in a fresh directory under the temporary directory."""
    data = build_zipapp(entry)
    name = "frontend_check.py" if entry == "frontend" else "check.py"
    digest = hashlib.sha256(data).hexdigest()
    try:
        return _write_once(_cache_root() / digest, name, data)
    except OSError:
        return _write_once(Path(tempfile.mkdtemp(prefix="imagekit-probe-")), name, data)
