"""GPU telemetry of the in-image check (imagekit/probe/telemetry.py): nvidia-smi CSV samples parsed
and summarised (real captured outputs, tests/fixtures/check/NOTES.md), throttle reasons decoded,
and the background sampler."""

from __future__ import annotations

import time
from pathlib import Path

from imagekit.probe import telemetry
from imagekit.probe.smi import parse_nvidia_smi_csv
from tests.unit.probe_runs import FIELDS_440, fixture

LOOP_FIELDS = [
    "index",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "fan.speed",
    "pstate",
    "power.draw",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.current.graphics",
]


LOOPING_SMI = """#!/bin/sh
# answers the telemetry query once, or every 200 ms with -lms (the field list must match)
case "$*" in
  *clocks_throttle_reasons*)
     case "$*" in
       *-lms*) while :; do
                 echo "0, GPU-aaaa, 100, 1000, 300.5, 66, 1755, 0x0000000000000004"; sleep 0.1
               done ;;
       *) echo "0, GPU-aaaa, 0, 0, 50.0, 40, 345, 0x0000000000000001" ;;
     esac ;;
esac
"""


OLD_SMI = """#!/bin/sh
case "$*" in
  *clocks_throttle_reasons*|*clocks_event_reasons*) echo 'Field "x" is not a valid field to query.'; exit 2 ;;
  *) echo "0, GPU-aaaa, 0, 0, 50.0, 40, 345" ;;
esac
"""


def _script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def test_looped_csv_with_units_summarised_per_gpu() -> None:
    """13 samples of `nvidia-smi --query-gpu=... --format=csv -l` (header and units) on one GPU."""
    rows = parse_nvidia_smi_csv(fixture("nvidia-smi-loop-csv-units-520.txt"), LOOP_FIELDS)
    assert len(rows) == 13  # the header line is skipped
    summary = telemetry.summarise_telemetry(rows)
    assert list(summary) == ["0"]
    gpu = summary["0"]
    assert gpu["samples"] == 13
    metrics = gpu["metrics"]
    assert metrics["utilization_gpu_pct"] == {"min": 23.0, "max": 32.0, "mean": 27.0, "n": 13}
    assert metrics["power_draw_w"]["min"] == 76.64 and metrics["power_draw_w"]["max"] == 84.77
    assert metrics["clocks_sm_mhz"]["min"] == 1185.0 and metrics["clocks_sm_mhz"]["max"] == 1470.0
    assert metrics["temperature_gpu_c"] == {"min": 55.0, "max": 56.0, "mean": 55.15, "n": 13}
    assert "memory_used_mib" not in metrics  # not queried there
    assert gpu["throttle_reasons"] == {"sampled": 0, "counts": {}, "perf_limiting_samples": 0}


def test_noheader_nounits_row_and_not_available_values() -> None:
    text = fixture("nvidia-smi-csv-noheader-nounits-440.txt")
    (row,) = parse_nvidia_smi_csv(text, list(FIELDS_440))
    assert telemetry.telemetry_number(row["power.draw"]) == 176.98
    assert telemetry.telemetry_number(row["temperature.memory"]) is None  # "N/A"
    assert telemetry.telemetry_number("[Not Supported]") is None
    assert telemetry.telemetry_number("[N/A]") is None
    summary = telemetry.summarise_telemetry([{**row, "index": "0"}])
    assert summary["0"]["metrics"]["clocks_sm_mhz"]["max"] == 1965.0
    assert summary["0"]["metrics"]["utilization_gpu_pct"]["mean"] == 86.0


def test_throttle_reason_bitmask_decoded() -> None:
    text = fixture("nvidia-smi-throttle-supported-1ff.txt")
    (row,) = parse_nvidia_smi_csv(text, ["clocks_throttle_reasons.supported"])
    names = telemetry.decode_throttle_reasons(row["clocks_throttle_reasons.supported"])
    assert names == [name for _, name in telemetry.THROTTLE_REASONS]  # 0x1FF: all nine
    assert telemetry.decode_throttle_reasons("0x0000000000000000") == []
    assert telemetry.decode_throttle_reasons("0x0000000000000004") == ["sw_power_cap"]
    assert telemetry.decode_throttle_reasons("0x0000000000001004") == ["sw_power_cap", "0x1000"]
    assert telemetry.decode_throttle_reasons("[N/A]") is None


