"""``images.lock.json``: what was published, by digest, and how each image was verified.

Other tools (Kubernetes manifests, CI pinning, ``imagekit images --format env``) read this file
instead of a moving tag. It is replaced in one atomic write and merged per cell (and per image
index), so publishing one cell keeps the entries of the others. It never holds a credential.

``images`` holds one entry per published cell, by its own manifest digest and platform;
``indexes`` one per group published as an OCI image index (the platforms of one readable tag):
the index digest, each platform's cell, digest and verdict, and the platforms left out. A lock
written before indexes existed reads as one without any.

An entry's verification and provenance are made here too (``verified_by``, ``provenance``), from
the verification record alone: the checks' summary; the GPU names, driver and CUDA driver versions
as the check script's nvidia_smi and driver checks read them; the digest chain staged -> verified
-> promoted. A check's odd output names nothing rather than failing.
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

from imagekit.core import naming, platforms
from imagekit.core.atomic import atomic_write
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_ITEMS, MAX_RECORDS, STATE_BYTES
from imagekit.core.naming import by_digest
from imagekit.core.paths import read_regular_file
from imagekit.core.platforms import PlatformName
from imagekit.core.safetypes import (
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
from imagekit.core.text import shown
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.plan.schema_values import PublishPolicy, ServedFrontend
from imagekit.probe.protocol import DRIVER, NVIDIA_SMI, PASS, SKIP
from imagekit.report.verification import CheckRecord, Verification, json_or_text

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


# -- an entry's verification and provenance, read from the verification record ---------------------

NO_GPU_NOTE = "verified without a visible GPU: GPU names, driver and CUDA driver version are unknown"
UNVERIFIED_NOTE = "never verified: no GPU, driver or check to name"


def verified_by(verification: Verification | None) -> VerifiedBy | None:
    if verification is None:
        return None
    failed = verification.failed_checks()
    return VerifiedBy(
        verdict=verification.verdict,
        gpus=verification.gpus,
        gpu_requested=verification.gpu_requested,
        gpu_visible=verification.gpu_visible,
        verified_at=verification.finished_at,
        duration_s=verification.duration_s,
        checks=ChecksSummary(
            passed=verification.count(PASS),
            failed=len(failed),  # any status but pass and skip, as the verdict counts it
            skipped=verification.count(SKIP),
            failed_names=tuple(c.name for c in failed),
            metrics=dict(verification.metrics),
        ),
    )


def provenance(verification: Verification | None, staged: str | None, promoted: str) -> Provenance:
    """Where the image was verified (from the check script's nvidia_smi and driver checks) and
    the digest chain staged -> verified -> promoted."""
    chain = DigestChain(
        staged=staged,
        verified=verification.image_digest if verification else None,
        promoted=promoted,
    )
    if verification is None:
        return Provenance((), None, None, 0, 0, UNVERIFIED_NOTE, chain)
    by_name = {c.name: c for c in verification.checks}
    gpus, driver, cuda_driver = _from_nvidia_smi(by_name.get(NVIDIA_SMI))
    driver, cuda_driver = _from_driver_check(by_name.get(DRIVER), driver, cuda_driver)
    note = None if verification.gpu_visible else NO_GPU_NOTE
    passed = verification.count(PASS)
    return Provenance(tuple(gpus), driver, cuda_driver, passed, len(verification.checks), note, chain)


def _from_nvidia_smi(smi: CheckRecord | None) -> tuple[list[str], str | None, str | None]:
    """The GPU names, driver and CUDA driver version a passed nvidia_smi check read."""
    gpus: list[str] = []
    driver: str | None = None
    cuda_driver: str | None = None
    if smi is None or smi.status != PASS:
        return gpus, driver, cuda_driver
    actual = json_or_text(smi.actual)
    if isinstance(actual, dict):
        gpus = [str(g["name"]) for g in actual.get("gpus") or () if isinstance(g, dict) and g.get("name")]
        driver = str(actual["driver"]) if actual.get("driver") else None
    detail = json_or_text(smi.detail)
    header = detail.get("header") if isinstance(detail, dict) else None
    if isinstance(header, dict) and header.get("cuda"):
        cuda_driver = str(header["cuda"])
    return gpus, driver, cuda_driver


def _from_driver_check(
    check: CheckRecord | None, driver: str | None, cuda_driver: str | None
) -> tuple[str | None, str | None]:
    """The driver (where nvidia_smi named none) and the host's CUDA driver version (over
    nvidia_smi's) a passed driver check read."""
    if check is None or check.status != PASS:
        return driver, cuda_driver
    driver = driver or (check.actual if check.actual and not check.actual.startswith("{") else None)
    detail = json_or_text(check.detail)
    if isinstance(detail, dict) and detail.get("host_cuda"):
        cuda_driver = str(detail["host_cuda"])
    return driver, cuda_driver


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
    platform: PlatformName = platforms.DEFAULT  # what its image runs on
    # the advisories that affect what it installs, each waived by the matrix (with the reason) or
    # below its threshold when it was published; none in locks of earlier releases
    advisories: Annotated[tuple[AdvisoryFinding, ...], Items(MAX_ITEMS)] = ()

    @property
    def reference(self) -> str:
        return by_digest(self.repository, self.digest)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["reference"] = self.reference
        data["expect"] = dict(self.expect)
        data["provenance"] = self.provenance.as_json() if self.provenance is not None else None
        data["advisories"] = [finding.as_json() for finding in self.advisories]
        if self.verification is not None:
            data["verification"]["checks"]["failed_names"] = list(self.verification.checks.failed_names)
            data["verification"]["checks"]["metrics"] = dict(self.verification.checks.metrics)
        return data


Verdict = Literal["validated", "checked", "built"]


@dataclass(frozen=True)
class IndexPlatform:
    """One platform's image in a published index: its cell, manifest digest and verdict."""

    __pydantic_config__ = RECORD_CONFIG

    cell: CellId
    digest: ImageDigest
    verdict: Verdict


@dataclass(frozen=True)
class LeftOut:
    """A platform of the group that is not in its index (publish.partial_index), and why."""

    __pydantic_config__ = RECORD_CONFIG

    cell: CellId
    reason: ShortText


@dataclass(frozen=True)
class LockIndex:
    """One group published as an OCI image index: the readable and immutable tags name it."""

    __pydantic_config__ = RECORD_CONFIG

    group: ImageTag  # the readable tag the group's cells share, before the level's suffix
    registry: Registry
    repository: RepositoryName  # registry/repository, without tag
    digest: ImageDigest  # the index's manifest digest
    tags: Annotated[tuple[ImageTag, ...], Items(MAX_ITEMS)]  # readable (moving) first, then immutable
    input_digest: InputDigest  # the group's: sha256 of its sorted "<platform> <input digest>" lines
    policy: PublishPolicy
    level: Verdict  # its least verified platform's
    published_at: Timestamp
    platforms: Annotated[Mapping[PlatformName, IndexPlatform], Items(len(platforms.NAMES))]
    missing: Annotated[Mapping[PlatformName, LeftOut], Items(len(platforms.NAMES))] = field(
        default_factory=dict
    )

    @property
    def reference(self) -> str:
        return by_digest(self.repository, self.digest)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["reference"] = self.reference
        return data


@dataclass(frozen=True)
class Lock:
    """A lock file read: the published images by cell, the indexes by group."""

    images: Mapping[str, LockEntry] = field(default_factory=dict)
    indexes: Mapping[str, LockIndex] = field(default_factory=dict)

    def index_of(self, cell: str) -> LockIndex | None:
        """The published index ``cell``'s image is a platform of, if any."""
        return next(
            (i for i in self.indexes.values() if any(p.cell == cell for p in i.platforms.values())), None
        )

    def only(self, cells: Sequence[str]) -> Lock:
        """The entries of ``cells``, and the indexes any of them is a platform of."""
        kept = {i.group: i for c in cells if (i := self.index_of(c)) is not None}
        return Lock({c: self.images[c] for c in cells}, kept)


@dataclass(frozen=True)
class _LockFile:
    __pydantic_config__ = RECORD_CONFIG

    version: int
    images: Annotated[Mapping[CellId, LockEntry], Items(MAX_RECORDS)]
    indexes: Annotated[Mapping[ImageTag, LockIndex], Items(MAX_RECORDS)] = field(default_factory=dict)


def read_lock(path: Path) -> Lock:
    """The lock at ``path``; an absent file is an empty lock. Every field is checked by its type
    and pattern (the lock may have been edited, or come from elsewhere); the first wrong one is
    one InputError naming the file and the field."""
    try:
        raw = read_regular_file(path, STATE_BYTES, "the images.lock.json `imagekit publish` writes")
    except FileNotFoundError:
        return Lock()
    return parse_lock(raw, path)


def parse_lock(raw: bytes, path: Path) -> Lock:
    """A lock file's bytes as entries, every field checked (see ``read_lock``)."""
    data = parse_json_object(raw, str(path), "lock file", _FIX, version=LOCK_VERSION)
    for key in ("images", "indexes"):
        found = data.get(key)
        if isinstance(found, dict) and len(found) > MAX_RECORDS:  # before the records are built
            raise InputError(f"{path}: {key}: {len(found):,} entries; a lock holds at most {MAX_RECORDS:,}")
    del data
    document = validate_json(_LockFile, raw, str(path), _FIX)
    entries = dict(document.images)
    for cell, entry in entries.items():
        where = f"{path}: images.{cell}"
        if entry.cell != cell:
            raise InputError(f"{where}.cell: {entry.cell!r} is another cell's id; {_FIX}")
        _check_repository(where, entry.repository, entry.registry)
    indexes = dict(document.indexes)
    members: dict[str, str] = {}
    for group, index in indexes.items():
        _check_index(f"{path}: indexes.{group}", group, index, entries)
        for platform in index.platforms.values():
            first = members.setdefault(platform.cell, group)
            if first != group:
                raise InputError(
                    f"{path}: indexes.{group}: cell {platform.cell} is a platform of {first} too; {_FIX}"
                )
    return Lock(entries, indexes)


def _check_repository(where: str, repository: str, registry: str) -> None:
    if repository.split("/", 1)[0] != registry or "/" not in repository:
        raise InputError(
            f"{where}.repository: {repository!r} is not on the entry's registry {registry!r}; {_FIX}"
        )


def _check_index(where: str, group: str, index: LockIndex, entries: Mapping[str, LockEntry]) -> None:
    """An index entry must agree with itself and with the image entries of its platforms: a Job
    pulls the index, so what it says of each platform is what the platform's entry says."""
    if index.group != group:
        raise InputError(f"{where}.group: {index.group!r} is another group's tag; {_FIX}")
    _check_repository(where, index.repository, index.registry)
    if not index.platforms or not index.tags:
        raise InputError(f"{where}: an index with no platform or no tag; {_FIX}")
    if set(index.platforms) & set(index.missing):
        raise InputError(f"{where}.missing: names a platform the index holds; {_FIX}")
    for name, platform in index.platforms.items():
        entry = entries.get(platform.cell)
        agrees = entry is not None and (entry.platform, entry.digest, entry.repository, entry.level) == (
            name,
            platform.digest,
            index.repository,
            platform.verdict,
        )
        if not agrees:
            raise InputError(
                f"{where}.platforms.{name}: cell {platform.cell} has no image entry of that platform,"
                f" digest, repository and verdict; {_FIX}"
            )
    if index.level != min((p.verdict for p in index.platforms.values()), key=_WEAKEST_FIRST.index):
        raise InputError(f"{where}.level: {index.level!r} is not its least verified platform's; {_FIX}")


_WEAKEST_FIRST: tuple[Verdict, ...] = ("built", "checked", "validated")


def as_document(lock: Lock) -> dict[str, Any]:
    images, indexes = lock.images, lock.indexes
    return {
        "version": LOCK_VERSION,
        "images": {cell: images[cell].as_json() for cell in sorted(images)},
        "indexes": {group: indexes[group].as_json() for group in sorted(indexes)},
    }


def merge_lock(
    path: Path, new: Mapping[str, LockEntry], indexes: Mapping[str, LockIndex] | None = None
) -> Lock:
    """Replace ``new``'s cells and ``indexes``' groups in the lock at ``path``, keep the rest;
    one atomic write. An index kept from before that names one of ``new``'s cells no longer
    says what was published (the cell was published again, alone or in another index) and is
    dropped; a cell a new index leaves out is dropped with it (it is not published under it)."""
    current = read_lock(path)
    indexes = dict(indexes or {})
    left_out = {m.cell for i in indexes.values() for m in i.missing.values()}
    stale = {
        group
        for group, index in current.indexes.items()
        if group not in indexes and any(p.cell in new for p in index.platforms.values())
    }
    kept = {c: e for c, e in current.images.items() if c not in left_out}
    lock = Lock(
        {**kept, **new},
        {**{g: i for g, i in current.indexes.items() if g not in stale}, **indexes},
    )
    entries = lock.images
    if len(entries) > MAX_RECORDS:  # a lock its own reader would refuse is never written
        raise InputError(
            f"{path}: the lock would hold {len(entries):,} images; a lock holds at most {MAX_RECORDS:,}:"
            " split the matrix into several locks (--lock)"
        )
    text = json.dumps(as_document(lock), indent=2, sort_keys=True) + "\n"
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
    return lock


_ENV_NAME = re.compile(r"IMAGEKIT_(IMAGE|INDEX)_[A-Z0-9_]+")


def env_name(name: str, kind: str = "IMAGE") -> str:
    """The variable a cell's reference (``IMAGEKIT_IMAGE_``) or a group's index reference
    (``IMAGEKIT_INDEX_``) is printed as: the id in capitals, every other character an underscore;
    a name that is no shell variable is refused."""
    variable = f"IMAGEKIT_{kind}_" + re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")
    if not _ENV_NAME.fullmatch(variable):
        raise InputError(f"{name!r} gives no variable name ({variable!r})")
    return variable


def env_lines(lock: Lock) -> str:
    """``NAME='repo@sha256:...'`` lines that are safe to ``eval``: one per cell (its platform's own
    image), then one per image index (what a pull or a Pod on either platform should name). Each
    name is derived from a checked cell id or tag and each value quoted for the shell (a checked
    value needs no quoting; quoting anyway keeps that true if a check ever weakens)."""
    named = [(env_name(cell), f"cell {cell}", lock.images[cell].reference) for cell in sorted(lock.images)]
    named += [
        (env_name(group, "INDEX"), f"index {group}", lock.indexes[group].reference)
        for group in sorted(lock.indexes)
    ]
    owners: dict[str, str] = {}
    lines = []
    for variable, owner, reference in named:
        if variable in owners:
            raise InputError(
                f"{owners[variable]} and {owner} are one variable ({variable}) in --format env; use json"
            )
        owners[variable] = owner
        lines.append(f"{variable}={shlex.quote(reference)}\n")
    return "".join(lines)


def render_lock(lock: Lock, fmt: str) -> str:
    """The lock as json, yaml, or env (``IMAGEKIT_IMAGE_<CELL>=repo@sha256:...`` lines, each
    cell's own image, and ``IMAGEKIT_INDEX_<GROUP>=...``, each image index)."""
    if fmt == "json":
        return json.dumps(as_document(lock), indent=2, sort_keys=True) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(as_document(lock), sort_keys=True)
    if fmt == "env":
        return env_lines(lock)
    raise InputError(f"--format {shown(fmt)}: use json, yaml or env")


def entries_for(lock: Lock, cells: Mapping[str, str], repository_path: str, path: Path) -> Lock:
    """The entries of ``cells`` (id -> the matrix's platform for it), each of which must be
    published, to the matrix's repository and for the matrix's platform (re-derived from the
    matrix: a lock entry never names where a Job pulls from, or what it runs on, on its own),
    with the indexes they are platforms of."""
    missing = [cell for cell in cells if cell not in lock.images]
    if missing:
        raise InputError(
            f"{path} has no digest for {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more cells" if len(missing) > 3 else "")
            + "; run `imagekit publish` (or narrow --only)"
        )
    chosen = lock.only(list(cells))
    for cell, platform in cells.items():
        entry = chosen.images[cell]
        expected = naming.repository(entry.registry, repository_path)
        if entry.repository != expected:
            raise InputError(
                f"{path}: images.{cell}.repository: {entry.repository} is not the matrix's"
                f" repository ({expected}); publish again, or fix the file"
            )
        if entry.platform != platform:
            raise InputError(
                f"{path}: images.{cell}.platform: {entry.platform} is not the matrix's ({platform});"
                " publish again, or fix the file"
            )
    return chosen
