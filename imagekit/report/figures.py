"""The figures an image's check reported, as the report holds them.

The timed GEMM's detail is whatever the image printed: every value is checked (a finite number
within FIGURE_BOUND, a string cut short) before it becomes a typed record, so a report written
from any output is one imagekit reads back. The figures of an emulated run are QEMU's: marked
emulated (``gemm_perf.emulated``) and held without floors or a status against them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from imagekit.core.limits import MAX_GPUS, MAX_ITEMS, SHORT_CHARS
from imagekit.probe.protocol import GEMM_PERF, SKIP
from imagekit.report.verification import FIGURE_BOUND, CheckRecord, GpuFigures, Span


def _scalar(value: object) -> float | str | None:
    """A figure as the report holds it: a finite number or a short string (the image printed it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer past a float's range (JSON has no bound on digits)
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return value[:SHORT_CHARS]
    return None


# Telemetry the check sampled during the timed GEMM (nvidia-smi's names -> the report's).
TELEMETRY = {
    "clocks_sm_mhz": "sm_clock_mhz",
    "power_draw_w": "power_w",
    "temperature_gpu_c": "temperature_c",
    "utilization_gpu_pct": "utilization_pct",
    "memory_used_mib": "memory_used_mib",
}


def _number(value: object) -> float | None:
    """A number a report holds (finite, within FIGURE_BOUND), or None."""
    found = _scalar(value)
    return found if isinstance(found, float) and abs(found) <= FIGURE_BOUND else None


def _count(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and 0 <= number < 2**63 else None


def _span(stats: object) -> Span | None:
    if not isinstance(stats, Mapping):
        return None
    low, high, mean = (_number(stats.get(k)) for k in ("min", "max", "mean"))
    return Span(low, high, mean)


def _gpu_figures(device: Mapping[str, Any], emulated: bool) -> GpuFigures:
    """One device of the timed GEMM as the image reported it, each figure checked (an emulated
    run's: no floor, never a status against one)."""
    telemetry = device.get("telemetry")
    telemetry = telemetry if isinstance(telemetry, Mapping) else {}
    sampled = telemetry.get("metrics")
    sampled = sampled if isinstance(sampled, Mapping) else {}
    reasons = telemetry.get("throttle_reasons")
    reasons = reasons if isinstance(reasons, Mapping) else {}
    counts = reasons.get("counts")
    throttle = {
        str(k)[:SHORT_CHARS]: n
        for k, v in (list(counts.items())[:MAX_ITEMS] if isinstance(counts, Mapping) else ())
        if (n := _count(v))
    }
    device_name = _scalar(device.get("device"))
    status = _scalar(device.get("status"))
    return GpuFigures(
        index=_count(device.get("index")),
        device=device_name if isinstance(device_name, str) else None,
        tflops=_number(device.get("tflops")),
        floor_tflops=None if emulated else _number(device.get("floor_tflops")),
        status=SKIP if emulated else status if isinstance(status, str) else None,
        throttle=throttle,
        throttled_samples=_count(reasons.get("perf_limiting_samples")),
        **{name: _span(sampled.get(source)) for source, name in TELEMETRY.items()},
    )


def gemm_figures(
    checks: tuple[CheckRecord, ...], emulated: bool = False
) -> tuple[dict[str, Any], tuple[GpuFigures, ...]]:
    """Figures worth a column in the report: the timed GEMM's TFLOP/s (the slowest device), device
    and floor; and per GPU its figure with the telemetry sampled while it ran. ``emulated``: the
    figures are marked so, with no floor."""
    out: dict[str, Any] = {}
    gpus: tuple[GpuFigures, ...] = ()
    for check in checks:
        if check.name != GEMM_PERF or check.actual is None:
            continue
        try:
            tflops = _scalar(float(check.actual))
            detail = json.loads(check.detail or "{}")
        except (ValueError, RecursionError):  # the image's output: any text, nested any depth
            continue
        if tflops is not None:
            out[f"{GEMM_PERF}.tflops"] = tflops
        if emulated:
            out[f"{GEMM_PERF}.emulated"] = True
        if isinstance(detail, dict):
            out[f"{GEMM_PERF}.device"] = _scalar(detail.get("device"))
            out[f"{GEMM_PERF}.floor_tflops"] = None if emulated else _scalar(detail.get("floor_tflops"))
            devices = detail.get("devices")
            if isinstance(devices, list):
                gpus = tuple(_gpu_figures(d, emulated) for d in devices[:MAX_GPUS] if isinstance(d, Mapping))
    return out, gpus
