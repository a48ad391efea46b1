"""Where two images of one cell part: ``rebuild-check``'s comparison, on bytes already read (no I/O
but the streams it is handed).

Layer by layer, the image config's ``rootfs.diff_ids`` first: a diff_id is the sha256 of the
uncompressed tar, so a mismatch there is *content* (a file, a time, a mode). Equal diff_ids under
different layer digests are the same tar compressed otherwise (another compressor or level, the
BuildKit and Go library of the builder). Then the config (labels, env, history) and the manifest
(annotations, media types). For the first layer whose content differs, both tars are listed entry
by entry (streamed, bounded by ``REBUILD_TAR_*``) and the first entries that differ are named.

Both images are trusted no more than a file: a tar entry's name is shown escaped, a link is
recorded and never followed, an entry whose size passes the bytes budget stops the listing with a
note, and a tar that ends early or is malformed is a note too, never a traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Literal

from imagekit.core.limits import (
    REBUILD_SHOWN_ENTRIES,
    REBUILD_TAR_BYTES,
    REBUILD_TAR_ENTRIES,
    REBUILD_TAR_HEADER_BYTES,
)
from imagekit.core.text import printable
from imagekit.registry.manifest import Descriptor, Manifest
from imagekit.report.pullcost import steps

_TYPES = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.LNKTYPE: "hardlink",
    tarfile.SYMTYPE: "symlink",
    tarfile.CHRTYPE: "char",
    tarfile.BLKTYPE: "block",
    tarfile.DIRTYPE: "dir",
    tarfile.FIFOTYPE: "fifo",
    tarfile.CONTTYPE: "file",
}
NAME_CHARS = 300  # an entry's name or link target as a verdict shows it


Layer = Descriptor  # a layer as its manifest names it: media type, digest, size


@dataclass(frozen=True)
class Image:
    """One image as the comparison reads it: its manifest and config, parsed and checked."""

    manifest_digest: str
    manifest: Mapping[str, Any]
    config_digest: str
    config: Mapping[str, Any]
    config_bytes: bytes
    layers: tuple[Layer, ...]
    diff_ids: tuple[str, ...]


def read_image(manifest: Manifest, config: bytes, where: str) -> Image:
    """``where``'s image from its manifest and config bytes, the image record every reader takes
    (``imagekit.registry.manifest``); RegistryError (one line) for what no image is: a layer of a
    size out of bounds or no sha256 digest, a config other than the one named, diff_ids that are
    no digests or not one per layer, more layers than any engine runs. Nothing is compared then."""
    then = "nothing compared"
    record = manifest.image(where, then)
    settings = record.read_config(config, where, then)
    return Image(
        manifest.digest,
        record.document,
        record.config.digest,
        settings.document,
        config,
        record.layers,
        settings.diff_ids,
    )


def built_by_buildkit(config: Mapping[str, Any]) -> bool:
    """Whether BuildKit made the image: its Dockerfile frontend marks each step's history entry."""
    history = config.get("history")
    return isinstance(history, list) and any(
        isinstance(h, dict) and str(h.get("comment", "")).startswith("buildkit.dockerfile") for h in history
    )


# -- the verdict --------------------------------------------------------------------------------------

Kind = Literal["layers", "content", "compression", "config", "manifest"]


@dataclass(frozen=True)
class Difference:
    """Where the rebuilt image first parts from the published one."""

    kind: Kind
    detail: str
    layer: int | None = None  # 0-based, of the published image
    step: str = ""  # the Dockerfile step that made it (history's created_by)
    entries: tuple[EntryDifference, ...] = ()
    note: str = ""  # why the entry listing stopped short, or could not be made

    def line(self) -> str:
        where = f"layer {self.layer} ({self.step}) " if self.layer is not None else ""
        return printable(f"differs: {where}{self.detail}")


def _keys_differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ; a list's first differing item named with both values
    (``history[4] {...} -> {...}``), clipped: which step's record moved, not only that one did."""
    found = []
    for key in sorted(str(k) for k in set(a) | set(b) if a.get(k) != b.get(k)):
        mine, other = a.get(key), b.get(key)
        where = ""
        if isinstance(mine, list) and isinstance(other, list):
            at = next((i for i, (x, y) in enumerate(zip(mine, other, strict=False)) if x != y), None)
            where = (
                f" ({len(mine)} -> {len(other)} items)"
                if at is None
                else f"[{at}] {_clip(mine[at])} -> {_clip(other[at])}"
            )
        found.append(key + where)
    return found


