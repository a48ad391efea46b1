"""gemm_perf: a timed GEMM per device against floors looked up by the exact device name."""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from .context import Context, torch_skip
from .gemm import FP8, FP8_CAPABILITY, cuda_device, cuda_devices, fp8_available
from .protocol import FAIL, PASS, SKIP
from .results import CheckResult, skipped
from .tables import gemm_products
from .telemetry import (
    PERF_LIMITING_REASONS,
    TELEMETRY_INTERVAL_MS,
    TelemetrySampler,
    match_smi_gpu,
    summarise_telemetry,
    telemetry_query_fields,
)

PERF_MIN_SECONDS = 2.0  # timed GEMM window per device (>= 1 s of wall time, ~10 telemetry samples)
PERF_N = 8192  # the timed GEMM is PERF_N^3


@dataclass(frozen=True)
class GemmFloor:
    tflops: float  # floor for the whole device, about 40-50% of the dense peak of `dtype`
    dtype: str  # what gemm_perf times on this device: bfloat16, or float16 below sm_80
    sms: int | None  # the whole device's SM count, to scale the floor for MIG slices
    fp8_tflops: float | None = None  # floor of the FP8 (E4M3, torch._scaled_mm) GEMM, sm_89 and later


def _floors() -> dict[str, GemmFloor]:
    return {
        name: GemmFloor(
            float(e["floor"]),
            str(e["dtype"]),
            int(e["sms"]) if e.get("sms") else None,
            float(e["fp8_floor"]) if e.get("fp8_floor") is not None else None,
        )
        for name, e in gemm_products().items()
    }


# Keyed by the EXACT name the driver reports (torch.cuda.get_device_name == nvidia-smi's name; a
# substring match once gave "NVIDIA RTX A1000" the A100 floor). The table is data
# (imagekit/data/gpus.yaml, gemm_floors, with its sources), generated into the zipapp's tables.json.
# Unknown devices get no floor (skip, never pass).
GEMM_FLOORS: dict[str, GemmFloor] = _floors()


def gemm_floor(device_name: str, sm_count: int | None = None, fp8: bool = False) -> tuple[float | None, str]:
    """(floor TFLOP/s, how it was found) for a device, by its EXACT name (``fp8``: its FP8 floor).
    A MIG slice ("<board> MIG 1g.5gb") gets the board's floor scaled by its share of the board's SMs
    (torch reports the slice's own multiprocessor count); (None, reason) when no floor applies."""
    name = device_name.strip()
    what = "FP8 floor" if fp8 else "floor"
    board, sep, profile = name.partition(" MIG ")
    entry = GEMM_FLOORS.get(name if not sep else board)
    if entry is None:
        if sep:
            return None, f"MIG slice {profile!r} of {board!r}: no floor known for the board"
        return None, f"no floor known for {name!r} (floors are matched by exact device name)"
    value = entry.fp8_tflops if fp8 else entry.tflops
    if value is None:
        return None, f"no {what} known for {board if sep else name!r}"
    if not sep:
        return value, f"exact name {name!r}"
    if not sm_count or not entry.sms:
        return (
            None,
            f"MIG slice {profile!r} of {board!r}: its SM count is unknown, the floor cannot be scaled",
        )
    fraction = min(1.0, sm_count / entry.sms)
    return (
        round(value * fraction, 1),
        f"MIG slice {profile!r}: {board!r} {what} {value} x {sm_count}/{entry.sms} SMs",
    )


def perf_dtype(device_name: str, capability: tuple[int, int]) -> str:
    """bfloat16 where the device has bf16 Tensor Cores (sm_80+), else float16."""
    entry = GEMM_FLOORS.get(device_name.partition(" MIG ")[0])
    if entry is not None:
        return entry.dtype
    return "bfloat16" if capability[0] >= 8 else "float16"


