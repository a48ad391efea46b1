"""``images.lock.json``: what was published, by digest, and how each image was verified.

Other tools (Kubernetes manifests, CI pinning, ``imagekit images --format env``) read this file
instead of a moving tag. It is replaced in one atomic write and merged per cell, so publishing
one cell keeps the entries of the others. It never holds a credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagekit.atomic import atomic_write
from imagekit.errors import InputError
from imagekit.naming import DIGEST, by_digest

LOCK_NAME = "images.lock.json"
LOCK_VERSION = 1


@dataclass(frozen=True)
class ChecksSummary:
    passed: int
    failed: int
    skipped: int
    failed_names: tuple[str, ...] = ()
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifiedBy:
    """How and when an image was verified (None in a lock entry: published unverified)."""

    verdict: str  # validated | checked
    gpus: str
    gpu_requested: bool
    gpu_visible: bool
    verified_at: str | None  # ISO 8601 UTC, when the verdict was reached
    duration_s: float
    checks: ChecksSummary


@dataclass(frozen=True)
class DigestChain:
    """The manifest digest at each step: staged (build --push or publish's own push), verified
    (what the checks ran on, when known), promoted (what the final tags name)."""

    staged: str | None
    verified: str | None
    promoted: str

    @property
    def equal(self) -> bool:
        return self.staged == self.verified == self.promoted


@dataclass(frozen=True)
class Provenance:
    """Where an image was verified, from its check results, and its digest chain."""

    gpus: tuple[str, ...]  # GPU names nvidia-smi listed; () without a visible GPU
    driver: str | None  # the host's NVIDIA driver version
    cuda_driver: str | None  # the CUDA version the driver supports
    checks_passed: int
    checks_total: int
    note: str | None  # why GPU, driver or CUDA driver are unknown, when they are
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        chain = data["digest_chain"]
        return cls(
            gpus=tuple(data.get("gpus") or ()),
            driver=data.get("driver"),
            cuda_driver=data.get("cuda_driver"),
            checks_passed=int(data.get("checks_passed") or 0),
            checks_total=int(data.get("checks_total") or 0),
            note=data.get("note"),
            digest_chain=DigestChain(chain.get("staged"), chain.get("verified"), chain["promoted"]),
        )


@dataclass(frozen=True)
class LockEntry:
    cell: str
    registry: str
    repository: str  # registry/repository, without tag
    digest: str  # manifest digest: what `repository@digest` pulls, forever
    tags: tuple[str, ...]  # readable (moving) first, then the immutable ones
    image_id: str
    input_digest: str
    policy: str  # the matrix's publish policy when this was published
    level: str  # validated | checked | built: what the image actually passed
    published_at: str
    verification: VerifiedBy | None
    expect: Mapping[str, str] = field(default_factory=dict)  # the check script's expectations
    check_script: str | None = None
    frontend: str | None = None  # jupyter | ssh: served as a Deployment, not run as a Job
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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LockEntry:
        verification = data.get("verification")
        verified = None
        if verification:
            checks = dict(verification["checks"])
            checks["failed_names"] = tuple(checks.get("failed_names") or ())
            verified = VerifiedBy(**{**verification, "checks": ChecksSummary(**checks)})
        fields = {k: v for k, v in data.items() if k != "reference"}
        found = data.get("provenance")
        entry = cls(
            **{
                **fields,
                "tags": tuple(data["tags"]),
                "verification": verified,
                "provenance": Provenance.from_json(found) if found else None,
            }
        )
        if not DIGEST.fullmatch(entry.digest):
            raise ValueError(f"digest {entry.digest!r} is not sha256:<64 hex>")
        return entry


def read_lock(path: Path) -> dict[str, LockEntry]:
    """Cell id -> entry; an absent file is an empty lock."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable lock file ({exc})") from None
    try:
        if data.get("version") != LOCK_VERSION:
            raise InputError(f"{path}: lock version {data.get('version')!r}; expected {LOCK_VERSION}")
        return {cell: LockEntry.from_json(entry) for cell, entry in data["images"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: malformed lock file ({exc})") from None


def as_document(entries: Mapping[str, LockEntry]) -> dict[str, Any]:
    return {"version": LOCK_VERSION, "images": {cell: entries[cell].as_json() for cell in sorted(entries)}}


def merge_lock(path: Path, new: Mapping[str, LockEntry]) -> dict[str, LockEntry]:
    """Replace ``new``'s cells in the lock at ``path``, keep the rest; one atomic write."""
    entries = {**read_lock(path), **new}
    atomic_write(path, json.dumps(as_document(entries), indent=2, sort_keys=True) + "\n")
    return entries


def env_name(cell: str) -> str:
    return "IMAGEKIT_IMAGE_" + re.sub(r"[^A-Z0-9]+", "_", cell.upper()).strip("_")


def render_lock(entries: Mapping[str, LockEntry], fmt: str) -> str:
    """The lock as json, yaml, or env (``IMAGEKIT_IMAGE_<CELL>=repo@sha256:...`` lines)."""
    if fmt == "json":
        return json.dumps(as_document(entries), indent=2, sort_keys=True) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(as_document(entries), sort_keys=True)
    if fmt == "env":
        # Every part of a reference was validated (schema, digest regex): no quoting is needed.
        return "".join(f"{env_name(cell)}={entries[cell].reference}\n" for cell in sorted(entries))
    raise InputError(f"--format {fmt!r}: use json, yaml or env")
