"""Sample reports for the tests of the store and its views: every build status, verified GEMM
figures and hostile text."""

from __future__ import annotations

from typing import Any

from imagekit.facts.advisories import AdvisoryFinding
from imagekit.probe import protocol
from imagekit.report.lockfile import ChecksSummary, DigestChain, LockEntry, Provenance, VerifiedBy
from imagekit.report.store import BuildReport, CellResult, Staged
from imagekit.report.verification import CheckRecord, Verification

# A finding the matrix waived, as a plan records it on a cell (imagekit.plan.advisories).
WAIVED = AdvisoryFinding(
    "CVE-2025-32434",
    "torch",
    "2.1.2",
    "2.6.0",
    "critical",
    "torch.load(weights_only=True) runs code",
    "seed row: loads only trusted checkpoints",
)
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
        gpu_requested=verdict != "checked",  # each record as its own checks derive it
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
                        CheckRecord("cuda_available", "pass", True),
                        CheckRecord("gemm_gpu", "pass", True),
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


SHA_IMAGE = "sha256:" + "0123456789abcdef" * 4
SHA_BASE = "sha256:" + "fedcba9876543210" * 4


def build_result(name: str, status: str, **values: Any) -> CellResult:
    """A bare record: only what ``values`` sets beyond the id and status."""
    return CellResult(
        **{"id": name, "kind": "cell", "status": status, "base_image": "nvidia/cuda:12.1", **values}
    )


def build_report() -> BuildReport:
    """One record per build status and a local base, as a build run writes them."""
    base = build_result(
        "base-inner",
        "built",
        kind="base",
        image_id=SHA_BASE,
        tags=("example/inner:dev",),
        size=5_000_000,
        base_image="busybox:latest",
        duration_s=1.26,
    )
    built = build_result(
        "cuda-built",
        "built",
        image_id=SHA_IMAGE,
        tags=("reg/it:cuda-2.1", "reg/it:cuda-2.1-20240517"),
        size=1_500_000_000,
        input_digest="d" * 64,
        base_digest="nvidia/cuda@sha256:" + "9" * 64,
        duration_s=83.42,
        log=".imagekit/logs/cuda-built.log",
        staged=Staged("reg", "it-staging", "staging-dddddddddddd", "sha256:" + "5" * 64),
        advisories=(WAIVED,),
    )
    skipped = build_result(
        "cuda-skipped",
        "skipped",
        image_id=SHA_IMAGE,
        tags=("reg/it:cuda-2.2",),
        size=123_456_789,
        base_digest=SHA_BASE,
    )
    failed = build_result(
        "cuda-failed",
        "failed",
        duration_s=4.0,
        error="The command '/bin/sh -c exit 3' returned a non-zero code: 3 | see log",
        error_tail=("Step 3/4 : RUN exit 3", "boom: this step fails on purpose"),
    )
    cancelled = build_result(
        "cuda-cancelled",
        "cancelled",
        error="cancelled by --fail-fast after cuda-failed failed",
        error_tail=("Step 2/4 : RUN sleep 60",),  # only failures get a details block
    )
    return BuildReport(
        matrix="matrix.yaml",
        started="2024-05-17T10:00:00+00:00",
        duration_s=92.345,
        engine="unix:///var/run/docker.sock",
        cells=(built, skipped, failed, cancelled),
        bases=(base,),
    )


LOCK_DIGEST = "sha256:" + "ab" * 32


def lock_entry(
    cell: str = "torch2.1.2-cu121",
    digest: str = LOCK_DIGEST,
    verified: bool = True,
    frontend: str | None = None,
) -> LockEntry:
    verification = VerifiedBy(
        "validated", "all", True, True, "2026-11-29T12:00:00Z", 42.0, ChecksSummary(12, 0, 1, (), {"x": 1.0})
    )
    return LockEntry(
        cell=cell,
        registry="ghcr.io",
        repository="ghcr.io/acme/pytorch",
        digest=digest,
        tags=("2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04", "2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04-20261129"),
        image_id="sha256:" + "cd" * 32,
        input_digest="e" * 64,
        policy="gpu-validated",
        level="validated",
        published_at="2026-11-29T12:01:00Z",
        verification=verification if verified else None,
        expect={"torch": "2.1.2", "cuda": "12.1", "cudnn": "8", "python": "3.10", "flavour": "devel"},
        check_script="/opt/imagekit/check.py",
        frontend=frontend,
        provenance=Provenance(
            ("NVIDIA H200",), "560.35.03", "12.6", 12, 13, None, DigestChain(digest, digest, digest)
        )
        if verified
        else None,
        advisories=(WAIVED,),
    )


# A cell whose probe read the CUDA archs its wheel serves, for every view of the report: the arch list
# the probe read in the image (the cuda_archs check), else the image's cuda-archs label it was given.
ARCHS_READ = '["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]'  # the record holds JSON text
ARCHS_LABEL = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
ARCHS_CELL = "cuda-ubuntu24.04-torch2.11.0-cuda13.0-py3.12-runtime"


def archs_checked(*records: CheckRecord) -> Verification:
    return verification(ARCHS_CELL, "checked", (CheckRecord("torch", "pass", True), *records))


def archs_record(
    status: str, expected: str | None = ARCHS_LABEL, actual: str | None = ARCHS_READ
) -> CheckRecord:
    return CheckRecord(protocol.CUDA_ARCHS, status, False, expected=expected, actual=actual)


def archs_report() -> BuildReport:
    """A verified cell whose wheel lacks the PTX its label promises, beside one never verified."""
    cells = (result(ARCHS_CELL, verification=archs_checked(archs_record("fail"))), result("cuda-unverified"))
    started = "2026-12-01T00:00:00Z"
    return BuildReport(
        matrix="matrix.yaml", started=started, duration_s=1.0, engine="docker", cells=cells, bases=()
    )
