"""One self-contained HTML page of the last run: a grid per base (torch down, CUDA across).

Each cell of the grid is coloured by its status (the verification verdict when there is one,
else the build status) and opens (``<details>``) to its checks, image size, durations and GEMM
figures. No script, no external resource; every value goes through ``html.escape``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from imagekit.core import platforms
from imagekit.core.versions import display_key
from imagekit.report.store import BuildReport, CellResult
from imagekit.report.text import (
    ADVISORY_HEADERS,
    PUBLISHED_HEADERS,
    PULL_HEADERS,
    SCAN_HEADERS,
    advisory_rows,
    cuda_archs,
    format_size,
    published_rows,
    pull_line,
    pull_rows,
    scan_rows,
    summary_line,
    throttle_note,
)
from imagekit.report.verification import CheckRecord, GpuFigures, Span

if TYPE_CHECKING:
    from imagekit.report.lockfile import Lock

_SUFFIXES = "|".join(re.escape(p.suffix[1:]) for p in platforms.PLATFORMS.values() if p.suffix)
_CELL_ID = re.compile(
    r"^(?P<base>.+?)-torch(?P<torch>.+)-(?P<accel>cuda[0-9.]+|cpu)-py(?P<python>[0-9.]+)"
    rf"-(?P<flavour>[A-Za-z0-9_]+(?:-jupyter|-ssh)?)(?:-(?P<arch>{_SUFFIXES}))?$"
)
OTHER = "(other)"

COLOURS = {
    "validated": "#1a7f37",
    "checked without GPU": "#4d8fcc",
    "built": "#6e7781",
    "skipped": "#8c959f",
    "failed": "#cf222e",
    "cancelled": "#bf8700",
}

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1f2328; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.grid { border-collapse: collapse; }
table.grid th, table.grid td { border: 1px solid #d0d7de; padding: 4px 6px; vertical-align: top; }
table.grid th { background: #f6f8fa; }
.cell { border-radius: 4px; color: #fff; margin: 2px 0; min-width: 11em; }
.cell > summary { cursor: pointer; padding: 3px 6px; font-weight: 600; }
.cell .body { background: #fff; color: #1f2328; padding: 6px; border: 1px solid #d0d7de; }
table.checks { border-collapse: collapse; font-size: 12px; }
table.checks td, table.checks th { border: 1px solid #d0d7de; padding: 2px 4px; }
.pass { color: #1a7f37; } .fail { color: #cf222e; font-weight: 600; } .skip { color: #6e7781; }
.legend span { display: inline-block; color: #fff; padding: 1px 6px; border-radius: 3px; margin-right: 4px; }
pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: 4px; }
"""


@dataclass(frozen=True)
class Placed:
    base: str
    torch: str
    accel: str
    variant: str  # python and flavour: what tells apart two results in one grid slot
    result: CellResult


def place(result: CellResult) -> Placed:
    match = _CELL_ID.match(result.id)
    if match is None:
        return Placed(OTHER, "-", "-", result.id, result)
    return Placed(
        match["base"],
        match["torch"],
        match["accel"],
        " ".join(filter(None, (f"py{match['python']}", match["flavour"], match["arch"]))),
        result,
    )


def accel_key(accel: str) -> tuple[int, tuple[tuple[int, ...], str]]:
    return (0, ((), "")) if accel == "cpu" else (1, display_key(accel.removeprefix("cuda")))


def status_of(result: CellResult) -> str:
    if result.verification is not None:
        return result.verification.label
    return result.status


def _row(name: str, value: object) -> str:
    return f"<tr><th>{escape(name)}</th><td>{escape(str(value))}</td></tr>"


