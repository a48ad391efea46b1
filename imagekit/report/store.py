"""The build report and its one store: per-cell records, read once per run, written whole.

``.imagekit/report.json`` holds what each run built and how each image was verified. Every stage
that records something (build, verify, bake-import, merge-reports) opens the store once: it takes
``.imagekit/lock`` (``flock``: two runs in one working directory would interleave their logs and
reports), reads the previous report once, and replaces the file in one ``os.replace`` (a reader
sees the previous report or the new one, never half of either). A previous report that cannot be
read is an input error (exit 2) naming the file and the way out; it is never silently replaced.
The records live here (a verification's in ``imagekit.report.verification``), so nothing that stores or
shows a report imports a stage.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from imagekit.core import naming
from imagekit.core.atomic import atomic_write
from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.limits import MAX_ITEMS, MAX_RECORDS, STATE_BYTES, TEXT_CHARS
from imagekit.core.paths import check_write_target, read_regular_file, read_regular_text
from imagekit.core.safetypes import (
    RECORD_CONFIG,
    CellId,
    Count,
    ImageDigest,
    ImageReference,
    ImageTag,
    InputDigest,
    Items,
    PathText,
    Registry,
    RepositoryName,
    Seconds,
    Text,
    Timestamp,
    parse_json_object,
    validate_json,
)
from imagekit.core.text import redact
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.report.pullcost import MatrixPull, PullCost, matrix_pull, with_shared
from imagekit.report.scans import ScanSummary
from imagekit.report.state import LOCK_NAME, LOGS_DIR, REPORT_NAME, report_json_text, state_lock
from imagekit.report.verification import ClusterValidation, Verification, VerifyRun, clipped, derive_verdict

Status = Literal["built", "skipped", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = get_args(Status)
REPORT_VERSION = 1
MAX_VERIFY_RUNS = 100  # a report verified again every night for months keeps the last ones


def _fit(value: Any) -> Any:
    """A record's JSON cut to what a report holds: an engine's error, a build log's line or an
    image's output may be any length, but what imagekit writes it must read back. A login in a
    URL (pip echoing its index, an engine naming a registry) is masked: reports are CI artifacts."""
    if isinstance(value, str):
        return clipped(redact(value), TEXT_CHARS)
    if isinstance(value, list):
        return [_fit(item) for item in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        return {key: _fit(item) for key, item in value.items()}
    return value


# -- build records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Staged:
    """Where ``build --push`` put a cell's image: a staging tag and the manifest digest pushed."""

    __pydantic_config__ = RECORD_CONFIG

    registry: Registry  # host[:port]
    repository: RepositoryName  # without the registry
    tag: ImageTag  # staging-<input digest, 12 hex>
    digest: ImageDigest  # sha256:... of the manifest, what repo@digest pulls

    @property
    def name(self) -> str:
        """``registry/repository``, as the engine names it."""
        return naming.repository(self.registry, self.repository)

    @property
    def reference(self) -> str:
        """``registry/repository@sha256:...``: exactly the staged image."""
        return naming.by_digest(self.name, self.digest)


