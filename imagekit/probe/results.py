"""A check's result record (``protocol.RESULT_FIELDS``), its constructors, and running one check."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .protocol import FAIL, NOT_REQUIRED, PASS, SKIP

GPU_MISSING_CAUSE = "--gpus missing or no NVIDIA runtime: a GPU was requested but none is visible"
GPU_MISSING_FIX = (
    "run with `docker run --gpus all` (Kubernetes: request nvidia.com/gpu and use the nvidia "
    "runtimeClass); on the host install the NVIDIA driver and nvidia-container-toolkit and run "
    "`nvidia-ctk runtime configure --runtime=docker` then restart Docker"
)
WSL_HINT = (
    " WSL2 detected (/dev/dxg): the GPU comes from the Windows NVIDIA driver; do not install a Linux "
    "driver inside WSL, and make sure /usr/lib/wsl/lib (libcuda, nvidia-smi) is visible."
)
NO_GPU_REQUESTED = "no GPU requested"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # pass | fail | skip
    required: bool = True
    reason: str | None = None
    expected: Any = None
    actual: Any = None
    detail: Any = None
    cause: str | None = None
    fix: str | None = None
    duration_s: float = 0.0


def passed(name: str, expected: Any = None, actual: Any = None, detail: Any = None) -> CheckResult:
    return CheckResult(name, PASS, expected=expected, actual=actual, detail=detail)


def failed(
    name: str,
    cause: str,
    fix: str,
    expected: Any = None,
    actual: Any = None,
    detail: Any = None,
) -> CheckResult:
    return CheckResult(name, FAIL, expected=expected, actual=actual, detail=detail, cause=cause, fix=fix)


def skipped(
    name: str, reason: str, expected: Any = None, actual: Any = None, detail: Any = None
) -> CheckResult:
    return CheckResult(name, SKIP, reason=reason, expected=expected, actual=actual, detail=detail)


def run_check(name: str, fn: Callable[[Any], CheckResult], ctx: Any) -> CheckResult:
    """One check, timed; an exception inside it is that check's failure (frontend_check.py too)."""
    started = time.monotonic()
    try:
        result = fn(ctx)
    except Exception as exc:
        result = failed(
            name,
            f"the check raised {type(exc).__name__}: {exc}",
            "see detail for the traceback",
            detail=traceback.format_exc(limit=6),
        )
        if name in NOT_REQUIRED:
            result = CheckResult(**{**asdict(result), "required": False})
    return CheckResult(**{**asdict(result), "duration_s": round(time.monotonic() - started, 3)})


def summarize(checks: list[CheckResult]) -> dict[str, Any]:
    """The report's summary: counts per status, the required checks that failed, and the verdict."""
    required_failed = [c.name for c in checks if c.status == FAIL and c.required]
    return {
        PASS: sum(c.status == PASS for c in checks),
        FAIL: sum(c.status == FAIL for c in checks),
        SKIP: sum(c.status == SKIP for c in checks),
        "required_failed": required_failed,
        "ok": not required_failed,
    }