def test_summary_counts_perf_limiting_samples() -> None:
    rows = [
        {"index": "0", "clocks_throttle_reasons.active": "0x0000000000000000", "clocks.sm": "1980"},
        {"index": "0", "clocks_throttle_reasons.active": "0x0000000000000004", "clocks.sm": "1755"},
        {"index": "0", "clocks_event_reasons.active": "0x0000000000000044", "clocks.sm": "1410"},
        {"index": "0", "clocks_throttle_reasons.active": "0x0000000000000001", "clocks.sm": "345"},
        {"index": "1", "clocks_throttle_reasons.active": "0x0000000000000000", "clocks.sm": "1980"},
    ]
    summary = telemetry.summarise_telemetry(rows)
    gpu0 = summary["0"]["throttle_reasons"]
    assert gpu0 == {
        "sampled": 4,
        "counts": {"gpu_idle": 1, "hw_thermal_slowdown": 1, "sw_power_cap": 2},
        "perf_limiting_samples": 2,  # idle does not count
    }
    assert summary["1"]["throttle_reasons"]["perf_limiting_samples"] == 0


def test_cuda_devices_matched_to_nvidia_smi_rows() -> None:
    summary = {
        "0": {"uuid": "GPU-880b8a57-8586-fe40-bec5-fb703f80ffe6"},
        "1": {"uuid": "GPU-588b70bd-7af1-b8d2-f0a9-d8af8d063f30"},
    }
    by_uuid = {"index": 0, "uuid": "588b70bd-7af1-b8d2-f0a9-d8af8d063f30", "name": "NVIDIA RTX A6000"}
    assert telemetry.match_smi_gpu(by_uuid, ["NVIDIA RTX A6000"] * 2, summary, {}) == ("1", "uuid")
    plain = {"index": 1, "uuid": None, "name": "NVIDIA RTX A6000"}
    assert telemetry.match_smi_gpu(plain, ["NVIDIA RTX A6000"] * 2, summary, {}) == ("1", "index")
    # CUDA_VISIBLE_DEVICES may reorder, mixed models are ordered fastest first: no guess
    reordered = {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert telemetry.match_smi_gpu(plain, ["NVIDIA RTX A6000"] * 2, summary, reordered) == (None, None)
    assert telemetry.match_smi_gpu(plain, ["NVIDIA RTX A6000", "NVIDIA H100 80GB HBM3"], summary, {}) == (
        None,
        None,
    )


def test_sampler_runs_in_the_background_and_stops(tmp_path: Path) -> None:
    smi = _script(tmp_path, "nvidia-smi", LOOPING_SMI)
    fields, error = telemetry.telemetry_query_fields(smi)
    assert error is None and fields[-1] == "clocks_throttle_reasons.active"
    sampler = telemetry.TelemetrySampler(smi, fields, str(tmp_path / "samples.csv"), 100)
    sampler.start()
    time.sleep(0.8)
    rows = sampler.stop()
    assert sampler.proc is not None and sampler.proc.poll() is not None  # ended, reaped
    assert len(rows) >= 3
    summary = telemetry.summarise_telemetry(rows)["0"]
    assert summary["metrics"]["power_draw_w"]["max"] == 300.5
    assert summary["throttle_reasons"]["counts"] == {"sw_power_cap": summary["samples"]}
    assert sampler.seconds >= 0.8


def test_sampler_drops_a_throttle_field_old_drivers_reject(tmp_path: Path) -> None:
    smi = _script(tmp_path, "nvidia-smi", OLD_SMI)
    fields, error = telemetry.telemetry_query_fields(smi)
    assert error is None
    assert fields == list(telemetry.TELEMETRY_BASE_FIELDS)


def test_sampler_reports_no_samples(tmp_path: Path) -> None:
    smi = _script(tmp_path, "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
    fields, error = telemetry.telemetry_query_fields(smi)
    assert fields == [] and error is not None and "exited 9" in error
    fields = list(telemetry.TELEMETRY_BASE_FIELDS)
    sampler = telemetry.TelemetrySampler(smi, fields, str(tmp_path / "s.csv"), 100)
    sampler.start()
    rows = sampler.stop()
    assert rows == []
    assert sampler.error is not None and "no samples" in sampler.error
    assert (tmp_path / "s.csv").exists()