@dataclass(frozen=True)
class CellResult:
    __pydantic_config__ = RECORD_CONFIG

    id: CellId
    kind: Literal["cell", "base"]
    status: Status
    base_image: Text  # a reference; for a local base, the FROM lines of its Dockerfile
    image_id: ImageDigest | None = None
    # full references (repository:tag) the image carries
    tags: Annotated[tuple[ImageReference, ...], Items(MAX_ITEMS)] = ()
    size: Count | None = None  # bytes
    input_digest: InputDigest | None = None
    base_digest: ImageReference | None = None  # name@sha256:... when pulled, else the base's image id
    duration_s: Seconds = 0.0
    log: PathText | None = None
    error: Text | None = None  # one-line reason
    error_tail: Annotated[tuple[Text, ...], Items(MAX_ITEMS)] = ()  # the last lines of the build output
    verification: Verification | None = None  # the last `imagekit verify` of this image
    image_digest: ImageDigest | None = None  # sha256:... of the pushed manifest, when known (bake-import)
    staged: Staged | None = None  # where `build --push` staged this image
    # The day the build named the image (its dated tags): decided once, by the build, so publish
    # names the same tags without rendering the cell again. None in reports of earlier releases.
    built_on: date | None = None
    # Its image's probe as validate-on Jobs ran it on clusters' GPU products (`imagekit
    # k8s-results`), one per (cluster, product, digest); none in reports of earlier releases.
    clusters: Annotated[tuple[ClusterValidation, ...], Items(MAX_ITEMS)] = ()
    # What a node pulls for its staged or published image, read from the registry's manifests
    # (``imagekit.report.pullcost``); None in reports of earlier releases, or never staged.
    pull_cost: PullCost | None = None
    # The advisories that affect what the cell installs, each waived by the matrix (with its
    # reason) or below its threshold (``imagekit.plan.advisories``); none in earlier reports.
    advisories: Annotated[tuple[AdvisoryFinding, ...], Items(MAX_ITEMS)] = ()
    # What the scanners passed to `imagekit publish --scan` found in its staged digest, counted
    # per severity (``imagekit.publish.scan_gate``); none before it was published with a scan.
    scans: Annotated[tuple[ScanSummary, ...], Items(MAX_ITEMS)] = ()

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["error_tail"] = list(self.error_tail)
        data["verification"] = self.verification.as_json() if self.verification else None
        data["clusters"] = [c.as_json() for c in self.clusters]
        data["built_on"] = self.built_on.isoformat() if self.built_on else None
        data["pull_cost"] = self.pull_cost.as_json() if self.pull_cost else None
        data["advisories"] = [finding.as_json() for finding in self.advisories]
        data["scans"] = [scan.as_json() for scan in self.scans]
        return data


Records = Annotated[tuple[CellResult, ...], Items(MAX_RECORDS)]


@dataclass(frozen=True)
class BuildReport:
    __pydantic_config__ = RECORD_CONFIG

    matrix: PathText
    started: Timestamp  # ISO 8601, UTC
    duration_s: Seconds
    engine: Text
    cells: Records
    bases: Records
    # Each `imagekit verify` of this report's cells, oldest first: its wall time and GPU-seconds.
    verify_runs: Annotated[tuple[VerifyRun, ...], Items(MAX_VERIFY_RUNS)] = ()

    @property
    def failed(self) -> bool:
        built_badly = any(r.status in ("failed", "cancelled") for r in (*self.bases, *self.cells))
        return built_badly or any(
            r.verification is not None and r.verification.verdict == "failed" for r in self.cells
        )

    def with_verification(self, cell_id: str, verification: Verification) -> BuildReport:
        """A copy in which ``cell_id`` carries ``verification`` (the newest replaces the old)."""
        cells = tuple(replace(r, verification=verification) if r.id == cell_id else r for r in self.cells)
        return replace(self, cells=cells)

    def with_cluster_validations(self, cell_id: str, records: tuple[ClusterValidation, ...]) -> BuildReport:
        """A copy in which ``cell_id`` carries ``records`` besides its earlier cluster validations;
        a record replaces an earlier one of its (cluster, product, digest): the newest run says."""
        new = {r.key for r in records}

        def added(result: CellResult) -> CellResult:
            kept = tuple(c for c in result.clusters if c.key not in new)
            return replace(result, clusters=(*kept, *records)[-MAX_ITEMS:])

        return replace(self, cells=tuple(added(r) if r.id == cell_id else r for r in self.cells))

    def with_verify_run(self, run: VerifyRun) -> BuildReport:
        """A copy that records ``run`` last (the oldest runs give way past ``MAX_VERIFY_RUNS``)."""
        return replace(self, verify_runs=(*self.verify_runs, run)[-MAX_VERIFY_RUNS:])

    def keeping_verifications(self, previous: BuildReport | None) -> BuildReport:
        """A copy in which each skipped cell whose image is the one ``previous`` recorded (same
        cell id, same image id) keeps that record's verification, and its staging record when
        this run staged nothing; a rebuilt image has neither."""
        if previous is None:
            return self
        before = {r.id: r for r in previous.cells}

        def kept(result: CellResult) -> CellResult:
            old = before.get(result.id)
            if (
                result.status != "skipped"
                or old is None
                or result.image_id is None
                or old.image_id != result.image_id
            ):
                return result
            if result.verification is None and old.verification is not None:
                result = replace(result, verification=old.verification)
            if result.staged is None and old.staged is not None:
                result = replace(result, staged=old.staged)
            if result.pull_cost is None and result.staged == old.staged:  # the same staged image
                result = replace(result, pull_cost=old.pull_cost)
            if not result.clusters and old.clusters:  # the same image: its runs on clusters hold
                result = replace(result, clusters=old.clusters)
            return result

        return replace(self, cells=tuple(kept(r) for r in self.cells))

    def with_pull_costs(self, costs: dict[str, PullCost]) -> BuildReport:
        """A copy in which each cell of ``costs`` carries its pull cost, and every cell's shared
        bytes are counted again against the others' layers."""
        found = {r.id: costs.get(r.id, r.pull_cost) for r in self.cells}
        shared = with_shared({cell: cost for cell, cost in found.items() if cost is not None})
        return replace(self, cells=tuple(replace(r, pull_cost=shared.get(r.id)) for r in self.cells))

    def with_scans(self, scans: Mapping[str, tuple[ScanSummary, ...]]) -> BuildReport:
        """A copy in which each cell of ``scans`` carries what its scanners found (the newest
        publish of a cell replaces the findings of an earlier one)."""
        return replace(self, cells=tuple(replace(r, scans=scans.get(r.id, r.scans)) for r in self.cells))

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for r in self.cells if r.status == status) for status in STATUSES}

    def as_json(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "matrix": self.matrix,
            "started": self.started,
            "duration_s": self.duration_s,
            "engine": self.engine,
            "counts": self.counts(),
            "cells": [_fit(r.as_json()) for r in self.cells],
            "bases": [_fit(r.as_json()) for r in self.bases],
            "verify_runs": [asdict(r) for r in self.verify_runs],
            "pull": asdict(pulled) if (pulled := self.pull()) else None,
        }

    def pull(self) -> MatrixPull | None:
        """What a fresh node fetches to run every cell whose pull cost is known."""
        return matrix_pull(r.pull_cost for r in self.cells if r.pull_cost is not None)


