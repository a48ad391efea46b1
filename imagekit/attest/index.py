"""Proof for an image index: the platforms of one group publish one OCI image index, and a pod (or
a Job `imagekit k8s` writes) pulls the *index* digest, so that digest carries an attestation too.

The index's attestation is a verification attestation (the same predicate types as an image's,
``gpu-validated/v1`` or ``checked-without-gpu/v1``) whose predicate also lists the platforms.
Why not a type of its own: Kyverno's ``verifyImages`` and Sigstore's policy-controller check the
digest a pod names against a predicate type and a condition on the predicate, and neither can say
"this type, or that one" in one rule (every attestation a rule lists must be found). A pod pulls an
index digest for a group of platforms and a manifest digest for a cell of one platform; with one
type and the same top-level ``verdict`` and ``gpu.visible``, one admission policy admits both.

The predicate (version 1, its additions to the image predicate documented in the README):

- ``verdict``: ``validated`` when every platform in the index is, else ``checked``; an index with a
  platform that was never verified (publish policy ``built``) gets no attestation at all;
- ``gpu``: ``requested``/``visible`` true only when true of every platform, ``products`` the union;
- ``index``: the group (readable tag), its input digest, the index media type;
- ``platforms``: per entry of the index, its platform, manifest digest, cell, verdict, GPU products,
  when it was verified, and the attestations attached to that manifest digest (predicate type,
  artifact manifest digest, envelope digest): the per-platform proof it rests on, by digest;
- ``missing``: the platforms left out of a partial index, and why;
- ``run``: ``verified_at`` is the *oldest* platform's (an age limit reads the weakest), and the CI
  context of the publish run; ``imagekit.version``.

Checking an index (``verify_index``) is checking its own attestation *and* each platform's:
the index's must list exactly the index's entries, and each platform's manifest digest must carry a
verification attestation that satisfies the same requirement, one the index names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from imagekit import __version__
from imagekit.attest.attach import Attached, find_attestations
from imagekit.attest.statements import (
    VERIFICATION_PREDICATES,
    Finding,
    PublicKey,
    Requirement,
    accepted,
    ci_context,
    short_type,
)
from imagekit.core.naming import DIGEST
from imagekit.core.safetypes import parse_json
from imagekit.core.text import counted, shown
from imagekit.registry.client import Registry
from imagekit.registry.manifest import OCI_INDEX, Manifest
from imagekit.report.verification import Verification

# An index imagekit publishes has one entry per platform it knows; one read from a registry is
# looked at up to this many entries (a multi-platform index of another tool has a few dozen).
MAX_INDEX_ENTRIES = 64


@dataclass(frozen=True)
class PlatformProof:
    """One platform of a published index, with what publish attached to its manifest digest."""

    platform: str
    cell: str
    digest: str
    verification: Verification | None  # None: never verified (publish policy built)
    gpus: tuple[str, ...] = ()
    attached: tuple[Attached, ...] = ()


@dataclass(frozen=True)
class LeftOutPlatform:
    platform: str
    cell: str
    reason: str


def _oldest(verifications: Sequence[Verification]) -> str | None:
    """The earliest ``finished_at`` of ``verifications`` (ISO 8601 UTC sorts as text); None when
    any of them does not say."""
    times = [v.finished_at for v in verifications]
    return None if any(t is None for t in times) else min(t for t in times if t is not None)


def index_predicate(
    group: str,
    input_digest: str,
    proofs: Sequence[PlatformProof],
    missing: Sequence[LeftOutPlatform] = (),
    environ: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """(predicate type, predicate) for an index of ``proofs``; None when a platform was never
    verified or failed (nothing to attest: the index is only as proven as its weakest platform)."""
    verifications = [p.verification for p in proofs]
    if not proofs or any(v is None or v.verdict not in VERIFICATION_PREDICATES for v in verifications):
        return None
    checked = [v for v in verifications if v is not None]
    verdict = "validated" if all(v.verdict == "validated" for v in checked) else "checked"
    predicate = {
        "verdict": verdict,
        "gpu": {
            "requested": all(v.gpu_requested for v in checked),
            "visible": all(v.gpu_visible for v in checked),
            "products": sorted({g for p in proofs for g in p.gpus}),
        },
        "index": {"group": group, "input_digest": input_digest, "mediaType": OCI_INDEX},
        "platforms": [
            {
                "platform": p.platform,
                "digest": p.digest,
                "cell": p.cell,
                "verdict": v.verdict,
                "gpu": {"visible": v.gpu_visible, "products": sorted(set(p.gpus))},
                "verified_at": v.finished_at,
                "attestations": [a.as_json() for a in p.attached],
            }
            for p, v in zip(proofs, checked, strict=True)
        ],
        "missing": [{"platform": m.platform, "cell": m.cell, "reason": m.reason} for m in missing],
        "run": {"verified_at": _oldest(checked), "ci": ci_context(environ)},
        "imagekit": {"version": __version__},
    }
    return VERIFICATION_PREDICATES[verdict], predicate


# -- checking ------------------------------------------------------------------------------------------


@dataclass
class IndexCheck:
    """What ``verify_index`` found: ``ok`` lines (stdout) when every subject passed, else the
    ``refused`` lines, one per reason (``imagekit: refused: ...``)."""

    ok: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


class IndexShapeError(ValueError):
    """An index whose entries cannot be checked: one line."""


def index_entries(index: Manifest) -> dict[str, str]:
    """platform (``os/architecture``) -> manifest digest, for each entry of ``index`` (bytes the
    registry served for its digest, so authentic, yet in a shape nobody promised)."""
    try:
        data: Any = parse_json(index.body)
    except ValueError:
        raise IndexShapeError("the index is not JSON") from None
    entries = data.get("manifests") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise IndexShapeError("the index names no manifests")
    if len(entries) > MAX_INDEX_ENTRIES:
        raise IndexShapeError(f"the index names {len(entries):,} manifests, more than {MAX_INDEX_ENTRIES}")
    found: dict[str, str] = {}
    for i, entry in enumerate(entries):
        name = _platform_name(entry.get("platform") if isinstance(entry, dict) else None)
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if name is None or not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise IndexShapeError(f"manifests[{i}] names no platform or no sha256 digest")
        if name in found:
            raise IndexShapeError(f"manifests[{i}] is a second entry for {shown(name)}")
        found[name] = digest
    return found


# An OCI platform's os, architecture and variant as every registry client spells them (linux,
# arm64, v8): what a line may repeat of them. Anything else is no platform (a hostile index's
# megabyte of "architecture" never reaches a line).
_PLATFORM_WORD = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")


def _platform_name(described: object) -> str | None:
    if not isinstance(described, dict):
        return None
    os_name, arch, variant = described.get("os"), described.get("architecture"), described.get("variant")
    words = [os_name, arch] + ([variant] if variant not in (None, "") else [])
    if not all(isinstance(w, str) and _PLATFORM_WORD.fullmatch(w) for w in words):
        return None
    return "/".join(str(w) for w in words)


def listed_platforms(predicate: Mapping[str, Any]) -> dict[str, Mapping[str, Any]] | str:
    """platform -> its entry in an index attestation's ``platforms``; a one-line problem instead
    when the list is not one entry per platform with a sha256 digest."""
    listed = predicate.get("platforms")
    if not isinstance(listed, list) or not listed or len(listed) > MAX_INDEX_ENTRIES:
        return "it lists no platforms (it is not an index's attestation)"
    found: dict[str, Mapping[str, Any]] = {}
    for item in listed:
        name = item.get("platform") if isinstance(item, dict) else None
        digest = item.get("digest") if isinstance(item, dict) else None
        if not isinstance(name, str) or not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            return "its platforms are not each a platform and a sha256 digest"
        if name in found:
            return f"it lists {shown(name)} twice"
        found[name] = item
    return found


def platforms_problem(predicate: Mapping[str, Any], entries: Mapping[str, str]) -> str | None:
    """Why an index attestation's platforms are not exactly the index's entries; None when they are."""
    listed = listed_platforms(predicate)
    if isinstance(listed, str):
        return listed
    said = {name: str(item["digest"]) for name, item in listed.items()}
    if said == dict(entries):
        return None
    for name in sorted(set(said) | set(entries)):
        if name not in entries:
            return f"it lists {shown(name)}, which the index does not hold"
        if name not in said:
            return f"it does not list the index's {shown(name)}"
        if said[name] != entries[name]:
            return f"it lists {shown(name)} as {said[name][:19]}, the index holds {entries[name][:19]}"
    return None  # unreachable: the maps differ in some name


def _named(item: Mapping[str, Any], requirement: Requirement) -> set[str]:
    """The artifact digests an index attestation names for one platform's verification."""
    attestations = item.get("attestations")
    return {
        str(a["artifact"])
        for a in (attestations if isinstance(attestations, list) else [])
        if isinstance(a, dict)
        and a.get("predicateType") in requirement.predicate_types
        and isinstance(a.get("artifact"), str)
    }


