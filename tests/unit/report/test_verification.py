"""The verification record's figures: what a check reported (the timed GEMM, per GPU telemetry) as
typed report records."""

from __future__ import annotations

import json

from imagekit.core.limits import SHORT_CHARS
from imagekit.report.html import _gpus
from imagekit.report.text import throttle_note
from imagekit.report.verification import CheckRecord, GpuFigures, Span, Verification, gemm_figures
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import verdict_of


def test_gemm_figure_reaches_the_metrics() -> None:
    document = {
        "gpu_visible": True,
        "checks": [
            {"name": "cuda_available", "status": "pass", "required": True},
            {"name": "gemm_gpu", "status": "pass", "required": True},
            {"name": "gemm_perf", "status": "pass", "required": False, "actual": 701.3,
             "detail": {"device": "NVIDIA H200", "floor_tflops": 400}},
        ],
    }  # fmt: skip
    verdict, checks, _ = verdict_of(document, GpuRequest.parse("all"))
    assert verdict == "validated"
    assert gemm_figures(checks) == ({
        "gemm_perf.tflops": 701.3, "gemm_perf.device": "NVIDIA H200", "gemm_perf.floor_tflops": 400
    }, ())  # fmt: skip


def test_each_gpus_figure_and_telemetry_reach_the_metrics_and_the_report() -> None:
    """A low TFLOP/s figure next to the GPU's clock, power and throttle samples (the check's shape)."""
    telemetry = {
        "samples": 12,
        "metrics": {
            "clocks_sm_mhz": {"min": 1100, "max": 1980, "mean": 1320.5, "n": 12},
            "power_draw_w": {"min": 310.0, "max": 700.2, "mean": 690.1, "n": 12},
            "temperature_gpu_c": {"min": 41, "max": 83, "mean": 79, "n": 12},
        },
        "throttle_reasons": {
            "sampled": 12,
            "counts": {"sw_power_cap": 9, "hw_slowdown": 0},
            "perf_limiting_samples": 9,
        },
    }
    detail = {
        "device": "NVIDIA H200",
        "floor_tflops": 400,
        "devices": [
            {"index": 0, "device": "NVIDIA H200", "tflops": 702.0, "floor_tflops": 400, "status": "pass"},
            {"index": 1, "device": "NVIDIA H200", "tflops": 288.4, "floor_tflops": 400, "status": "fail",
             "telemetry": telemetry},
        ],
    }  # fmt: skip
    document = {
        "gpu_visible": True,
        "checks": [
            {"name": "cuda_available", "status": "pass", "required": True},
            {"name": "gemm_gpu", "status": "pass", "required": True},
            {"name": "gemm_perf", "status": "fail", "required": False, "actual": 288.4, "detail": detail},
        ],
    }
    verdict, checks, _ = verdict_of(document, GpuRequest.parse("all"))

    _, gpus = gemm_figures(checks)
    assert verdict == "validated"  # performance never fails an image
    first, second = gpus
    assert (first.tflops, first.throttle, first.sm_clock_mhz) == (702.0, {}, None)
    assert second.sm_clock_mhz == Span(1100.0, 1980.0, 1320.5)
    assert second.throttle == {"sw_power_cap": 9} and second.throttled_samples == 9
    assert throttle_note(gpus) == "throttled: sw_power_cap"
    assert throttle_note([first]) == ""
    page = _gpus(gpus)
    assert "288.4 (floor 400)" in page and "1100-1980 MHz (mean 1320)" in page and "sw_power_cap (9)" in page


def test_an_images_odd_figures_become_what_a_report_holds() -> None:
    checks = (
        CheckRecord(
            "gemm_perf", "pass", False, actual="inf", detail='{"device": {"x": [1]}, "floor_tflops": "NaN"}'
        ),
    )
    assert gemm_figures(checks) == ({"gemm_perf.device": None, "gemm_perf.floor_tflops": "NaN"}, ())
    huge = (
        CheckRecord("gemm_perf", "pass", False, actual="1", detail='{"floor_tflops": 1' + "0" * 400 + "}"),
    )
    assert gemm_figures(huge)[0]["gemm_perf.floor_tflops"] is None  # past a float: no OverflowError
    deep = (CheckRecord("gemm_perf", "pass", False, actual="612.5", detail="[" * 50_000),)
    assert gemm_figures(deep) == ({}, ())  # no RecursionError from what an image printed
    odd = {"index": -1, "device": ["x"], "tflops": 1e300, "status": "s" * 10_000,
           "telemetry": {"metrics": {"power_draw_w": {"min": "hot", "max": 2, "mean": 1e308}},
                         "throttle_reasons": {"counts": {"a" * 5_000: 3, "b": True, "c": -2}}}}  # fmt: skip
    detail = json.dumps({"devices": [odd] * 100})
    _, gpus = gemm_figures((CheckRecord("gemm_perf", "pass", False, actual="1", detail=detail),))
    assert len(gpus) == 64 and gpus[0] == GpuFigures(
        index=None, device=None, tflops=None, status="s" * SHORT_CHARS,
        power_w=Span(None, 2.0, None), throttle={"a" * SHORT_CHARS: 3},
    )  # fmt: skip
    many = {"checks": [{"name": f"c{i}", "status": "pass"} for i in range(5_000)], "gpu_visible": False}
    assert len(verdict_of(many, GpuRequest.parse("none"))[1]) == 1_000


def test_verification_round_trips_through_json() -> None:
    result = Verification(
        "cell", "img", "all", "validated", True, True, (CheckRecord("torch", "pass", True),), 2.0,
        metrics={"gemm_perf.tflops": 712.5},
        gpu_figures=(GpuFigures(0, "H200", 712.5, power_w=Span(80.0, 699.1, 512.0), throttle={"a": 1}),),
    )  # fmt: skip
    assert Verification.from_json(result.as_json()) == result
    assert result.label == "validated"