def write_report(state_dir: Path, report: BuildReport) -> Path:
    """Write the report whole; one its own reader would refuse (merged or imported past the
    limits) is refused here instead, and the previous report is kept."""
    path = state_dir / REPORT_NAME
    for kind, records in (("cells", report.cells), ("bases", report.bases)):
        if len(records) > MAX_RECORDS:
            raise InputError(
                f"{path}: the report would hold {len(records):,} {kind}; a report holds at most"
                f" {MAX_RECORDS:,}: merge or import fewer at once (the previous report is kept)"
            )
    text = report_json_text(report.as_json())
    if len(text.encode()) > STATE_BYTES:
        raise InputError(
            f"{path}: the report would be larger than {STATE_BYTES:,} bytes: merge or import fewer"
            " cells at once (the previous report is kept)"
        )
    try:
        atomic_write(path, text, inside=state_dir)
    except EnvironmentProblem as exc:  # a full or read-only disk: the rename never happened
        raise EnvironmentProblem(f"{exc.message}; the previous report is kept") from None
    return path


def _move_away(path: Path) -> str:
    return f"fix it, or move it away (`mv {path} {path}.bad`) to start a new report"


def _unreadable(path: Path, problem: str) -> InputError:
    return InputError(f"{path}: {problem}; {_move_away(path)}")


def parse_report(raw: bytes, path: Path) -> BuildReport:
    """A report file's bytes as a BuildReport, every field checked by its type and pattern (the
    file may have been edited, or come from another machine's CI job): the first wrong field is
    one InputError naming the file and the field. pydantic is imported here, when a report is read.
    """
    data = parse_json_object(raw, str(path), "report", _move_away(path), version=REPORT_VERSION)
    for key in ("cells", "bases"):  # counted before the records are built (pydantic counts after)
        if isinstance(data.get(key), list) and len(data[key]) > MAX_RECORDS:
            raise _unreadable(
                path, f"{key}: {len(data[key]):,} records; a report holds at most {MAX_RECORDS:,}"
            )
    del data
    report = validate_json(BuildReport, raw, str(path), _move_away(path))
    for key, records in (("cells", report.cells), ("bases", report.bases)):
        seen: set[str] = set()
        for record in records:
            if record.id in seen:  # which one is true is unknowable: never "the last one wins"
                raise _unreadable(path, f"{key}: two records for {record.id}; keep the one that is right")
            seen.add(record.id)
    for record in report.cells:
        problem = record.verification and _contradiction(record.id, record.verification)
        if problem:
            raise InputError(f"{path}: cells: {record.id}: {problem}; run `imagekit verify` again")
        for run in record.clusters:  # a validation on a cluster is held to the same rule
            problem = _contradiction(record.id, run.verification)
            if problem:
                raise InputError(
                    f"{path}: cells: {record.id}: clusters: {run.cluster} {run.product}: {problem};"
                    " record its Job's output again (`imagekit k8s-results`)"
                )
    return report