def _gemm_op(torch: Any, device: str, dtype_name: str, n: int) -> Any:
    """A zero-argument n^3 GEMM on ``device``: torch.matmul in ``dtype_name``, or FP8 through
    torch._scaled_mm (E4M3 operands prepared once, the second column-major; unit scales; bf16 out)."""
    if dtype_name != FP8:
        dtype = getattr(torch, dtype_name)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        return lambda: torch.matmul(a, b)
    fp8 = getattr(torch, FP8)
    a8 = torch.randn(n, n, device=device, dtype=torch.bfloat16).to(fp8)
    b8 = torch.randn(n, n, device=device, dtype=torch.bfloat16).to(fp8).t().contiguous().t()
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def time_gemm(
    torch: Any, index: int, dtype_name: str, n: int, min_seconds: float, on_window: Any = None
) -> dict[str, Any]:
    """TFLOP/s of an n^3 GEMM on device `index`, timed with CUDA events over at least min_seconds
    after a warm-up. on_window(start: bool) is called right before and after the timed window."""
    device = cuda_device(torch, index)
    with torch.cuda.device(index):
        op = _gemm_op(torch, device, dtype_name, n)
        for _ in range(3):
            op()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        end.synchronize()
        one = max(start.elapsed_time(end) / 1000.0, 1e-6)
        iterations = min(max(math.ceil(min_seconds / one * 1.1), 10), 200000)
        seconds = 0.0
        wall = 0.0
        if on_window is not None:
            on_window(True)
        try:
            # A device that speeds up between rounds (boost clocks, a neighbour's load gone) can
            # finish a round short of the window: aim past it, and try again a bounded few times.
            for _ in range(6):
                wall_start = time.perf_counter()
                start.record()
                for _ in range(iterations):
                    op()
                end.record()
                end.synchronize()
                wall = time.perf_counter() - wall_start
                seconds = start.elapsed_time(end) / 1000.0
                if seconds >= min_seconds:
                    break
                iterations = math.ceil(iterations * min_seconds / max(seconds, 1e-6) * 1.5)
        finally:
            if on_window is not None:
                on_window(False)
        del op
    return {
        "dtype": dtype_name,
        "shape": [n, n, n],
        "iterations": iterations,
        "seconds": round(seconds, 4),
        "wall_seconds": round(wall, 4),
        "tflops": float(f"{2 * n**3 * iterations / seconds / 1e12:.4g}") if seconds > 0 else None,
    }


def _perf_gate(ctx: Context) -> CheckResult | None:
    """gemm_perf's GPU and torch gates: a result (required=false) to return instead, or None."""
    gate = ctx.gpu_gate("gemm_perf")
    if gate is None:
        gate = torch_skip(ctx, "gemm_perf")
    if gate is None and not ctx.torch.cuda.is_available():
        gate = skipped("gemm_perf", "torch.cuda.is_available() is False (see cuda_available)")
    if gate is not None:
        return CheckResult(**{**asdict(gate), "required": False})
    return None


def _device_status(entry: dict[str, Any], floor: float | None, floor_how: str) -> None:
    """A timed device's status: skip without a floor, fail below it, else pass (kept if set)."""
    if "status" in entry:
        return
    tflops = entry.get("tflops")
    if floor is None:
        entry.update({"status": SKIP, "reason": floor_how})
    elif tflops is not None and tflops < floor:
        entry["status"] = FAIL
    else:
        entry["status"] = PASS


