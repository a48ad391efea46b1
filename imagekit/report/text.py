"""The build report as text: a table for terminals, Markdown for a CI job summary.

Values come from a state file that may have been edited (or from what an image printed): every
one is escaped for the format it lands in. Rows are terminal-safe (no control or invisible
character); Markdown escapes HTML and Markdown's own syntax in every value, so a value stays text
in a job summary (never a tag, an image, a link or a table cell of its own).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from imagekit.core.text import counted, printable
from imagekit.probe import protocol
from imagekit.probe.protocol import FAIL
from imagekit.report.pullcost import gib, matrix_line
from imagekit.report.store import STATUSES, BuildReport, CellResult
from imagekit.report.verification import GpuFigures, Verification, VerifyRun

if TYPE_CHECKING:
    from imagekit.report.lockfile import Lock

_MARKDOWN_SYNTAX = re.compile(r"([\\`*_\[\]|~])")


def markdown_text(value: str) -> str:
    """``value`` as literal text inside Markdown (a table cell, a summary, a heading): one line,
    HTML escaped, and Markdown's inline syntax (emphasis, code, links, images, pipes) escaped."""
    return _MARKDOWN_SYNTAX.sub(r"\\\1", html.escape(printable(value), quote=False))


def format_size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e6:.1f} MB" if size < 1e9 else f"{size / 1e9:.2f} GB"


def _short_id(image_id: str | None) -> str:
    return image_id.split(":", 1)[-1][:12] if image_id else "-"


ROW_HEADERS = ("cell", "status", "verified", "cuda archs", "image", "size", "time", "base digest", "detail")


def _arch_words(text: str | None) -> str:
    """A check record's list (JSON, as the record holds it: ["sm_80", "sm_90"]) as "sm_80 sm_90"."""
    if not text:
        return ""
    try:
        value = json.loads(text)
    except ValueError:
        return text  # the record was cut to its length limit, or was a plain string
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def cuda_archs(verification: Verification | None) -> str:
    """The GPU architectures the image's torch carries kernels for: what the probe read in it
    (cuda_archs; with the label beside it when they differ), else the image's cuda-archs label as
    the probe was given it; "" when neither is known (not verified, a CPU build without a label)."""
    check = (
        next((c for c in verification.checks if c.name == protocol.CUDA_ARCHS), None)
        if verification is not None
        else None
    )
    if check is None:
        return ""
    read, label = _arch_words(check.actual), check.expected or ""
    if read:
        return f"{read} (label: {label})" if check.status == FAIL and label else read
    return f"{label} (label)" if label else ""


def throttle_note(gpus: Sequence[GpuFigures]) -> str:
    """``throttled: sw_power_cap`` when a GPU spent samples of the timed GEMM clock-limited: a low
    TFLOP/s figure is then the device's state, not the image's."""
    throttled = [g for g in gpus if g.throttled_samples]
    if not throttled:
        return ""
    reasons = sorted({k for g in throttled for k, v in g.throttle.items() if v})
    return f"throttled: {', '.join(reasons) or 'yes'}"


def cluster_note(result: CellResult) -> str:
    """``prod-east: validated on NVIDIA-H100-80GB-HBM3, NVIDIA-L40S``: the cell's runs on clusters
    (`imagekit k8s-results`), per cluster, and per digest where the cell has runs of several."""
    several = len({c.digest for c in result.clusters}) > 1
    by_place: dict[str, dict[str, list[str]]] = {}
    for run in result.clusters:
        place = f"{run.cluster} ({run.digest[:19]})" if several else run.cluster
        by_place.setdefault(place, {}).setdefault(run.verification.verdict, []).append(run.product)
    return "; ".join(
        f"{place}: "
        + ", ".join(f"{verdict} on {', '.join(sorted(products))}" for verdict, products in found.items())
        for place, found in sorted(by_place.items())
    )


def _verified(result: CellResult) -> str:
    verification = result.verification
    clusters = cluster_note(result)
    if verification is None:
        return clusters or "-"
    tflops = verification.metrics.get("gemm_perf.tflops")
    figures = [f"{tflops:.0f} TFLOP/s"] if isinstance(tflops, int | float) else []
    figures += [note] if (note := throttle_note(verification.gpu_figures)) else []
    if verification.inventory is not None and verification.inventory.duplicates is not None:
        figures.append(verification.inventory.duplicates.text)
    if verification.emulated and verification.platform is not None:
        figures.append(verification.platform.text)
    figures += [clusters] if clusters else []
    return verification.label + (f" ({'; '.join(figures)})" if figures else "")


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
        row = (
            name,
            result.status,
            _verified(result) if result.kind == "cell" else "",
            (cuda_archs(result.verification) or "-") if result.kind == "cell" else "",
            _short_id(result.image_id),
            format_size(result.size),
            f"{result.duration_s:.1f}s",
            base,
            detail,
        )
        out.append(tuple(printable(value) for value in row))
    return out


PUBLISHED_HEADERS = ("published as", "digest", "platforms", "left out")


