"""The build report: per-cell records, written atomically, guarded by a lock, shown as a table.

``.imagekit/report.json`` is replaced in one ``os.replace``: a reader sees the previous report or
the new one, never half of either. ``.imagekit/lock`` (``flock``) keeps two builds in the same
working directory from interleaving their logs and reports.
"""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from imagekit.atomic import atomic_write
from imagekit.errors import EnvironmentProblem, InputError
from imagekit.verify import Verification

Status = Literal["built", "skipped", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("built", "skipped", "failed", "cancelled")
REPORT_NAME = "report.json"
LOCK_NAME = "lock"
LOGS_DIR = "logs"
REPORT_VERSION = 1


@dataclass(frozen=True)
class CellResult:
    id: str
    kind: Literal["cell", "base"]
    status: Status
    image_id: str | None
    tags: tuple[str, ...]  # full references (repository:tag) the image carries
    size: int | None  # bytes
    input_digest: str | None
    base_image: str
    base_digest: str | None  # name@sha256:... when pulled, else the base's image id
    duration_s: float
    log: str | None
    error: str | None  # one-line reason
    error_tail: tuple[str, ...] = ()  # the last lines of the build output
    verification: Verification | None = None  # the last `imagekit verify` of this image
    image_digest: str | None = None  # sha256:... of the pushed manifest, when known (bake-import)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["error_tail"] = list(self.error_tail)
        data["verification"] = self.verification.as_json() if self.verification else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        verification = data.get("verification")
        return cls(
            **{
                **data,
                "tags": tuple(data["tags"]),
                "error_tail": tuple(data["error_tail"]),
                "verification": Verification.from_json(verification) if verification else None,
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
        cell id, same image id) keeps that record's verification; a rebuilt image has none."""
        if previous is None:
            return self
        before = {r.id: r for r in previous.cells}

        def kept(result: CellResult) -> CellResult:
            old = before.get(result.id)
            if (
                result.status == "skipped"
                and result.verification is None
                and old is not None
                and old.verification is not None
                and result.image_id is not None
                and old.image_id == result.image_id
            ):
                return replace(result, verification=old.verification)
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


def read_report(state_dir: Path) -> BuildReport:
    path = state_dir / REPORT_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no build report at {path}; run `imagekit build` first") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable report ({exc})") from None
    try:
        version = data.get("version")
        if type(version) is not int or version != REPORT_VERSION:  # true and 1.0 equal 1 too
            raise InputError(f"{path}: report version {data.get('version')!r}; expected {REPORT_VERSION}")
        return BuildReport(
            matrix=data["matrix"],
            started=data["started"],
            duration_s=data["duration_s"],
            engine=data["engine"],
            cells=tuple(CellResult.from_json(c) for c in data["cells"]),
            bases=tuple(CellResult.from_json(c) for c in data["bases"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: malformed report ({exc!r})") from None


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


# -- presentation -------------------------------------------------------------------------------------


def format_size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e6:.1f} MB" if size < 1e9 else f"{size / 1e9:.2f} GB"


def _short_id(image_id: str | None) -> str:
    return image_id.split(":", 1)[-1][:12] if image_id else "-"


ROW_HEADERS = ("cell", "status", "verified", "image", "size", "time", "base digest", "detail")


def _verified(result: CellResult) -> str:
    verification = result.verification
    if verification is None:
        return "-"
    tflops = next((v for k, v in verification.metrics.items() if k.endswith(".tflops")), None)
    return verification.label + (f" ({tflops:.0f} TFLOP/s)" if isinstance(tflops, int | float) else "")


def rows(report: BuildReport) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for result in (*report.bases, *report.cells):
        base = result.base_digest or "-"
        if "@sha256:" in base:
            base = "@" + base.split("@", 1)[1][:19]
        elif base.startswith("sha256:"):
            base = base[:19]
        detail = result.error or (result.tags[0] if result.tags else "")
        if result.verification and result.verification.verdict == "failed":
            failed = result.verification.failed_checks()
            detail = result.verification.error or "; ".join(
                f"{c.name}: {c.cause or c.reason or 'failed'}" for c in failed[:2]
            )
        name = result.id if result.kind == "cell" else f"{result.id} (base)"
        out.append(
            (
                name,
                result.status,
                _verified(result) if result.kind == "cell" else "",
                _short_id(result.image_id),
                format_size(result.size),
                f"{result.duration_s:.1f}s",
                base,
                detail,
            )
        )
    return out


def summary_line(report: BuildReport) -> str:
    counts = report.counts()
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
    return f"{len(report.cells)} cells: {', '.join(parts) or 'none'} in {report.duration_s:.1f}s"


def markdown(report: BuildReport) -> str:
    """A GitHub job summary: a table, then each failure's last lines in a details block."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"### imagekit build: {report.matrix}", "", summary_line(report), ""]
    lines.append("| " + " | ".join(ROW_HEADERS) + " |")
    lines.append("|" + "---|" * len(ROW_HEADERS))
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows(report)]
    for result in (*report.bases, *report.cells):
        if result.status == "failed" and result.error_tail:
            summary = html.escape(f"{result.id}: {cell(result.error or '')}", quote=False)
            # a fence longer than any backtick run in the log, so the log cannot close it
            longest = max(
                (len(run) for line in result.error_tail for run in re.findall("`+", line)), default=0
            )
            fence = "`" * max(3, longest + 1)
            lines += ["", f"<details><summary>{summary}</summary>", ""]
            lines += [fence, *result.error_tail, fence, "", "</details>"]
    return "\n".join(lines) + "\n"
