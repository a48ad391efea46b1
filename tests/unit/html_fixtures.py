"""A build report with every status, a verified GEMM figure and hostile text, for the HTML tests."""

from __future__ import annotations

from imagekit.report import BuildReport, CellResult
from imagekit.verify import CheckRecord, Verification

HOSTILE = '<script>alert("x")</script> & <img src=http://evil.example/x.png>'


def result(
    cell_id: str, status: str = "built", verification: Verification | None = None, **extra: object
) -> CellResult:
    values: dict[str, object] = {
        "id": cell_id,
        "kind": "cell",
        "status": status,
        "image_id": "sha256:" + "1" * 64,
        "tags": (f"ghcr.io/acme/pytorch:{cell_id}",),
        "size": 8_123_000_000,
        "input_digest": "0" * 64,
        "base_image": "nvidia/cuda:12.1.1-devel-ubuntu22.04",
        "base_digest": None,
        "duration_s": 321.5,
        "log": None,
        "error": None,
        "verification": verification,
    }
    values.update(extra)
    return CellResult(**values)  # type: ignore[arg-type]


def verification(cell_id: str, verdict: str, checks: tuple[CheckRecord, ...]) -> Verification:
    return Verification(
        target=cell_id,
        image="sha256:" + "1" * 64,
        gpus="all",
        verdict=verdict,  # type: ignore[arg-type]
        gpu_requested=True,
        gpu_visible=verdict == "validated",
        checks=checks,
        duration_s=42.0,
        metrics={
            "gemm_perf.tflops": 612.3,
            "gemm_perf.device": "NVIDIA H200",
            "gemm_perf.floor_tflops": 400.0,
        }
        if verdict == "validated"
        else {},
    )


def sample_report() -> BuildReport:
    validated = "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-devel"
    failed = "cuda-ubuntu22.04-torch2.1.2-cuda11.8-py3.10-devel"
    return BuildReport(
        matrix="matrix.yaml",
        started="2026-11-29T02:17:00+00:00",
        duration_s=1234.0,
        engine="Docker 24.0 (linux/amd64)",
        cells=(
            result(
                validated,
                verification=verification(
                    validated,
                    "validated",
                    (
                        CheckRecord("torch", "pass", True, expected="2.5.1", actual="2.5.1+cu121"),
                        CheckRecord("gemm_perf", "pass", False, expected=">= 400.0", actual="612.3"),
                    ),
                ),
            ),
            result(
                failed,
                verification=verification(
                    failed,
                    "failed",
                    (CheckRecord("cuda_available", "fail", True, cause=HOSTILE, fix="upgrade the driver"),),
                ),
            ),
            result(
                "cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime",
                "failed",
                error=HOSTILE,
                error_tail=("step 3/9", HOSTILE),
            ),
            result("ngc-23.10-torch2.1.0a0-32f93b1-cuda12.2-py3.10-devel", "skipped"),
            result("deb-torch2.5.1-cpu-py3.11-runtime", "cancelled"),
        ),
        bases=(),
    )