def _clip(value: Any) -> str:
    text = printable(json.dumps(value, sort_keys=True))
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 3] + "..."


def compare(published: Image, rebuilt: Image) -> Difference | None:
    """The first place ``rebuilt`` differs from ``published``; None when they are the same image."""
    made_by = steps(published.config_bytes, len(published.layers))
    for i, (theirs, ours) in enumerate(zip(published.diff_ids, rebuilt.diff_ids, strict=False)):
        if theirs != ours:
            return Difference(
                "content", f"content differs (diff_id {theirs} -> {ours})", i, _step(made_by, i)
            )
    if len(published.diff_ids) != len(rebuilt.diff_ids):
        return Difference(
            "layers", f"the image has {len(published.diff_ids)} layers, the rebuild {len(rebuilt.diff_ids)}"
        )
    for i, (mine, other) in enumerate(zip(published.layers, rebuilt.layers, strict=False)):
        if mine.digest != other.digest:
            return Difference(
                "compression",
                f"same content (diff_id), other compressed bytes ({mine.media_type} {mine.digest} ->"
                f" {other.media_type} {other.digest}): another compressor or level, not another file",
                i,
                _step(made_by, i),
            )
    if published.config_digest != rebuilt.config_digest:
        keys = _keys_differing(published.config, rebuilt.config)
        inner_a, inner_b = published.config.get("config"), rebuilt.config.get("config")
        if "config" in keys and isinstance(inner_a, dict) and isinstance(inner_b, dict):
            keys = [k for k in keys if k != "config"] + [
                f"config.{k}" for k in _keys_differing(inner_a, inner_b)
            ]
        return Difference(
            "config",
            f"the config differs ({published.config_digest} -> {rebuilt.config_digest}):"
            f" {', '.join(keys) or 'its bytes'}",
        )
    if published.manifest_digest != rebuilt.manifest_digest:
        keys = _keys_differing(published.manifest, rebuilt.manifest)
        return Difference(
            "manifest",
            f"the manifest differs ({published.manifest_digest} -> {rebuilt.manifest_digest}):"
            f" {', '.join(keys) or 'its bytes (key order, spacing)'}",
        )
    return None


def _step(made_by: tuple[str, ...], i: int) -> str:
    return made_by[i] if i < len(made_by) else "unknown"


# -- tar entries --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One tar entry as compared: everything a layer's diff_id covers but the padding."""

    name: str
    type: str
    mode: str
    uid: int
    gid: int
    mtime: int
    size: int
    sha256: str = ""  # a regular file's content; "" for others, "unread" past the bytes budget
    link: str = ""  # a link's target, never followed


@dataclass
class Listing:
    entries: dict[str, Entry] = field(default_factory=dict)
    stopped: str = ""  # why the listing ended before the tar did


@dataclass(frozen=True)
class EntryDifference:
    name: str
    published: Entry | None  # None: only in the rebuild
    rebuilt: Entry | None  # None: only in the published image

    def line(self) -> str:
        if self.rebuilt is None:
            return f"{self.name}: only in the published image"
        if self.published is None:
            return f"{self.name}: only in the rebuild"
        a, b = asdict(self.published), asdict(self.rebuilt)
        changed = [f"{k} {a[k]} -> {b[k]}" for k in a if k != "name" and a[k] != b[k]]
        return f"{self.name}: {'; '.join(changed)}"


def _shown_name(raw: str) -> str:
    text = printable(raw)
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 3] + "..."