def published_rows(lock: Lock) -> list[tuple[str, ...]]:
    """What the lock says was published: each index with its platforms (cell, verdict) and the
    platforms it left out (and why), then each image published alone with its platform."""
    out: list[tuple[str, ...]] = []
    in_index = {p.cell for index in lock.indexes.values() for p in index.platforms.values()}
    for group in sorted(lock.indexes):
        index = lock.indexes[group]
        held = "; ".join(f"{name}: {p.cell} ({p.verdict})" for name, p in index.platforms.items())
        left = "; ".join(f"{name}: {m.cell} ({m.reason})" for name, m in index.missing.items())
        out.append((f"{index.tags[0]} (index)", index.digest[:19], held, left or "-"))
    for cell in sorted(set(lock.images) - in_index):
        entry = lock.images[cell]
        shown_as = entry.tags[0] if entry.tags else cell
        out.append((shown_as, entry.digest[:19], f"{entry.platform}: {cell} ({entry.level})", "-"))
    return [tuple(printable(value) for value in row) for row in out]


PULL_HEADERS = ("cell", "pulls", "largest layer", "made by", "shared")


def pull_rows(report: BuildReport) -> list[tuple[str, ...]]:
    """Each cell's pull cost (compressed bytes a fresh node fetches), where it was counted."""
    out: list[tuple[str, ...]] = []
    for result in report.cells:
        cost = result.pull_cost
        if cost is None:
            continue
        largest = cost.largest
        size = gib(largest.size) if largest else "-"
        row = (result.id, gib(cost.total), size, cost.largest_step, gib(cost.shared))
        out.append(tuple(printable(value) for value in row))
    return out


ADVISORY_HEADERS = ("cell", "advisory", "severity", "installed", "fixed in", "waived")


def advisory_rows(report: BuildReport) -> list[tuple[str, ...]]:
    """Each cell's advisories: waived ones with the matrix's reason, the rest below its threshold."""
    out: list[tuple[str, ...]] = []
    for result in report.cells:
        for finding in result.advisories:
            waived = finding.waived if finding.waived is not None else "no (below the threshold)"
            row = (
                result.id,
                finding.id,
                finding.severity,
                f"{finding.package} {finding.version}",
                finding.fixed,
                waived,
            )
            out.append(tuple(printable(value) for value in row))
    return out


SCAN_HEADERS = ("cell", "scanner", "digest", "critical", "high", "medium", "low", "other", "waived")


def scan_rows(report: BuildReport) -> list[tuple[str, ...]]:
    """Each published cell's scanner findings, counted per severity (other: negligible and
    unknown), and the findings at or above the threshold that a waiver let through."""
    out: list[tuple[str, ...]] = []
    for result in report.cells:
        for scan in result.scans:
            counts = scan.counts
            waived = "; ".join(f"{w.id} ({w.package}): {w.reason}" for w in scan.waived) or "-"
            row = (
                result.id,
                f"{scan.scanner} {scan.version}",
                scan.digest[:19],
                *(str(n) for n in (counts.critical, counts.high, counts.medium, counts.low)),
                str(counts.negligible + counts.unknown),
                waived,
            )
            out.append(tuple(printable(value) for value in row))
    return out


def pull_line(report: BuildReport) -> str | None:
    """The matrix-level line: distinct bytes against the images' sum; None when none was counted."""
    pulled = report.pull()
    return printable(matrix_line(pulled)) if pulled is not None else None


def summary_line(report: BuildReport) -> str:
    counts = report.counts()
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
    line = f"{counted(len(report.cells), 'cell')}: {', '.join(parts) or 'none'} in {report.duration_s:.1f}s"
    return line + "".join(f"; {verify_cost(run)}" for run in report.verify_runs[-1:])


def verify_cost(run: VerifyRun) -> str:
    """What a verify run cost: its GPU-seconds (each check container's time times the GPUs it held)."""
    spent = "GPU-seconds unknown" if run.gpu_seconds is None else f"{run.gpu_seconds:.1f} GPU-seconds"
    return f"verified {run.cells} in {run.wall_s:.1f}s, {run.jobs} at once: {spent}"


def markdown(report: BuildReport, lock: Lock | None = None) -> str:
    """A GitHub job summary: a table, then each failure's last lines in a details block, then
    what ``lock`` says was published (when it names anything)."""

    lines = [
        f"### imagekit build: {markdown_text(report.matrix)}",
        "",
        markdown_text(summary_line(report)),
        "",
    ]
    lines.append("| " + " | ".join(ROW_HEADERS) + " |")
    lines.append("|" + "---|" * len(ROW_HEADERS))
    lines += ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in rows(report)]
    for result in (*report.bases, *report.cells):
        if result.status == "failed" and result.error_tail:
            summary = markdown_text(f"{result.id}: {result.error or ''}")
            tail = [printable(line) for line in result.error_tail]  # code: no escaping, no controls
            # a fence longer than any backtick run in the log, so the log cannot close it
            longest = max((len(run) for line in tail for run in re.findall("`+", line)), default=0)
            fence = "`" * max(3, longest + 1)
            lines += ["", f"<details><summary>{summary}</summary>", ""]
            lines += [fence, *tail, fence, "", "</details>"]
    advised = advisory_rows(report)
    if advised:
        lines += ["", "#### advisories", "", *_markdown_table(ADVISORY_HEADERS, advised)]
    scanned = scan_rows(report)
    if scanned:
        lines += ["", "#### vulnerability scans", "", *_markdown_table(SCAN_HEADERS, scanned)]
    pulled = pull_rows(report)
    if pulled:
        lines += ["", "#### pull cost", "", markdown_text(pull_line(report) or ""), ""]
        lines += _markdown_table(PULL_HEADERS, pulled)
    published = published_rows(lock) if lock is not None else []
    if published:
        lines += ["", "#### published", "", *_markdown_table(PUBLISHED_HEADERS, published)]
    return "\n".join(lines) + "\n"


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table: its header, its rule, a line per row (every value escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in rows]
