"""The build report and its one store: per-cell records, read once per run, written whole.

``.imagekit/report.json`` holds what each run built and how each image was verified. Every stage
that records something (build, verify, bake-import, merge-reports) opens the store once: it takes
``.imagekit/lock`` (``flock``: two runs in one working directory would interleave their logs and
reports), reads the previous report once, and replaces the file in one ``os.replace`` (a reader
sees the previous report or the new one, never half of either). A previous report that cannot be
read is an input error (exit 2) naming the file and the way out; it is never silently replaced.
The records live here, so nothing that stores or shows a report imports a stage.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from imagekit.atomic import atomic_write
from imagekit.errors import EnvironmentProblem, InputError

Status = Literal["built", "skipped", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("built", "skipped", "failed", "cancelled")
Verdict = Literal["validated", "checked", "failed"]
REPORT_NAME = "report.json"
LOCK_NAME = "lock"
LOGS_DIR = "logs"
REPORT_VERSION = 1


# -- verification records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRecord:
    name: str
    status: str  # pass | fail | skip
    required: bool
    reason: str | None = None
    expected: str | None = None
    actual: str | None = None
    detail: str | None = None
    cause: str | None = None
    fix: str | None = None
    duration_s: float = 0.0

    @classmethod
    def from_script(cls, raw: Mapping[str, Any]) -> CheckRecord:
        def text(key: str) -> str | None:
            value = raw.get(key)
            if value is None:
                return None
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

        return cls(
            name=str(raw.get("name", "?")),
            status=str(raw.get("status", "fail")),
            required=bool(raw.get("required", True)),
            reason=text("reason"),
            expected=text("expected"),
            actual=text("actual"),
            detail=text("detail"),
            cause=text("cause"),
            fix=text("fix"),
            duration_s=float(raw.get("duration_s") or 0.0),
        )


@dataclass(frozen=True)
class Verification:
    target: str
    image: str
    gpus: str
    verdict: Verdict
    gpu_requested: bool
    gpu_visible: bool
    checks: tuple[CheckRecord, ...]
    duration_s: float
    error: str | None = None  # one line: why the run itself failed (timeout, no JSON, ...)
    exit_code: int | None = None
    log: str | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    finished_at: str | None = None  # ISO 8601 UTC; when the verdict was reached
    # The manifest digest of the image the checks ran on, when it came from a registry (verify
    # --pull runs the staged repo@digest; otherwise the engine's RepoDigests name it, if at all).
    image_digest: str | None = None

    @property
    def label(self) -> str:
        return {"validated": "validated", "checked": "checked without GPU", "failed": "failed"}[self.verdict]

    def failed_checks(self) -> tuple[CheckRecord, ...]:
        return tuple(c for c in self.checks if c.status not in ("pass", "skip"))

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["checks"] = [asdict(c) for c in self.checks]
        data["metrics"] = dict(self.metrics)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        return cls(
            **{
                **data,
                "checks": tuple(CheckRecord(**c) for c in data["checks"]),
                "metrics": dict(data.get("metrics") or {}),
            }
        )


# -- build records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Staged:
    """Where ``build --push`` put a cell's image: a staging tag and the manifest digest pushed."""

    registry: str  # host[:port]
    repository: str  # without the registry
    tag: str  # staging-<input digest, 12 hex>
    digest: str  # sha256:... of the manifest, what repo@digest pulls

    @property
    def name(self) -> str:
        """``registry/repository``, as the engine names it."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """``registry/repository@sha256:...``: exactly the staged image."""
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class CellResult:
    id: str
    kind: Literal["cell", "base"]
    status: Status
    base_image: str
    image_id: str | None = None
    tags: tuple[str, ...] = ()  # full references (repository:tag) the image carries
    size: int | None = None  # bytes
    input_digest: str | None = None
    base_digest: str | None = None  # name@sha256:... when pulled, else the base's image id
    duration_s: float = 0.0
    log: str | None = None
    error: str | None = None  # one-line reason
    error_tail: tuple[str, ...] = ()  # the last lines of the build output
    verification: Verification | None = None  # the last `imagekit verify` of this image
    image_digest: str | None = None  # sha256:... of the pushed manifest, when known (bake-import)
    staged: Staged | None = None  # where `build --push` staged this image

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["error_tail"] = list(self.error_tail)
        data["verification"] = self.verification.as_json() if self.verification else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        verification = data.get("verification")
        staged = data.get("staged")
        return cls(
            **{
                **data,
                "tags": tuple(data["tags"]),
                "error_tail": tuple(data["error_tail"]),
                "verification": Verification.from_json(verification) if verification else None,
                "staged": Staged(**staged) if staged else None,
            }
        )


@dataclass(frozen=True)
class BuildReport:
    matrix: str
    started: str  # ISO 8601, UTC
    duration_s: float
    engine: str
    cells: tuple[CellResult, ...]
    bases: tuple[CellResult, ...]

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
            return result

        return replace(self, cells=tuple(kept(r) for r in self.cells))

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
            "cells": [r.as_json() for r in self.cells],
            "bases": [r.as_json() for r in self.bases],
        }


def write_report(state_dir: Path, report: BuildReport) -> Path:
    path = state_dir / REPORT_NAME
    try:
        atomic_write(path, json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # a full or read-only disk: the rename never happened
        raise EnvironmentProblem(
            f"cannot write the report {path}: {exc.strerror or exc}; the previous report is kept"
        ) from None
    return path


def _unreadable(path: Path, problem: str) -> InputError:
    return InputError(
        f"{path}: {problem}; fix it, or move it away (`mv {path} {path}.bad`) to start a new report"
    )


def read_previous(state_dir: Path) -> BuildReport | None:
    """The report in ``state_dir``; None when there is none yet, an InputError when unreadable."""
    path = state_dir / REPORT_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise _unreadable(path, f"not a readable report ({exc})") from None
    try:
        version = data.get("version")
        if type(version) is not int or version != REPORT_VERSION:  # true and 1.0 equal 1 too
            raise _unreadable(path, f"report version {data.get('version')!r}; expected {REPORT_VERSION}")
        return BuildReport(
            matrix=data["matrix"],
            started=data["started"],
            duration_s=data["duration_s"],
            engine=data["engine"],
            cells=tuple(CellResult.from_json(c) for c in data["cells"]),
            bases=tuple(CellResult.from_json(c) for c in data["bases"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise _unreadable(path, f"malformed report ({exc!r})") from None


def read_report(state_dir: Path) -> BuildReport:
    """The report in ``state_dir``, which must exist (the verbs that only show it)."""
    return ReportStore(state_dir, read_previous(state_dir)).require()


_KEPT = "imagekit needs room there for its logs and report; the previous report is kept"
PROBE_BYTES = 64 << 10


def _probe_room(state_dir: Path) -> None:
    """Fail before any work when the state directory cannot take a report and a few logs."""
    probe = state_dir / f".room-probe.{os.getpid()}.tmp"
    try:
        with probe.open("wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        probe.unlink(missing_ok=True)


@contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """Hold ``state_dir/lock`` exclusively; a second holder fails at once instead of waiting."""
    path = state_dir / LOCK_NAME
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot use {path}: {exc.strerror or exc}; {_KEPT}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise EnvironmentProblem(
                f"another `imagekit build` (pid {holder}) holds {path}; wait for it to finish"
                " or use another working directory"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _probe_room(state_dir)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot write in {state_dir}: {exc.strerror or exc}; {_KEPT}") from None
        yield
    finally:
        os.close(fd)  # closing releases the flock


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
