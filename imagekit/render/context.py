"""Build contexts: the files a cell or a local base is built from, hashed and packed as tars.

Headers are normalised (mtime 0, uid/gid 0, fixed modes) so the same inputs give the same bytes:
the engine's layer cache keys COPY steps on file content, and a deterministic tar keeps
benchmark and test runs comparable. Large contexts (a wheelhouse) spill to a temporary file.

File hashes are remembered between runs in the state directory (``hashes.json``), keyed by what a
stat says of the file (path, size, mtime, inode, ctime): a nightly where nothing changed stats each
input instead of reading gigabytes of wheels again. The cache is the state directory's, which
anyone may edit: it is read bounded and strictly, a cache that is not exactly what imagekit writes
is ignored whole (and rewritten), and it only ever supplies a digest, never a decision: a cell is
still skipped only when the engine holds its image (``imagekit.builds.reuse.cell_image``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import ImagekitError, InputError
from imagekit.core.limits import HASH_CACHE_BYTES, MAX_RECORDS
from imagekit.core.paths import FileKey, depends_on, file_key, open_regular_file, read_regular_file
from imagekit.plan.cells import LocalBase

if TYPE_CHECKING:
    import tarfile  # imported where a context is packed: `imagekit plan` hashes, it packs nothing

DOCKERFILE_NAME = "Dockerfile"
HASH_CACHE_NAME = "hashes.json"
HASH_CACHE_VERSION = 1
_SPOOL_LIMIT = 16 << 20
# What a context file is expected to be, for the line that refuses one. It has no size bound of
# its own: a wheel is gigabytes, copied or hashed a block at a time; being a regular file bounds it.
CONTEXT_FILE = "a file of the build context (a wheel, a local base's file)"
# A file whose mtime or ctime is this close to the moment it was hashed is not remembered: a
# write in the same timestamp tick, after the hash, would leave every key field unchanged (git's
# "racily clean" entries). It is hashed again next run, and remembered once it has settled.
_SETTLE_NS = 2_000_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FileHasher:
    """sha256 of files, each read once per process (a wheelhouse is shared by many cells), and
    not at all when ``known`` (the state directory's cache) has the file with the same stat."""

    def __init__(self, known: Mapping[FileKey, str] | None = None) -> None:
        self._known: dict[FileKey, str] = dict(known or {})
        self._cache: dict[FileKey, str] = {}  # this run's answers
        self._settled: dict[FileKey, str] = {}  # those worth remembering for the next run

    def digest(self, path: Path) -> str:
        depends_on(path)  # read, or known by its stat: either way an input of this run
        try:
            stat = path.stat()
            key = file_key(str(path), stat)
            found = self._cache.get(key)
            if found is not None:
                return found
            found = self._known.get(key)
            if found is None:
                found = self._hash(path)
                after = path.stat()
                now = time.time_ns()
                if (
                    file_key(str(path), after) == key
                    and now - stat.st_mtime_ns > _SETTLE_NS
                    and now - stat.st_ctime_ns > _SETTLE_NS
                ):
                    self._settled[key] = found
            else:
                self._settled[key] = found
            self._cache[key] = found
        except OSError as exc:  # a file the matrix brings into a context is the matrix's input
            raise InputError(
                f"cannot read {path} for the build context: {exc.strerror}; fix its permissions"
            ) from None
        return found

    def _hash(self, path: Path) -> str:
        sha = hashlib.sha256()
        # a regular file only, checked on what was opened: a FIFO put in its place since the walk
        # would hold the run, a device never end
        with open_regular_file(path, CONTEXT_FILE) as (fd, _):
            for block in iter(lambda: os.read(fd, 1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()

    # -- the state directory's cache

    @classmethod
    def from_state(cls, state_dir: Path) -> FileHasher:
        """A hasher that knows what the last run in ``state_dir`` hashed (nothing, when its cache
        is missing, unreadable, too large or not exactly what ``save`` writes)."""
        return cls(read_hash_cache(state_dir / HASH_CACHE_NAME))

    def save(self, state_dir: Path) -> None:
        """Remember this run's settled hashes (and the last run's for files not seen this run,
        so a run of a few cells keeps the others') in ``state_dir``: one atomic write, made while
        the caller holds the state directory's lock."""
        entries = dict(self._settled)
        seen = {key[0] for key in self._cache}
        for key, digest in self._known.items():
            if len(entries) >= MAX_RECORDS:
                break
            if key[0] not in seen:
                entries.setdefault(key, digest)
        if entries == self._known:
            return  # nothing new: no write on a no-change run
        files = [[*key, digest] for key, digest in sorted(entries.items())[:MAX_RECORDS]]
        text = json.dumps({"version": HASH_CACHE_VERSION, "files": files}, separators=(",", ":")) + "\n"
        if len(text) <= HASH_CACHE_BYTES:
            atomic_write(state_dir / HASH_CACHE_NAME, text, inside=state_dir)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a key given twice")
    return found


def read_hash_cache(path: Path) -> dict[FileKey, str]:
    """The entries of a hash cache file; empty when there is none or it is not exactly what
    ``FileHasher.save`` writes (a partial or edited cache is never half-trusted)."""
    try:
        raw = read_regular_file(path, HASH_CACHE_BYTES, "the hashes.json imagekit writes")
        document = json.loads(raw, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except (OSError, ImagekitError, ValueError, RecursionError):
        return {}
    if not isinstance(document, dict) or document.keys() != {"version", "files"}:
        return {}
    files = document["files"]
    if document["version"] != HASH_CACHE_VERSION or not isinstance(files, list) or len(files) > MAX_RECORDS:
        return {}
    entries: dict[FileKey, str] = {}
    for entry in files:
        if not (
            isinstance(entry, list)
            and len(entry) == 6
            and isinstance(entry[0], str)
            and all(type(n) is int and n >= 0 for n in entry[1:5])
            and isinstance(entry[5], str)
            and _SHA256.fullmatch(entry[5])
        ):
            return {}
        path_text, size, mtime_ns, inode, ctime_ns, digest = entry
        entries[(path_text, size, mtime_ns, inode, ctime_ns)] = digest
    return entries


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
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if executable else 0o644
    return info


def make_tar(dockerfile: tuple[str, str] | None, files: Iterable[tuple[str, Path]]) -> IO[bytes]:
    """A rewound tar of ``files`` (name in context, source) and, if given, (name, Dockerfile text)."""
    import tarfile

    archive: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_LIMIT)  # noqa: SIM115
    try:
        with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if dockerfile is not None:
                name, text = dockerfile
                data = text.encode()
                tar.addfile(_info(name, len(data), False), io.BytesIO(data))
            for name, path in sorted(files):
                try:
                    with (
                        open_regular_file(path, CONTEXT_FILE) as (fd, found),
                        os.fdopen(fd, "rb", closefd=False) as handle,
                    ):
                        tar.addfile(_info(name, found.st_size, bool(found.st_mode & 0o111)), handle)
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