class _Counted:
    """A stream that refuses to be read past ``limit`` bytes in all: tarfile reads a pax header or
    a GNU long name whole into memory, so what one header may take is bounded here, not by it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.total = 0
        self.limit = REBUILD_TAR_HEADER_BYTES

    def read(self, size: int = -1) -> bytes:
        allowed = self.limit - self.total
        data = self.raw.read(allowed + 1 if size < 0 or size > allowed + 1 else size)
        self.total += len(data)
        if self.total > self.limit:
            raise OSError(f"an entry's header or content runs past {self.limit:,} bytes read")
        return data


def list_entries(
    stream: IO[bytes], entries: int = REBUILD_TAR_ENTRIES, budget: int = REBUILD_TAR_BYTES
) -> Listing:
    """The entries of an uncompressed tar stream, read once, front to back; at most ``entries``
    of them and ``budget`` bytes of content (hashed or skipped past). Never raises on what the
    tar holds: a malformed or short tar ends the listing with ``stopped`` saying so."""
    listing = Listing()
    left = budget
    counted = _Counted(stream)
    try:
        tar = tarfile.open(fileobj=counted, mode="r|")  # type: ignore[call-overload]  # noqa: SIM115 (a stream: nothing to close but ``stream``, the caller's)
        while (member := tar.next()) is not None:
            name = _shown_name(member.name)
            if len(listing.entries) >= entries:
                listing.stopped = f"listing stopped after {entries:,} entries"
                break
            if member.size > left:
                # skipping past it would read as many bytes: an absurd size is stopped here
                listing.entries[name] = _entry(member, name, "unread")
                listing.stopped = f"listing stopped at {name} ({member.size:,} bytes, past the bytes read)"
                break
            left -= member.size
            # this entry's content (hashed, or skipped by the next header's read), then one header
            counted.limit = counted.total + member.size + REBUILD_TAR_HEADER_BYTES
            listing.entries[name] = _entry(member, name, _content_sha256(tar, member))
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as exc:
        listing.stopped = (
            f"the tar ends early or is malformed after {len(listing.entries):,} entries"
            f" ({printable(str(exc))[:160]})"
        )
    return listing


def _entry(member: tarfile.TarInfo, name: str, sha256: str) -> Entry:
    return Entry(
        name=name,
        type=_TYPES.get(member.type, f"type {printable(member.type.decode('latin-1'))}"),
        mode=oct(member.mode & 0o7777),
        uid=member.uid,
        gid=member.gid,
        mtime=int(member.mtime),
        size=member.size,
        sha256=sha256,
        link=_shown_name(member.linkname) if member.issym() or member.islnk() else "",
    )


def _content_sha256(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    if not member.isreg():
        return ""
    handle = tar.extractfile(member)
    if handle is None:
        return ""
    sha = hashlib.sha256()
    while chunk := handle.read(1 << 20):
        sha.update(chunk)
    return sha.hexdigest()


def first_differences(
    published: Listing, rebuilt: Listing, shown: int = REBUILD_SHOWN_ENTRIES
) -> tuple[EntryDifference, ...]:
    """The first ``shown`` entries that differ, in the published tar's order, then those only in
    the rebuild. A name missing from a listing that stopped short is not called missing."""
    found: list[EntryDifference] = []
    for name, entry in published.entries.items():
        other = rebuilt.entries.get(name)
        if other is None and rebuilt.stopped:
            continue
        if other != entry:
            found.append(EntryDifference(name, entry, other))
            if len(found) >= shown:
                return tuple(found)
    if not published.stopped:
        for name, entry in rebuilt.entries.items():
            if name not in published.entries:
                found.append(EntryDifference(name, None, entry))
                if len(found) >= shown:
                    break
    return tuple(found)


@contextmanager
def uncompressed(blob: IO[bytes], media_type: str) -> Iterator[IO[bytes]]:
    """A layer blob's tar, decompressed as it is read: gzip here, zstd through the `zstd` program
    (Python 3.11 has no zstd decoder), an uncompressed tar as it is."""
    if media_type.endswith("+zstd") or media_type.endswith(".zstd"):
        program = shutil.which("zstd")
        if program is None:
            raise LayerUnreadable("a zstd layer, and there is no `zstd` program on PATH to list its entries")
        process = subprocess.Popen(
            [program, "-dcq"], stdin=blob, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert process.stdout is not None
        try:
            yield process.stdout
        finally:
            process.stdout.close()
            process.kill()
            process.wait()
    elif media_type.endswith("gzip"):
        with gzip.GzipFile(fileobj=blob, mode="rb") as unpacked:
            yield unpacked  # type: ignore[misc]
    else:
        yield blob


class LayerUnreadable(Exception):
    """A layer whose entries cannot be listed here: the verdict keeps its note."""