def _time_device(
    ctx: Context,
    device: dict[str, Any],
    names: list[str],
    smi_path: str | None,
    fields: list[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One device timed, with nvidia-smi sampling it meanwhile: (its entry, its telemetry window)."""
    torch = ctx.torch
    i = device["index"]
    dtype_name = perf_dtype(device["name"], device["capability"])
    floor, floor_how = gemm_floor(device["name"], device["sm_count"])
    sampler: TelemetrySampler | None = None
    if fields and smi_path:
        sampler = TelemetrySampler(
            smi_path, fields, os.path.join(ctx.subdir("telemetry"), f"gpu{i}.csv"), TELEMETRY_INTERVAL_MS
        )

    def window(begin: bool, sampler: TelemetrySampler | None = sampler) -> None:
        if sampler is not None and begin:
            sampler.start()

    entry: dict[str, Any] = {
        "index": i,
        "device": device["name"],
        "capability": "{}.{}".format(*device["capability"]),
        "sm_count": device["sm_count"],
        "floor_tflops": floor,
        "floor": floor_how,
    }
    try:
        entry.update(time_gemm(torch, i, dtype_name, PERF_N, PERF_MIN_SECONDS, window))
    except Exception as exc:
        entry.update({"status": FAIL, "error": f"{type(exc).__name__}: {exc}"})
    window_summary: dict[str, Any] = {"cuda_index": i, "name": device["name"]}
    if sampler is not None:
        rows = sampler.stop()
        summary = summarise_telemetry(rows)
        smi_index, how = match_smi_gpu(device, names, summary, ctx.env)
        window_summary.update(
            {
                "window_s": sampler.seconds,
                "nvidia_smi_index": smi_index,
                "matched_by": how,
                "this_gpu": summary.get(smi_index) if smi_index is not None else None,
                "all_gpus": summary,
                "error": sampler.error,
            }
        )
        entry["telemetry"] = window_summary["this_gpu"]
    _device_status(entry, floor, floor_how)
    if tuple(device["capability"]) >= FP8_CAPABILITY and fp8_available(torch) and "error" not in entry:
        entry["fp8"] = _time_fp8(torch, device)
        if entry["fp8"]["status"] == FAIL:
            entry["status"] = FAIL
    return entry, window_summary


def _time_fp8(torch: Any, device: dict[str, Any]) -> dict[str, Any]:
    """The FP8 GEMM (torch._scaled_mm) timed on an sm_89+ device against its FP8 floor."""
    floor, how = gemm_floor(device["name"], device["sm_count"], fp8=True)
    part: dict[str, Any] = {"floor_tflops": floor, "floor": how}
    try:
        part.update(time_gemm(torch, device["index"], FP8, PERF_N, PERF_MIN_SECONDS))
    except Exception as exc:
        part.update({"status": FAIL, "error": f"{type(exc).__name__}: {exc}"})
        return part
    _device_status(part, floor, how)
    return part


def _slowest(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The figure the report shows: the device furthest below its floor (else the slowest measured)."""
    measured = [r for r in results if r.get("tflops") is not None]
    floored = [r for r in measured if r.get("floor_tflops")]
    if floored:
        return min(floored, key=lambda r: r["tflops"] / r["floor_tflops"])
    return min(measured, key=lambda r: r["tflops"]) if measured else None


def _fp8_failure_text(r: dict[str, Any]) -> str:
    fp8 = r.get("fp8") or {}
    if fp8.get("status") != FAIL:
        return ""
    if "error" in fp8:
        return f"; FP8: {fp8['error']}"
    return f"; FP8 {fp8['tflops']} TFLOP/s < floor {fp8['floor_tflops']}"


def _failure_text(r: dict[str, Any]) -> str:
    """Why one device failed: its error, or its figure against its floor with what throttled it."""
    if "error" in r:
        return f"GPU {r['index']}: {r['error']}"
    if r.get("floor_tflops") is None or r["tflops"] >= r["floor_tflops"]:
        return f"GPU {r['index']} ({r['device']}) {r['dtype']} {r['tflops']} TFLOP/s" + _fp8_failure_text(r)
    text = f"GPU {r['index']} ({r['device']}) {r['tflops']} TFLOP/s < floor {r['floor_tflops']}"
    text += _fp8_failure_text(r)
    tel = r.get("telemetry") or {}
    throttle = tel.get("throttle_reasons") or {}
    limiting = throttle.get("perf_limiting_samples") or 0
    clocks = (tel.get("metrics") or {}).get("clocks_sm_mhz")
    if limiting:
        limiting_names = [k for k in throttle.get("counts", {}) if k in PERF_LIMITING_REASONS]
        sampled = throttle.get("sampled")
        text += f": throttled in {limiting}/{sampled} samples ({', '.join(limiting_names)})"
    elif tel:
        text += ": no throttle reason active while timed"
    if clocks:
        text += f", SM clock {clocks['min']:.0f}-{clocks['max']:.0f} MHz"
    return text


def _perf_failure(
    failing: list[dict[str, Any]], floors: dict[str, str], actual: Any, detail: dict[str, Any]
) -> CheckResult:
    parts = [_failure_text(r) for r in failing]
    throttled = any(
        ((r.get("telemetry") or {}).get("throttle_reasons") or {}).get("perf_limiting_samples")
        for r in failing
    )
    return CheckResult(
        "gemm_perf",
        FAIL,
        required=False,
        expected=floors,
        actual=actual,
        detail=detail,
        cause=("device throttled: " if throttled else "Tensor Cores not in use or device slowed: ")
        + "; ".join(parts),
        fix="check clocks, power and temperature (the telemetry in the detail; nvidia-smi -q -d "
        "CLOCK,PERFORMANCE), other jobs on the GPU, and that cuBLAS uses bf16 Tensor Core kernels",
    )


def check_gemm_perf(ctx: Context) -> CheckResult:
    gate = _perf_gate(ctx)
    if gate is not None:
        return gate
    devices = cuda_devices(ctx.torch)
    smi_path = ctx.smi.get("path")
    fields, telemetry_error = telemetry_query_fields(smi_path) if smi_path else ([], "nvidia-smi not found")
    telemetry: dict[str, Any] = {
        "source": "nvidia-smi" if fields else None,
        "interval_ms": TELEMETRY_INTERVAL_MS,
        "fields": fields,
        "error": telemetry_error,
        "devices": [],
    }
    results: list[dict[str, Any]] = []
    names = [d["name"] for d in devices]
    saved_tf32 = ctx.torch.backends.cuda.matmul.allow_tf32
    try:
        ctx.torch.backends.cuda.matmul.allow_tf32 = False  # explicit: bf16/fp16/fp8 timed, never TF32
        for device in devices:
            entry, window_summary = _time_device(ctx, device, names, smi_path, fields)
            telemetry["devices"].append(window_summary)
            results.append(entry)
    finally:
        ctx.torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    ctx.telemetry = telemetry
    slowest = _slowest(results)
    detail: dict[str, Any] = {
        "device": slowest["device"] if slowest else None,
        "floor_tflops": slowest["floor_tflops"] if slowest else None,
        "dtype": slowest["dtype"] if slowest else None,
        "shape": [PERF_N, PERF_N, PERF_N],
        "timing": f"CUDA events, >= {PERF_MIN_SECONDS} s per device after 3 warm-up GEMMs",
        "tf32": False,
        "fp8": "torch._scaled_mm (E4M3, bf16 out) on sm_89+, against the device's FP8 floor",
        "devices": results,
    }
    actual = slowest["tflops"] if slowest else None
    failing = [r for r in results if r["status"] == FAIL]
    floors = {str(r["index"]): f">= {r['floor_tflops']}" for r in results if r.get("floor_tflops")}
    if failing:
        return _perf_failure(failing, floors, actual, detail)
    if not any(r["status"] == PASS for r in results):
        reasons = "; ".join(f"GPU {r['index']}: {r.get('reason')}" for r in results) or "no device"
        return CheckResult("gemm_perf", SKIP, required=False, reason=reasons, actual=actual, detail=detail)
    return CheckResult("gemm_perf", PASS, required=False, expected=floors, actual=actual, detail=detail)