def _checks(checks: Iterable[CheckRecord]) -> str:
    rows = []
    for check in checks:
        why = " ".join(
            part
            for part in (
                check.reason or "",
                f"cause: {check.cause}" if check.cause else "",
                f"fix: {check.fix}" if check.fix else "",
            )
            if part
        )
        rows.append(
            "<tr>"
            f"<td>{escape(check.name)}</td>"
            f'<td class="{escape(check.status)}">{escape(check.status)}</td>'
            f"<td>{escape(check.expected or '')}</td>"
            f"<td>{escape(check.actual or '')}</td>"
            f"<td>{escape(why)}</td>"
            f"<td>{check.duration_s:.2f}s</td>"
            "</tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>check</th><th>status</th><th>expected</th><th>actual</th><th>why</th><th>time</th></tr>"
    return f'<table class="checks">{head}{"".join(rows)}</table>'


def _span(stats: Span | None, unit: str) -> str:
    """``1410-1980 MHz (mean 1760)`` from the telemetry sampled while the GEMM ran."""
    if stats is None or None in (stats.min, stats.max, stats.mean):
        return "-"
    return f"{stats.min:.0f}-{stats.max:.0f} {unit} (mean {stats.mean:.0f})"


def _gpus(gpus: Sequence[GpuFigures]) -> str:
    """Per GPU: the timed GEMM against its floor, and what the GPU did meanwhile (clock, power,
    temperature, throttle reasons), so a low figure can be told apart from throttling."""
    rows = []
    for gpu in gpus:
        figure = "-" if gpu.tflops is None else f"{gpu.tflops:.1f}"
        throttle = ", ".join(f"{k} ({v})" for k, v in gpu.throttle.items()) or "none"
        cells = (
            "-" if gpu.index is None else str(gpu.index),
            gpu.device or "-",
            figure + ("" if gpu.floor_tflops is None else f" (floor {gpu.floor_tflops:.0f})"),
            gpu.status or "-",
            _span(gpu.sm_clock_mhz, "MHz"),
            _span(gpu.power_w, "W"),
            _span(gpu.temperature_c, "C"),
            throttle,
        )
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    if not rows:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in ("GPU", "device", "TFLOP/s", "status", "SM clock", "power", "temperature", "throttle")
    )
    note = throttle_note(gpus)
    caption = f"<caption>timed GEMM per GPU{escape('; ' + note) if note else ''}</caption>"
    return f'<table class="checks gpus">{caption}<tr>{head}</tr>{"".join(rows)}</table>'


def render_cell(placed: Placed) -> str:
    result = placed.result
    status = status_of(result)
    colour = COLOURS.get(status, "#6e7781")
    verification = result.verification
    facts = [
        _row("cell", result.id),
        _row("build", result.status),
        _row("image size", format_size(result.size)),
        _row("build time", f"{result.duration_s:.1f}s"),
        _row("image", result.image_id or "-"),
    ]
    if result.image_digest:
        facts.append(_row("digest", result.image_digest))
    facts += [_row("base", result.base_digest or result.base_image)]
    if result.tags:
        facts.append(_row("tags", ", ".join(result.tags)))
    if verification is not None:
        facts += [
            _row("verdict", verification.label),
            _row("verify time", f"{verification.duration_s:.1f}s"),
            _row("GPUs", f"{verification.gpus} (visible: {'yes' if verification.gpu_visible else 'no'})"),
        ]
        if verification.platform is not None:
            facts.append(_row("machine", verification.platform.text))
        if archs := cuda_archs(verification):  # which GPUs the image serves
            facts.append(_row("CUDA archs", archs))
        tflops = verification.metrics.get("gemm_perf.tflops")
        if isinstance(tflops, int | float):
            device = verification.metrics.get("gemm_perf.device") or "?"
            floor = verification.metrics.get("gemm_perf.floor_tflops")
            note = " (emulated: not compared with a floor)" if verification.emulated else ""
            note = note or (f" (floor {floor})" if floor else "")
            facts.append(_row("GEMM", f"{tflops:.1f} TFLOP/s on {device}{note}"))
        if verification.error:
            facts.append(_row("verify error", verification.error))
    if result.error:
        facts.append(_row("error", result.error))
    body = f"<table>{''.join(facts)}</table>"
    if verification is not None:
        body += _gpus(verification.gpu_figures) + _checks(verification.checks)
    if result.error_tail:
        body += f"<pre>{escape(chr(10).join(result.error_tail))}</pre>"
    return (
        f'<details class="cell" data-cell="{escape(result.id)}" data-status="{escape(status)}"'
        f' style="background:{colour}">'
        f"<summary>{escape(placed.variant)}: {escape(status)}</summary>"
        f'<div class="body">{body}</div></details>'
    )