def _contradiction(cell: str, verification: Verification) -> str | None:
    """Why a verification record contradicts itself, or None."""
    if verification.target != cell:
        return f"its verification is of {verification.target}"
    derived = derive_verdict(
        verification.checks,
        verification.gpu_requested,
        verification.gpu_visible,
        verification.error,
        verification.emulated,
    )
    where = verification.platform
    if derived != verification.verdict and where is not None and where.is_emulated:
        return (
            f"its verification says {verification.verdict!r}, but its run was emulated ({where.machine} on"
            f" {where.host_machine}), which is never validated"
        )
    if derived != verification.verdict:
        return f"its verification says {verification.verdict!r}, but its own checks say {derived!r}"
    return None


def read_previous(state_dir: Path) -> BuildReport | None:
    """The report in ``state_dir``; None when there is none yet, an InputError when unreadable."""
    path = state_dir / REPORT_NAME
    try:
        raw = read_regular_file(path, STATE_BYTES, "the report.json imagekit writes")
    except FileNotFoundError:
        return None
    except InputError as exc:
        raise InputError(f"{exc.message}; {_move_away(path)}") from None
    return parse_report(raw, path)


def check_output_path(path: Path, state_dir: Path, flag: str, published_lock: Path | None = None) -> None:
    """Refuse, before any work, an output flag's path that would replace the state directory's
    own report or lock (``report --html .imagekit/report.json`` would destroy the report it
    renders), the published lock file (``images.lock.json``), or something that is not a regular
    file."""
    target = os.path.realpath(path)
    for name in (REPORT_NAME, LOCK_NAME):
        if target == os.path.realpath(state_dir / name):
            raise InputError(f"{flag} {path}: is imagekit's own {name} in {state_dir}; write it elsewhere")
    if published_lock is not None and target == os.path.realpath(published_lock):
        raise InputError(f"{flag} {path}: is the lock file `imagekit publish` writes; write it elsewhere")
    check_write_target(path, path.parent)


def read_report(state_dir: Path) -> BuildReport:
    """The report in ``state_dir``, which must exist (the verbs that only show it)."""
    return ReportStore(state_dir, read_previous(state_dir)).require()


class ReportStore:
    """One run's view of the state directory: the previous report, read once, and its writes."""

    def __init__(self, state_dir: Path, previous: BuildReport | None) -> None:
        self.state_dir = state_dir
        self.previous = previous

    @property
    def logs(self) -> Path:
        return self.state_dir / LOGS_DIR

    @property
    def path(self) -> Path:
        return self.state_dir / REPORT_NAME

    def require(self) -> BuildReport:
        """The previous report, which this verb needs (verify, publish)."""
        if self.previous is None:
            raise InputError(f"no build report at {self.path}; run `imagekit build` first")
        return self.previous

    def text(self) -> str:
        """The report file as it stands (what ``--json`` prints), read as bounded as any state file."""
        try:
            return read_regular_text(self.path, STATE_BYTES, "the report.json imagekit writes")
        except FileNotFoundError:
            raise InputError(f"no build report at {self.path}; run `imagekit build` first") from None

    def save(self, report: BuildReport) -> Path:
        """Replace the report; later readers of this store see it as the previous one."""
        path = write_report(self.state_dir, report)
        self.previous = report
        return path


@contextmanager
def open_store(state_dir: Path) -> Iterator[ReportStore]:
    """Lock ``state_dir`` for this run and read its report once."""
    with state_lock(state_dir):
        yield ReportStore(state_dir, read_previous(state_dir))
