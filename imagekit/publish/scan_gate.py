"""The vulnerability gate of ``imagekit publish``: a scanner's findings for each staged digest,
read before any tag moves.

``publish --scan FILE`` takes the JSON the scanners' own CLIs write:

- Trivy, ``trivy image --format json`` (and aquasecurity/trivy-action with ``format: json``):
  ``SchemaVersion`` 2, ``ArtifactName``, ``Metadata.ImageID`` (the config digest) and
  ``Metadata.RepoDigests`` (``repo@sha256:...``), ``Results[].Vulnerabilities[]`` with
  ``VulnerabilityID``, ``PkgName``, ``InstalledVersion``, ``FixedVersion`` and ``Severity``
  (UNKNOWN, LOW, MEDIUM, HIGH, CRITICAL); aquasecurity/trivy, pkg/types/report.go (``Report``,
  ``Metadata``, ``Result``) and pkg/types/vulnerability.go (``DetectedVulnerability``).
- Grype, ``grype -o json``: ``matches[].vulnerability`` (``id``, ``severity``: Unknown,
  Negligible, Low, Medium, High, Critical; ``fix.versions``, ``fix.state``),
  ``matches[].relatedVulnerabilities[].id``, ``matches[].artifact`` (``name``, ``version``),
  ``source.type`` "image" with ``source.target`` (syft's ImageMetadata: ``userInput``,
  ``imageID``, ``manifestDigest``, ``repoDigests``) and ``descriptor`` (``name``, ``version``);
  anchore/grype, grype/presenter/models/document.go, source.go, match.go, vulnerability.go, and
  anchore/syft, syft/source/image_metadata.go.

A file is matched to a cell by the digests it names: the staged manifest digest, the image's
config digest (Trivy's ImageID) or the engine's image id. Every problem with a file is one
InputError line (exit 2) raised before anything moves: not one of the two formats, cut short, over
``SCAN_BYTES`` or ``MAX_SCAN_FINDINGS``, nested past what is parsed, a finding without a severity
or with one the scanner never writes, an image named by no digest, or a digest that is no cell's
of the report (findings for another image are no findings for this one). A cell with an unwaived
finding at or above the threshold (``advisories.scan.threshold``, else ``advisories.threshold``;
``--scan-threshold``) is refused naming the package, the ID and the fixed version, and so is a
cell no file names where ``advisories.scan.required`` asks for one: nothing of it is promoted.
Waivers are the matrix's ``advisories.waive`` entries (``imagekit.plan.advisories``): one that
selects the cell waives the scanner's finding of the same ID, or of one of the advisory's aliases.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from imagekit.core import naming
from imagekit.core.errors import ImagekitError, InputError
from imagekit.core.limits import MAX_SCAN_FINDINGS, SCAN_BYTES, SHORT_CHARS
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import parse_json
from imagekit.core.text import counted, printable, shown
from imagekit.facts.advisories import SEVERITIES, Severity
from imagekit.plan.advisories import AdvisoryPolicy, Selectable
from imagekit.plan.cells import Plan
from imagekit.report.scans import (
    SCAN_SEVERITIES,
    Scanner,
    ScanSeverity,
    ScanSummary,
    SeverityCounts,
    WaivedFinding,
    at_least,
)
from imagekit.report.store import BuildReport

TRIVY_SCHEMA = 2  # Report.SchemaVersion since trivy 0.20 (v1 had no metadata to match a digest by)
# Each scanner's spelling of a severity, and imagekit's.
TRIVY_SEVERITIES: Mapping[str, ScanSeverity] = {
    "UNKNOWN": "unknown",
    "LOW": "low",
    "MEDIUM": "medium",
    "HIGH": "high",
    "CRITICAL": "critical",
}
GRYPE_SEVERITIES: Mapping[str, ScanSeverity] = {
    "Unknown": "unknown",
    "Negligible": "negligible",
    "Low": "low",
    "Medium": "medium",
    "High": "high",
    "Critical": "critical",
}
SHOWN_REFUSING = 3  # findings a refusal names after the first, with a count of the rest
_SCAN_IT = "scan the staged digest (trivy image --format json REPO@DIGEST, or grype -o json REPO@DIGEST)"


class ScanRefused(ImagekitError):
    """A cell the gate refuses: an unwaived finding at or above the threshold, or no findings for
    its staged digest where the matrix requires them. Its cell is refused (exit 1), nothing of it
    promoted; the other cells go on."""


@dataclass(frozen=True)
class Finding:
    """One scanner finding: an advisory against one installed package."""

    id: str
    related: tuple[str, ...]  # other IDs the scanner names for it (Grype's related, Trivy's VendorIDs)
    package: str
    version: str
    fixed: str  # "" when the scanner knows no fixed version
    severity: ScanSeverity

    def describe(self) -> str:
        fixed = f"fixed in {self.fixed}" if self.fixed else "no fixed version known"
        return f"{self.package} {self.version} has {self.id} ({self.severity}), {fixed}"


@dataclass(frozen=True)
class ScanFile:
    """One scanner's findings for one image, as read from its JSON."""

    path: Path
    scanner: Scanner
    version: str
    target: str  # what was scanned, as the scanner names it
    digests: frozenset[str]  # every digest it names the image by
    findings: tuple[Finding, ...]