def _refusals(label: str, findings: Sequence[Finding]) -> list[str]:
    lines = []
    for finding in findings:
        if finding.problem is not None:
            what = short_type(finding.predicate_type) if finding.predicate_type else "attestation"
            lines.append(f"{label}: {finding.manifest[:19]} ({what}): {finding.problem}")
    return lines or [f"{label}: no signed verification attestation is attached"]


@dataclass(frozen=True)
class _Reader:
    """What each check of one index reads through: the registry, the key and the requirement."""

    registry: Registry
    repository: str
    key: PublicKey
    requirement: Requirement
    now: datetime

    def findings(self, digest: str, index: bool = False) -> list[Finding]:
        return find_attestations(
            self.registry, self.repository, digest, self.key, self.requirement, self.now, index=index
        )


def _own(reader: _Reader, index: Manifest, entries: Mapping[str, str]) -> tuple[Finding | None, list[str]]:
    """The index's own attestation that satisfies ``requirement`` and lists exactly its entries,
    or None and the lines saying why none does."""
    findings = reader.findings(index.digest, index=True)
    label = f"index {index.digest[:19]}"
    judged: list[Finding] = []
    for found in findings:
        statement = found.statement
        predicate = statement.get("predicate") if statement is not None else None
        if found.problem is not None or not isinstance(predicate, dict):
            judged.append(found)
            continue
        problem = platforms_problem(predicate, entries)
        judged.append(Finding(found.manifest, found.predicate_type, problem, statement))
    wanted = reader.requirement.predicate_types
    good = next((f for f in judged if f.problem is None and f.predicate_type in wanted), None)
    return good, ([] if good is not None else _refusals(label, judged))


