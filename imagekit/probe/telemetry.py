"""Per-GPU telemetry sampled by nvidia-smi while gemm_perf runs: clocks, power, temperature and
throttle reasons, summarised per metric."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from typing import Any

from .proc import read_text, run_command
from .smi import parse_nvidia_smi_csv

TELEMETRY_INTERVAL_MS = 200


# NVML clock event (throttle) reason bits, nvml.h nvmlClocksEventReason* / nvmlClocksThrottleReason*.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# The reasons that cost speed under load (idle, application clocks and display settings do not).
PERF_LIMITING_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


TELEMETRY_BASE_FIELDS = (
    "index",
    "uuid",
    "utilization.gpu",
    "memory.used",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
)
THROTTLE_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")
TELEMETRY_METRICS = {
    "utilization.gpu": "utilization_gpu_pct",
    "memory.used": "memory_used_mib",
    "power.draw": "power_draw_w",
    "temperature.gpu": "temperature_gpu_c",
    "clocks.sm": "clocks_sm_mhz",
    "clocks.current.sm": "clocks_sm_mhz",
}


def telemetry_number(text: str | None) -> float | None:
    """'176.98' / '176.98 W' / '86 %' -> float; '[N/A]', 'N/A', '[Not Supported]' -> None."""
    if text is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def decode_throttle_reasons(text: str | None) -> list[str] | None:
    """'0x0000000000000004' -> ['sw_power_cap']; None when not a bitmask ('[N/A]')."""
    if text is None:
        return None
    match = re.match(r"^\s*0x([0-9A-Fa-f]+)\s*$", text)
    if match is None:
        return None
    mask = int(match.group(1), 16)
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def _stats(values: list[float]) -> dict[str, float | int]:
    return {
        "min": min(values),
        "max": max(values),
        "mean": round(sum(values) / len(values), 2),
        "n": len(values),
    }


def summarise_telemetry(rows: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=...` samples -> per GPU (nvidia-smi index): sample count,
    min/max/mean of each metric, and how many samples had each clock throttle reason."""
    per_gpu: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row.get("index") or "?"
        entry = per_gpu.setdefault(key, {"samples": 0, "uuid": row.get("uuid"), "_v": {}, "_t": []})
        entry["samples"] += 1
        for field, metric in TELEMETRY_METRICS.items():
            value = telemetry_number(row.get(field))
            if value is not None:
                entry["_v"].setdefault(metric, []).append(value)
        for field in THROTTLE_FIELDS:
            reasons = decode_throttle_reasons(row.get(field))
            if reasons is not None:
                entry["_t"].append(reasons)
    summary: dict[str, dict[str, Any]] = {}
    for key, entry in per_gpu.items():
        counts: dict[str, int] = {}
        for reasons in entry["_t"]:
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        limiting = sum(1 for reasons in entry["_t"] if PERF_LIMITING_REASONS.intersection(reasons))
        summary[key] = {
            "samples": entry["samples"],
            "uuid": entry["uuid"],
            "metrics": {metric: _stats(values) for metric, values in sorted(entry["_v"].items())},
            "throttle_reasons": {
                "sampled": len(entry["_t"]),
                "counts": dict(sorted(counts.items())),
                "perf_limiting_samples": limiting,
            },
        }
    return summary


def telemetry_query_fields(smi_path: str) -> tuple[list[str], str | None]:
    """The fields this nvidia-smi answers: the throttle field was renamed clocks_event_reasons in
    newer drivers, and an unknown field fails the whole query, so probe once."""
    error = None
    for throttle in (*THROTTLE_FIELDS, None):
        fields = [*TELEMETRY_BASE_FIELDS, *([throttle] if throttle else [])]
        rc, out = run_command(
            [smi_path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"], timeout=15
        )
        if rc == 0 and "not a valid field" not in out.lower() and parse_nvidia_smi_csv(out, fields):
            return fields, None
        error = f"nvidia-smi --query-gpu exited {rc}: {out.strip()[:200]}"
    return [], error


class TelemetrySampler:
    """`nvidia-smi --query-gpu=... -lms N` in the background, its output in a file under the run's
    work directory; stop() ends it and returns the parsed rows."""

    def __init__(self, smi_path: str, fields: list[str], out_path: str, interval_ms: int) -> None:
        self.smi_path = smi_path
        self.fields = fields
        self.out_path = out_path
        self.interval_ms = interval_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        command = [
            self.smi_path,
            "--query-gpu=" + ",".join(self.fields),
            "--format=csv,noheader,nounits",
            "-lms",
            str(self.interval_ms),
        ]
        try:
            with open(self.out_path, "wb") as out:
                self.proc = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
        except OSError as exc:
            self.error = f"could not start nvidia-smi: {exc}"
        self.started = time.monotonic()

    def stop(self) -> list[dict[str, str]]:
        self.seconds = round(time.monotonic() - self.started, 3)
        proc = self.proc
        if proc is not None:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is not None:
                    break
                with contextlib.suppress(OSError):
                    proc.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=3)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = read_text(self.out_path) or ""
        rows = parse_nvidia_smi_csv(text, self.fields)
        if not rows and self.error is None:
            self.error = "nvidia-smi gave no samples: " + text.strip()[:200]
        return rows


def _uuid_key(value: str | None) -> str | None:
    if not value:
        return None
    text = value.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text or None


def match_smi_gpu(
    device: dict[str, Any], device_names: list[str], summary: dict[str, dict[str, Any]], env: dict[str, str]
) -> tuple[str | None, str | None]:
    """(nvidia-smi index, how) of a CUDA device: by UUID when torch gives one; else by position when
    the order cannot differ (no CUDA_VISIBLE_DEVICES, as many GPUs as nvidia-smi lists, all one
    model, so CUDA's fastest-first order is the PCI order); else (None, None)."""
    want = _uuid_key(device.get("uuid"))
    if want:
        for key, entry in summary.items():
            if _uuid_key(entry.get("uuid")) == want:
                return key, "uuid"
    if (
        not env.get("CUDA_VISIBLE_DEVICES")
        and len(summary) == len(device_names)
        and len(set(device_names)) == 1
        and str(device["index"]) in summary
    ):
        return str(device["index"]), "index"
    return None, None
