"""arch: the GPU architectures torch was built for against each device; cuda_available."""

from __future__ import annotations

import re
from typing import Any

from .context import Context, needs_gpu_and_torch
from .libraries import wheel_fix
from .results import GPU_MISSING_FIX, WSL_HINT, CheckResult, failed, passed, skipped


def arch_supported(arch_list: list[str], capability: tuple[int, int]) -> tuple[bool, str]:
    """Can a build with this arch list run on a device of this compute capability?

    SASS sm_XY runs on devices of the same major and minor >= Y (sm_XYa only on XY exactly,
    sm_XYf on the same major); PTX compute_XY is JIT-compiled for any device >= XY."""
    major, minor = capability
    device = major * 10 + minor
    for arch in arch_list:
        match = re.match(r"^sm_(\d+?)(\d)([af]?)$", arch)
        if match is None:
            continue
        a_major, a_minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
        if suffix == "a" and (a_major, a_minor) != (major, minor):
            continue
        if a_major == major and a_minor <= minor:
            return True, f"SASS {arch}"
    ptx = []
    for arch in arch_list:
        match = re.match(r"^compute_(\d+)$", arch)
        if match and int(match.group(1)) <= device:
            ptx.append(arch)
    if ptx:
        return True, f"PTX {ptx[-1]} (JIT-compiled on first use)"
    return False, "no SASS or PTX for this device"


@needs_gpu_and_torch("cuda_available")
def check_cuda_available(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda._is_compiled():
        fix = wheel_fix(ctx.expect.torch, ctx.expect.cuda or "12.1")
        return failed("cuda_available", "a GPU is visible but torch is a CPU build", fix, True, False)
    if not torch.cuda.is_available():
        cause = (
            "torch.cuda.is_available() is False although a GPU is visible: the driver is too old for "
            "torch's CUDA, or libcuda is not mounted" + (WSL_HINT if ctx.wsl else "")
        )
        return failed(
            "cuda_available",
            cause,
            "compare the driver check; upgrade the host driver or pick the image for an older CUDA",
            expected=True,
            actual=False,
            detail={"torch_cuda": torch.version.cuda},
        )
    devices = []
    for i in range(int(torch.cuda.device_count())):
        props = torch.cuda.get_device_properties(i)
        devices.append(
            {
                "index": i,
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
                "sm_count": props.multi_processor_count,
            }
        )
    if not devices:
        return failed(
            "cuda_available",
            "torch reports CUDA available but no devices",
            GPU_MISSING_FIX,
            expected=">= 1",
            actual=0,
        )
    return passed("cuda_available", True, {"device_count": len(devices), "devices": devices})


@needs_gpu_and_torch("arch")
def check_arch(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda.is_available():
        return skipped("arch", "torch.cuda.is_available() is False (see cuda_available)")
    arch_list = list(torch.cuda.get_arch_list())
    per_device: list[dict[str, Any]] = []
    bad: list[str] = []
    for i in range(int(torch.cuda.device_count())):
        capability = tuple(torch.cuda.get_device_capability(i))
        ok, how = arch_supported(arch_list, (int(capability[0]), int(capability[1])))
        sm = f"sm_{capability[0]}{capability[1]}"
        per_device.append({"index": i, "sm": sm, "ok": ok, "how": how})
        if not ok:
            bad.append(sm)
    if bad:
        return failed(
            "arch",
            f"no kernel image is available for execution on the device: torch was built for {arch_list}, "
            f"the device is {', '.join(bad)}",
            "use a torch build (CUDA variant) whose arch list includes this GPU, e.g. a newer CUDA wheel",
            expected=bad,
            actual=arch_list,
            detail=per_device,
        )
    return passed("arch", [d["sm"] for d in per_device], arch_list, per_device)