def _platform(reader: _Reader, name: str, digest: str, named: set[str] | None) -> tuple[list[str], list[str]]:
    """(ok lines, refused lines) for one platform's manifest digest: a verification attestation
    satisfying the requirement, and (``named``: what the index's attestation names for it, None
    when the index's own did not verify) one the index's attestation names."""
    label = f"{name} {digest[:19]}"
    findings = reader.findings(digest)
    if not accepted(findings, reader.requirement):
        return [], _refusals(label, findings)
    wanted = reader.requirement.predicate_types
    good = [f for f in findings if f.problem is None and f.predicate_type in wanted]
    if named is not None and not named.intersection(f.manifest for f in good):
        names = ", ".join(sorted(n[:19] for n in named)) or "none"
        return [], [
            f"{label}: the index's attestation names its verification attestation as {names};"
            " no such attestation of this digest verifies"
        ]
    return [f"ok: {label}: {short_type(f.predicate_type or '?')} {f.manifest[:19]}" for f in good], []


def verify_index(
    registry: Registry,
    repository: str,
    index: Manifest,
    key: PublicKey,
    requirement: Requirement,
    now: datetime,
) -> IndexCheck:
    """Check the index ``repository@index.digest``: its own attestation (signed by ``key``,
    about this digest, satisfying ``requirement``, listing exactly its entries) and, per
    platform, a verification attestation of that manifest digest satisfying ``requirement`` that
    the index's attestation names. Every platform is looked at even when the index's own
    attestation fails, so that one run names every reason."""
    check = IndexCheck()
    try:
        entries = index_entries(index)
    except IndexShapeError as exc:
        check.refused.append(f"index {index.digest[:19]}: {exc}")
        return check
    reader = _Reader(registry, repository, key, requirement, now)
    own, why = _own(reader, index, entries)
    check.refused += why
    listed: Mapping[str, Mapping[str, Any]] = {}
    if own is not None and own.statement is not None:
        found = listed_platforms(own.statement.get("predicate") or {})
        listed = found if isinstance(found, dict) else {}
        platforms = counted(len(entries), "platform")
        kind = short_type(own.predicate_type or "?")
        check.ok.append(f"ok: index {index.digest[:19]}: {kind} {own.manifest[:19]} ({platforms})")
    for name, digest in sorted(entries.items()):
        named = _named(listed.get(name) or {}, requirement) if own is not None else None
        ok, refused = _platform(reader, name, digest, named)
        check.ok += ok
        check.refused += refused
    if check.refused:
        check.ok = []
    return check
