"""``images.lock.json``: what was published, by digest, and how each image was verified.

Other tools (Kubernetes manifests, CI pinning, ``imagekit images --format env``) read this file
instead of a moving tag. It is replaced in one atomic write and merged per cell, so publishing
one cell keeps the entries of the others. It never holds a credential.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from imagekit import naming
from imagekit.atomic import atomic_write
from imagekit.errors import InputError
from imagekit.limits import MAX_ITEMS, MAX_RECORDS, STATE_BYTES
from imagekit.naming import by_digest
from imagekit.paths import read_regular_file
from imagekit.safetypes import (
    RECORD_CONFIG,
    CellId,
    Count,
    Expectation,
    ExpectationName,
    GpuText,
    ImageDigest,
    ImageTag,
    InputDigest,
    Items,
    JsonScalars,
    Registry,
    RepositoryName,
    ScriptPath,
    Seconds,
    ShortText,
    Timestamp,
    parse_json_object,
    validate_json,
)
from imagekit.schema import PublishPolicy, ServedFrontend
from imagekit.text import shown

LOCK_NAME = "images.lock.json"
LOCK_VERSION = 1
_FIX = "fix it, or publish again (`imagekit publish` rewrites the entries it publishes)"


@dataclass(frozen=True)
class ChecksSummary:
    __pydantic_config__ = RECORD_CONFIG

    passed: Count
    failed: Count
    skipped: Count
    failed_names: Annotated[tuple[ShortText, ...], Items(MAX_ITEMS)] = ()
    metrics: Annotated[Mapping[str, Any], JsonScalars()] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifiedBy:
    """How and when an image was verified (None in a lock entry: published unverified)."""

    __pydantic_config__ = RECORD_CONFIG

    verdict: Literal["validated", "checked", "failed"]  # a failed image is never published
    gpus: GpuText
    gpu_requested: bool
    gpu_visible: bool
    verified_at: Timestamp | None  # ISO 8601 UTC, when the verdict was reached
    duration_s: Seconds
    checks: ChecksSummary


@dataclass(frozen=True)
class DigestChain:
    """The manifest digest at each step: staged (build --push or publish's own push), verified
    (what the checks ran on, when known), promoted (what the final tags name)."""

    __pydantic_config__ = RECORD_CONFIG

    staged: ImageDigest | None
    verified: ImageDigest | None
    promoted: ImageDigest

    @property
    def equal(self) -> bool:
        return self.staged == self.verified == self.promoted


@dataclass(frozen=True)
class Provenance:
    """Where an image was verified, from its check results, and its digest chain."""

    __pydantic_config__ = RECORD_CONFIG

    gpus: Annotated[tuple[ShortText, ...], Items(MAX_ITEMS)]  # GPU names nvidia-smi listed; ()
    driver: ShortText | None  # the host's NVIDIA driver version
    cuda_driver: ShortText | None  # the CUDA version the driver supports
    checks_passed: Count
    checks_total: Count
    note: ShortText | None  # why GPU, driver or CUDA driver are unknown, when they are
    digest_chain: DigestChain

    def as_json(self) -> dict[str, Any]:
        chain = self.digest_chain
        return {
            "gpus": list(self.gpus),
            "driver": self.driver,
            "cuda_driver": self.cuda_driver,
            "checks_passed": self.checks_passed,
            "checks_total": self.checks_total,
            "note": self.note,
            "digest_chain": {
                "staged": chain.staged,
                "verified": chain.verified,
                "promoted": chain.promoted,
                "equal": chain.equal,
            },
        }


@dataclass(frozen=True)
class LockEntry:
    """One published image. Every field is checked when the lock is read: its values go into
    shell lines (``images --format env``) and Kubernetes Jobs (image, command)."""

    __pydantic_config__ = RECORD_CONFIG

    cell: CellId
    registry: Registry
    repository: RepositoryName  # registry/repository, without tag
    digest: ImageDigest  # manifest digest: what `repository@digest` pulls, forever
    tags: Annotated[tuple[ImageTag, ...], Items(MAX_ITEMS)]  # readable (moving) first, then immutable
    image_id: ImageDigest
    input_digest: InputDigest
    policy: PublishPolicy  # the matrix's publish policy then
    level: Literal["validated", "checked", "built"]  # what the image actually passed
    published_at: Timestamp
    verification: VerifiedBy | None
    # the check script's expectations (its --expect-* options)
    expect: Mapping[ExpectationName, Expectation] = field(default_factory=dict)
    check_script: ScriptPath | None = None
    frontend: ServedFrontend | None = None  # served as a Deployment, not run as a Job
    provenance: Provenance | None = None  # where it was verified; staged = verified = promoted

    @property
    def reference(self) -> str:
        return by_digest(self.repository, self.digest)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["reference"] = self.reference
        data["expect"] = dict(self.expect)
        data["provenance"] = self.provenance.as_json() if self.provenance is not None else None
        if self.verification is not None:
            data["verification"]["checks"]["failed_names"] = list(self.verification.checks.failed_names)
            data["verification"]["checks"]["metrics"] = dict(self.verification.checks.metrics)
        return data


@dataclass(frozen=True)
class _LockFile:
    __pydantic_config__ = RECORD_CONFIG

    version: int
    images: Annotated[Mapping[CellId, LockEntry], Items(MAX_RECORDS)]


def read_lock(path: Path) -> dict[str, LockEntry]:
    """Cell id -> entry; an absent file is an empty lock. Every field is checked by its type and
    pattern (the lock may have been edited, or come from elsewhere); the first wrong one is one
    InputError naming the file and the field."""
    try:
        raw = read_regular_file(path, STATE_BYTES, "the images.lock.json `imagekit publish` writes")
    except FileNotFoundError:
        return {}
    return parse_lock(raw, path)


def parse_lock(raw: bytes, path: Path) -> dict[str, LockEntry]:
    """A lock file's bytes as entries, every field checked (see ``read_lock``)."""
    data = parse_json_object(raw, str(path), "lock file", _FIX, version=LOCK_VERSION)
    images = data.get("images")
    if isinstance(images, dict) and len(images) > MAX_RECORDS:  # before the records are built
        raise InputError(f"{path}: images: {len(images):,} entries; a lock holds at most {MAX_RECORDS:,}")
    del data, images
    entries = dict(validate_json(_LockFile, raw, str(path), _FIX).images)
    for cell, entry in entries.items():
        where = f"{path}: images.{cell}"
        if entry.cell != cell:
            raise InputError(f"{where}.cell: {entry.cell!r} is another cell's id; {_FIX}")
        if entry.repository.split("/", 1)[0] != entry.registry or "/" not in entry.repository:
            raise InputError(
                f"{where}.repository: {entry.repository!r} is not on the entry's registry"
                f" {entry.registry!r}; {_FIX}"
            )
    return entries


def as_document(entries: Mapping[str, LockEntry]) -> dict[str, Any]:
    return {"version": LOCK_VERSION, "images": {cell: entries[cell].as_json() for cell in sorted(entries)}}


def merge_lock(path: Path, new: Mapping[str, LockEntry]) -> dict[str, LockEntry]:
    """Replace ``new``'s cells in the lock at ``path``, keep the rest; one atomic write."""
    entries = {**read_lock(path), **new}
    if len(entries) > MAX_RECORDS:  # a lock its own reader would refuse is never written
        raise InputError(
            f"{path}: the lock would hold {len(entries):,} images; a lock holds at most {MAX_RECORDS:,}:"
            " split the matrix into several locks (--lock)"
        )
    text = json.dumps(as_document(entries), indent=2, sort_keys=True) + "\n"
    # Written only if it reads back: a value past a reader's bound (a long repository name, an
    # image's odd label) must not leave a lock that every later `images` or `k8s` refuses.
    if len(text.encode()) > STATE_BYTES:
        raise InputError(
            f"{path}: the lock would be larger than {STATE_BYTES:,} bytes; the previous lock is kept"
        )
    try:
        parse_lock(text.encode(), path)
    except InputError as exc:
        raise InputError(f"the lock would not read back ({exc.message}); the previous lock is kept") from None
    atomic_write(path, text)
    return entries


_ENV_NAME = re.compile(r"IMAGEKIT_IMAGE_[A-Z0-9_]+")


def env_name(cell: str) -> str:
    """The variable a cell's reference is printed as: ``IMAGEKIT_IMAGE_`` and the id in capitals,
    every other character an underscore; a name that is no shell variable is refused."""
    name = "IMAGEKIT_IMAGE_" + re.sub(r"[^A-Z0-9]+", "_", cell.upper()).strip("_")
    if not _ENV_NAME.fullmatch(name):
        raise InputError(f"cell {cell!r} gives no variable name ({name!r})")
    return name


def env_lines(entries: Mapping[str, LockEntry]) -> str:
    """``NAME='repo@sha256:...'`` lines that are safe to ``eval``: each name is derived from a
    checked cell id and each value quoted for the shell (a checked value needs no quoting; quoting
    anyway keeps that true if a check ever weakens)."""
    names: dict[str, str] = {}
    lines = []
    for cell in sorted(entries):
        name = env_name(cell)
        if name in names:
            raise InputError(
                f"cells {names[name]} and {cell} are one variable ({name}) in --format env; use json"
            )
        names[name] = cell
        lines.append(f"{name}={shlex.quote(entries[cell].reference)}\n")
    return "".join(lines)


def render_lock(entries: Mapping[str, LockEntry], fmt: str) -> str:
    """The lock as json, yaml, or env (``IMAGEKIT_IMAGE_<CELL>=repo@sha256:...`` lines)."""
    if fmt == "json":
        return json.dumps(as_document(entries), indent=2, sort_keys=True) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(as_document(entries), sort_keys=True)
    if fmt == "env":
        return env_lines(entries)
    raise InputError(f"--format {shown(fmt)}: use json, yaml or env")


def entries_for(
    entries: Mapping[str, LockEntry], cells: Sequence[str], repository_path: str, lock: Path
) -> dict[str, LockEntry]:
    """The entries of ``cells``, each of which must be published, and to the matrix's repository
    (re-derived from the matrix: a lock entry never names where a Job pulls from on its own)."""
    missing = [cell for cell in cells if cell not in entries]
    if missing:
        raise InputError(
            f"{lock} has no digest for {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more cells" if len(missing) > 3 else "")
            + "; run `imagekit publish` (or narrow --only)"
        )
    for cell in cells:
        entry = entries[cell]
        expected = naming.repository(entry.registry, repository_path)
        if entry.repository != expected:
            raise InputError(
                f"{lock}: images.{cell}.repository: {entry.repository} is not the matrix's"
                f" repository ({expected}); publish again, or fix the file"
            )
    return {cell: entries[cell] for cell in cells}