# -- reading ---------------------------------------------------------------------------------------


class _Reader:
    """The checks of one file's values, each problem one InputError naming the file and the key."""

    def __init__(self, path: Path, fix: str) -> None:
        self.path = path
        self.fix = fix

    def fail(self, where: str, problem: str) -> InputError:
        return InputError(f"{self.path}: {where}: {problem}; {self.fix}")

    def mapping(self, value: object, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, not {_kind(value)}")
        return cast(Mapping[str, Any], value)

    def listed(self, value: object, where: str, empty_ok: bool = True) -> Sequence[Any]:
        """A list; absent or null is an empty one where the scanner leaves empty lists out."""
        if value is None and empty_ok:
            return ()
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, not {_kind(value)}")
        return value

    def text(self, value: object, where: str, optional: bool = False) -> str:
        if value is None and optional:
            return ""
        if not isinstance(value, str) or (not value.strip() and not optional):
            raise self.fail(where, f"expected text, not {_kind(value)}")
        # An ID, a package or a version goes into the report's records (ShortText, which reading
        # the report back enforces) and into one-line refusals: longer is no scanner's.
        if len(value) > SHORT_CHARS:
            raise self.fail(where, f"is {len(value):,} characters long; at most {SHORT_CHARS:,}")
        return value

    def severity(
        self, value: object, where: str, known: Mapping[str, ScanSeverity], scanner: str
    ) -> ScanSeverity:
        if value is None:
            raise self.fail(where, "has no severity; a finding without one cannot be held to the threshold")
        if not isinstance(value, str) or value not in known:
            said = shown(value) if isinstance(value, str) else _kind(value)
            raise self.fail(where, f"severity {said} is none that {scanner} writes ({', '.join(known)})")
        return known[value]

    def count(self, listed: Sequence[Sequence[Any]]) -> None:
        """Findings counted before one is looked at: MAX_SCAN_FINDINGS bounds the work."""
        total = sum(len(items) for items in listed)
        if total > MAX_SCAN_FINDINGS:
            raise self.fail(
                "(findings)", f"{total} findings, more than the {MAX_SCAN_FINDINGS} an image's scan holds"
            )


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _digest(text: object) -> str | None:
    """The digest ``text`` names: a bare ``sha256:...`` or the tail of ``repo@sha256:...``."""
    if not isinstance(text, str):
        return None
    tail = text.rpartition("@")[2]
    return tail if naming.DIGEST.fullmatch(tail) else None


def _digests(values: Iterable[object]) -> frozenset[str]:
    return frozenset(d for d in map(_digest, values) if d is not None)


def read_scan(path: Path) -> ScanFile:
    """The findings of one Trivy or Grype JSON file; InputError names the first problem."""
    fix = "pass what `trivy image --format json` or `grype -o json` wrote for the staged digest"
    try:
        raw = read_regular_file(path, SCAN_BYTES, "a scanner's JSON report")
    except FileNotFoundError:
        raise InputError(f"--scan {path}: no such file; {fix}") from None
    try:
        document = parse_json(raw)
    except ValueError as exc:
        problem = str(exc).splitlines()[0] if str(exc) else "not JSON"
        raise InputError(f"{path}: not readable JSON ({problem}); {fix}") from None
    reader = _Reader(path, fix)
    top = reader.mapping(document, "(top level)")
    if "SchemaVersion" in top:
        return _trivy(reader, top)
    if "matches" in top and "descriptor" in top:
        return _grype(reader, top)
    raise reader.fail("(top level)", "neither Trivy's JSON (no SchemaVersion) nor Grype's (no matches)")


def _trivy(reader: _Reader, top: Mapping[str, Any]) -> ScanFile:
    schema = top.get("SchemaVersion")
    if type(schema) is not int or schema != TRIVY_SCHEMA:
        raise reader.fail("SchemaVersion", f"{schema!r:.20}; imagekit reads Trivy's schema {TRIVY_SCHEMA}")
    kind = top.get("ArtifactType")
    if kind not in (None, "container_image"):
        raise reader.fail("ArtifactType", f"{shown(str(kind))} is no image; scan the staged image")
    target = reader.text(top.get("ArtifactName"), "ArtifactName")
    metadata = reader.mapping(top.get("Metadata", {}), "Metadata")
    repo_digests = reader.listed(metadata.get("RepoDigests"), "Metadata.RepoDigests")
    digests = _digests([target, metadata.get("ImageID"), *repo_digests])
    tool = top.get("Trivy")
    version = tool.get("Version") if isinstance(tool, dict) else None
    results = reader.listed(top.get("Results"), "Results")
    lists = [
        reader.listed(
            reader.mapping(r, f"Results[{i}]").get("Vulnerabilities"), f"Results[{i}].Vulnerabilities"
        )
        for i, r in enumerate(results)
    ]
    reader.count(lists)
    findings: list[Finding] = []
    for i, listed in enumerate(lists):
        for j, item in enumerate(listed):
            where = f"Results[{i}].Vulnerabilities[{j}]"
            found = reader.mapping(item, where)
            vendor = reader.listed(found.get("VendorIDs"), f"{where}.VendorIDs")
            findings.append(
                Finding(
                    id=reader.text(found.get("VulnerabilityID"), f"{where}.VulnerabilityID"),
                    related=tuple(v for v in vendor if isinstance(v, str)),
                    package=reader.text(found.get("PkgName"), f"{where}.PkgName"),
                    version=reader.text(found.get("InstalledVersion"), f"{where}.InstalledVersion", True),
                    fixed=reader.text(found.get("FixedVersion"), f"{where}.FixedVersion", True),
                    severity=reader.severity(
                        found.get("Severity"), f"{where}.Severity", TRIVY_SEVERITIES, "Trivy"
                    ),
                )
            )
    scan = _scan(reader, "trivy", version, target, digests, findings)
    # Trivy leaves out Results it found nothing in, so a scan that found no operating system (it
    # could not read the image's packages) reads as a clean one: every imagekit image has one.
    if not isinstance(metadata.get("OS"), dict) or not metadata["OS"].get("Family"):
        raise reader.fail("Metadata.OS", "Trivy found no operating system, so no package was scanned")
    return scan


def _grype(reader: _Reader, top: Mapping[str, Any]) -> ScanFile:
    descriptor = reader.mapping(top.get("descriptor"), "descriptor")
    if descriptor.get("name") not in (None, "grype"):
        raise reader.fail("descriptor.name", f"{shown(str(descriptor.get('name')))} is not grype")
    source = reader.mapping(top.get("source"), "source")
    if source.get("type") != "image":
        said = shown(str(source.get("type")))
        raise reader.fail("source.type", f"{said} is no image; scan the staged image")
    image = reader.mapping(source.get("target"), "source.target")
    target = reader.text(image.get("userInput"), "source.target.userInput")
    repo_digests = reader.listed(image.get("repoDigests"), "source.target.repoDigests")
    digests = _digests([target, image.get("manifestDigest"), image.get("imageID"), *repo_digests])
    matches = reader.listed(top.get("matches"), "matches", empty_ok=False)
    reader.count([matches])
    findings: list[Finding] = []
    for i, item in enumerate(matches):
        where = f"matches[{i}]"
        match = reader.mapping(item, where)
        vulnerability = reader.mapping(match.get("vulnerability"), f"{where}.vulnerability")
        artifact = reader.mapping(match.get("artifact"), f"{where}.artifact")
        fix = reader.mapping(vulnerability.get("fix") or {}, f"{where}.vulnerability.fix")
        versions = reader.listed(fix.get("versions"), f"{where}.vulnerability.fix.versions")
        related = reader.listed(match.get("relatedVulnerabilities"), f"{where}.relatedVulnerabilities")
        findings.append(
            Finding(
                id=reader.text(vulnerability.get("id"), f"{where}.vulnerability.id"),
                related=tuple(
                    r["id"] for r in related if isinstance(r, dict) and isinstance(r.get("id"), str)
                ),
                package=reader.text(artifact.get("name"), f"{where}.artifact.name"),
                version=reader.text(artifact.get("version"), f"{where}.artifact.version", True),
                fixed=", ".join(v for v in versions if isinstance(v, str)),
                severity=reader.severity(
                    vulnerability.get("severity"),
                    f"{where}.vulnerability.severity",
                    GRYPE_SEVERITIES,
                    "Grype",
                ),
            )
        )
    return _scan(reader, "grype", descriptor.get("version"), target, digests, findings)


def _scan(
    reader: _Reader,
    scanner: Scanner,
    version: object,
    target: str,
    digests: frozenset[str],
    findings: list[Finding],
) -> ScanFile:
    if not digests:
        raise reader.fail("(image)", f"{shown(target)} is named by no digest (a local tag?); {_SCAN_IT}")
    unique = tuple(dict.fromkeys(findings))  # each package and ID once (a target listed twice), in order
    said = version if isinstance(version, str) and version.strip() else "unknown"
    return ScanFile(reader.path, scanner, printable(said)[:64], target, digests, unique)


def read_scans(paths: Sequence[Path]) -> tuple[ScanFile, ...]:
    return tuple(read_scan(path) for path in paths)


# -- the gate -------------------------------------------------------------------------------------------


class ScanGate:
    """The scanners' findings, held against each staged cell before its tags move."""

    def __init__(
        self,
        scans: Sequence[ScanFile],
        threshold: Severity,
        required: bool,
        policy: AdvisoryPolicy | None,
        cells: Mapping[str, Selectable],
    ) -> None:
        self.scans = tuple(scans)
        self.threshold = threshold
        self.required = required
        self.policy = policy
        self.cells = cells

    def check_known(self, known: Mapping[str, Collection[str]], report: str) -> None:
        """Before anything moves: each file names an image some cell of the report has (its staged
        digest, its image id); findings for another image would pass a cell they never looked at."""
        every = {digest for digests in known.values() for digest in digests}
        for scan in self.scans:
            if not scan.digests & every:
                named = ", ".join(sorted(d[:19] for d in scan.digests))
                raise InputError(
                    f"{scan.path}: {scan.scanner}'s findings are for {shown(scan.target)} ({named}), which"
                    f" is no cell's staged digest or image in {report}; {_SCAN_IT}"
                )

    def judge(self, cell: str, staged: str, names: Collection[str]) -> tuple[ScanSummary, ...]:
        """The summaries of ``cell``'s scans (the files naming ``staged`` or one of ``names``);
        ScanRefused when one holds an unwaived finding at or above the threshold, or when none
        does where the matrix requires one."""
        mine = [s for s in self.scans if s.digests & {staged, *names}]
        if not mine:
            if self.required:
                raise ScanRefused(
                    f"no scanner findings for its staged digest {staged} (advisories.scan.required);"
                    f" {_SCAN_IT} and pass the JSON with --scan"
                )
            return ()
        summaries: list[ScanSummary] = []
        refusing: list[tuple[ScanFile, Finding]] = []
        for scan in mine:
            waived: list[WaivedFinding] = []
            for finding in scan.findings:
                if not at_least(finding.severity, self.threshold):
                    continue
                waiver = self._waiver(finding, cell)
                if waiver is None:
                    refusing.append((scan, finding))
                else:
                    waived.append(
                        WaivedFinding(finding.id, finding.package, finding.version, finding.severity, *waiver)
                    )
            summaries.append(
                ScanSummary(
                    scan.scanner, scan.version, staged, self.threshold, _counts(scan.findings), tuple(waived)
                )
            )
        if refusing:
            raise ScanRefused(self._refusal(refusing))
        return tuple(summaries)

    def _waiver(self, finding: Finding, cell: str) -> tuple[str, str] | None:
        selectable = self.cells.get(cell)
        if self.policy is None or selectable is None:
            return None
        return self.policy.waiver_of({finding.id, *finding.related}, selectable)

    def _refusal(self, refusing: Sequence[tuple[ScanFile, Finding]]) -> str:
        ranked = sorted(refusing, key=lambda sf: -SCAN_SEVERITIES.index(sf[1].severity))
        scan, first = ranked[0]
        also = "".join(
            f"; also {f.package} {f.id} ({f.severity}), fixed in {f.fixed or '-'}"
            for _, f in ranked[1:][:SHOWN_REFUSING]
        )
        more = len(ranked) - 1 - SHOWN_REFUSING
        rest = f"; and {counted(more, 'more finding')}" if more > 0 else ""
        return (
            f"{first.describe()} ({scan.scanner}, {scan.path.name}), at or above {self.threshold}"
            f"{also}{rest};"
            " rebuild with the fixed version, or waive the ID for this cell in advisories.waive with a reason"
        )


def _counts(findings: Iterable[Finding]) -> SeverityCounts:
    tally = dict.fromkeys(SCAN_SEVERITIES, 0)
    for finding in findings:
        tally[finding.severity] += 1
    return SeverityCounts(**tally)


def gate_of(
    scans: Sequence[ScanFile],
    policy: AdvisoryPolicy | None,
    cells: Mapping[str, Selectable],
    threshold: Severity | None = None,
) -> ScanGate | None:
    """The publish run's gate: ``--scan-threshold`` over the matrix's resolved threshold; None
    when there is nothing to hold (no file, and the matrix does not require one)."""
    required = policy.scan_required if policy is not None else False
    if not scans and not required:
        return None
    chosen: Severity = threshold or (policy.scan_threshold if policy is not None else "critical")
    return ScanGate(scans, chosen, required, policy, cells)


def gate_for_run(
    paths: Sequence[Path] | None,
    plan: Plan,
    report: BuildReport,
    report_name: str,
    threshold: Severity | None,
) -> ScanGate | None:
    """``publish``'s gate, every file read and matched to the report before anything moves."""
    policy = plan.advisory_policy
    gate = gate_of(read_scans(paths or ()), policy, {c.id: c for c in plan.cells}, threshold)
    if gate is not None and gate.scans:
        known = {
            r.id: {
                d
                for d in (
                    r.image_id,
                    r.image_digest,
                    r.staged.digest if r.staged else None,
                    r.verification.image_digest if r.verification else None,
                )
                if d
            }
            for r in report.cells
        }
        gate.check_known(known, report_name)
    return gate


def threshold_flag(value: str | None) -> Severity | None:
    """``--scan-threshold``, checked: one of the advisories' severities."""
    if value is None:
        return None
    if value not in SEVERITIES:
        raise InputError(f"--scan-threshold {shown(value)}: use one of {', '.join(reversed(SEVERITIES))}")
    return value
