"""What a lock entry says about how its image was verified: the checks' summary, and the
provenance (GPU names, driver and CUDA driver versions, as the check script's nvidia_smi and
driver checks read them; the digest chain staged -> verified -> promoted).

Read from the verification record alone; a check's odd output names nothing rather than failing.
"""

from __future__ import annotations

from imagekit.probe.protocol import DRIVER, NVIDIA_SMI, PASS
from imagekit.report.lockfile import ChecksSummary, DigestChain, Provenance, VerifiedBy
from imagekit.report.verification import CheckRecord, Verification, json_or_text

NO_GPU_NOTE = "verified without a visible GPU: GPU names, driver and CUDA driver version are unknown"
UNVERIFIED_NOTE = "never verified: no GPU, driver or check to name"


def verified_by(verification: Verification | None) -> VerifiedBy | None:
    if verification is None:
        return None
    failed = verification.failed_checks()
    return VerifiedBy(
        verdict=verification.verdict,
        gpus=verification.gpus,
        gpu_requested=verification.gpu_requested,
        gpu_visible=verification.gpu_visible,
        verified_at=verification.finished_at,
        duration_s=verification.duration_s,
        checks=ChecksSummary(
            passed=verification.count("pass"),
            failed=len(failed),  # any status but pass and skip, as the verdict counts it
            skipped=verification.count("skip"),
            failed_names=tuple(c.name for c in failed),
            metrics=dict(verification.metrics),
        ),
    )


def provenance(verification: Verification | None, staged: str | None, promoted: str) -> Provenance:
    """Where the image was verified (from the check script's nvidia_smi and driver checks) and
    the digest chain staged -> verified -> promoted."""
    chain = DigestChain(
        staged=staged,
        verified=verification.image_digest if verification else None,
        promoted=promoted,
    )
    if verification is None:
        return Provenance((), None, None, 0, 0, UNVERIFIED_NOTE, chain)
    by_name = {c.name: c for c in verification.checks}
    gpus, driver, cuda_driver = _from_nvidia_smi(by_name.get(NVIDIA_SMI))
    driver, cuda_driver = _from_driver_check(by_name.get(DRIVER), driver, cuda_driver)
    note = None if verification.gpu_visible else NO_GPU_NOTE
    passed = verification.count("pass")
    return Provenance(tuple(gpus), driver, cuda_driver, passed, len(verification.checks), note, chain)


def _from_nvidia_smi(smi: CheckRecord | None) -> tuple[list[str], str | None, str | None]:
    """The GPU names, driver and CUDA driver version a passed nvidia_smi check read."""
    gpus: list[str] = []
    driver: str | None = None
    cuda_driver: str | None = None
    if smi is None or smi.status != PASS:
        return gpus, driver, cuda_driver
    actual = json_or_text(smi.actual)
    if isinstance(actual, dict):
        gpus = [str(g["name"]) for g in actual.get("gpus") or () if isinstance(g, dict) and g.get("name")]
        driver = str(actual["driver"]) if actual.get("driver") else None
    detail = json_or_text(smi.detail)
    header = detail.get("header") if isinstance(detail, dict) else None
    if isinstance(header, dict) and header.get("cuda"):
        cuda_driver = str(header["cuda"])
    return gpus, driver, cuda_driver


def _from_driver_check(
    check: CheckRecord | None, driver: str | None, cuda_driver: str | None
) -> tuple[str | None, str | None]:
    """The driver (where nvidia_smi named none) and the host's CUDA driver version (over
    nvidia_smi's) a passed driver check read."""
    if check is None or check.status != PASS:
        return driver, cuda_driver
    driver = driver or (check.actual if check.actual and not check.actual.startswith("{") else None)
    detail = json_or_text(check.detail)
    if isinstance(detail, dict) and detail.get("host_cuda"):
        cuda_driver = str(detail["host_cuda"])
    return driver, cuda_driver