def render_grid(base: str, placed: list[Placed]) -> str:
    torches = sorted({p.torch for p in placed}, key=display_key)
    accels = sorted({p.accel for p in placed}, key=accel_key)
    slots: dict[tuple[str, str], list[Placed]] = defaultdict(list)
    for item in placed:
        slots[(item.torch, item.accel)].append(item)
    head = "<tr><th>torch \\ CUDA</th>" + "".join(f"<th>{escape(a)}</th>" for a in accels) + "</tr>"
    rows = []
    for torch in torches:
        tds = []
        for accel in accels:
            entries = sorted(slots.get((torch, accel), []), key=lambda p: p.variant)
            tds.append("<td>" + "".join(render_cell(p) for p in entries) + "</td>")
        rows.append(f"<tr><th>{escape(torch)}</th>{''.join(tds)}</tr>")
    return (
        f'<section class="base" data-base="{escape(base)}"><h2>{escape(base)}</h2>'
        f'<table class="grid">{head}{"".join(rows)}</table></section>'
    )


def _section(
    name: str, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], note: str = ""
) -> str:
    """A titled table of ``rows`` (every value escaped), after an optional line; "" when empty."""
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    line = f"<p>{escape(note)}</p>" if note else ""
    table = f'<table class="grid"><tr>{head}</tr>{body}</table>'
    return f'<section id="{name}"><h2>{escape(title)}</h2>{line}{table}</section>'


def render_published(lock: Lock | None) -> str:
    """What the lock says was published: each index's platforms and the ones it left out."""
    rows = published_rows(lock) if lock is not None else []
    return _section("published", "Published", PUBLISHED_HEADERS, rows)


def render_advisories(report: BuildReport) -> str:
    """The advisories each cell ships: waived ones with the matrix's reason, the rest below its
    threshold (the same rows as the text report and the job summary)."""
    return _section("advisories", "Advisories", ADVISORY_HEADERS, advisory_rows(report))


def render_scans(report: BuildReport) -> str:
    """Each published cell's scanner findings, counted per severity, with the waivers used."""
    return _section("scans", "Vulnerability scans", SCAN_HEADERS, scan_rows(report))


def render_pull(report: BuildReport) -> str:
    """What a node pulls for each counted cell, and for all of them (each layer once)."""
    return _section("pull", "Pull cost", PULL_HEADERS, pull_rows(report), pull_line(report) or "")


def render_html(report: BuildReport, lock: Lock | None = None) -> str:
    grouped: dict[str, list[Placed]] = defaultdict(list)
    for result in report.cells:
        item = place(result)
        grouped[item.base].append(item)
    grids = "".join(render_grid(base, grouped[base]) for base in sorted(grouped))
    legend = "".join(f'<span style="background:{c}">{escape(s)}</span>' for s, c in COLOURS.items())
    bases = ""
    if report.bases:
        items = "".join(
            f"<li>{escape(b.id)}: {escape(b.status)}" + (f" ({escape(b.error)})" if b.error else "") + "</li>"
            for b in report.bases
        )
        bases = f"<h2>Local bases</h2><ul>{items}</ul>"
    title = f"imagekit: {report.matrix}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p id="summary">{escape(summary_line(report))}; started {escape(report.started)}'
        f" on {escape(report.engine)}</p>"
        f'<p class="legend">{legend}</p>{grids}{bases}'
        f"{render_advisories(report)}{render_scans(report)}{render_pull(report)}{render_published(lock)}"
        "</body></html>\n"
    )
