"""arch: the GPU architectures torch was built for against each device; cuda_available;
cuda_archs: torch's own arch list (read without a GPU) against the image's cuda-archs label."""

from __future__ import annotations

import re
from typing import Any

from .context import Context, needs_gpu_and_torch
from .libraries import wheel_fix
from .protocol import CUDA_ARCHS, FAIL, PASS, SKIP
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


# One item of torch's own flags (torch._C._cuda_getArchFlags(): "sm_90a", "compute_90"), and one of
# a TORCH_CUDA_ARCH_LIST ("9.0", "9.0a", "12.0+PTX"), the spelling of the cuda-archs label.
_FLAG = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
_LIST_ITEM = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$")


def arch_flags(text: str) -> list[str] | None:
    """An arch list in either spelling as torch's flags: "8.0;9.0+PTX" -> [sm_80, sm_90,
    compute_90] (X.Y+PTX is both SASS and PTX of X.Y); "sm_80 sm_90 compute_90" as it is.
    Separators: ';', ',' or blanks. None when an item is in neither spelling."""
    flags: list[str] = []
    for item in re.split(r"[;,\s]+", text.strip()):
        if not item:
            continue
        if _FLAG.match(item):
            flags.append(item)
            continue
        match = _LIST_ITEM.match(item)
        if match is None:
            return None
        arch = match.group(1) + match.group(2) + match.group(3)
        flags.append(f"sm_{arch}")
        if match.group(4):
            flags.append(f"compute_{arch}")
    return flags


def _flag_key(flag: str) -> tuple[int, bool, str]:
    """By architecture, SASS before PTX (sm_90, compute_90, sm_100): the order torch prints."""
    match = _FLAG.match(flag)
    return (int(match.group(2)), match.group(1) == "compute", flag) if match else (0, False, flag)


def compare_archs(expected: list[str], actual: list[str]) -> tuple[list[str], list[str]]:
    """(what the label promises and the wheel lacks, what the wheel has beyond the label); order
    does not matter, duplicates neither."""
    missing = sorted(set(expected) - set(actual), key=_flag_key)
    extra = sorted(set(actual) - set(expected), key=_flag_key)
    return missing, extra


def _record(status: str, **fields: Any) -> CheckResult:
    # Never required: the data (and so the label) may lag what PyTorch shipped in the wheel.
    return CheckResult(CUDA_ARCHS, status, required=False, **fields)


def read_arch_flags(torch: Any) -> tuple[list[str] | None, str | None]:
    """torch's own arch list, read without a GPU (torch.cuda.get_arch_list() is [] when none is
    available; the flags it splits are compiled in): (flags, None), or (None, why not)."""
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        return None, "torch is a CPU build: no CUDA architectures"
    read = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    if read is None:
        return None, f"torch {torch.__version__} has no torch._C._cuda_getArchFlags to read its list from"
    flags = read()
    if not flags:
        return None, f"torch {torch.__version__} was built without CUDA arch flags"
    return str(flags).split(), None


def check_cuda_archs(ctx: Context) -> CheckResult:
    """The architectures torch carries kernels (sm_XY) and PTX (compute_XY) for, against the
    image's cuda-archs label: a difference is a warning whose detail shows both lists."""
    torch = ctx.torch
    label = ctx.expect.cuda_archs
    if torch is None:
        return _record(SKIP, reason="torch is not importable (see torch)", expected=label)
    actual, why = read_arch_flags(torch)
    if actual is None:
        return _record(SKIP, reason=why, expected=label)
    if label is None:
        note = "no cuda-archs label to compare with"
        return _record(PASS, actual=actual, detail={"label": None, "note": note})
    expected = arch_flags(label)
    detail: dict[str, Any] = {"label": label, "expected": expected, "actual": actual}
    if expected is None:
        return _record(
            FAIL,
            expected=label,
            actual=actual,
            detail=detail,
            cause=f"the image's cuda-archs label {label!r} is not an arch list like 8.0;9.0+PTX",
            fix="rebuild the image with imagekit (its label comes from imagekit/data/gpus.yaml)",
        )
    missing, extra = compare_archs(expected, actual)
    if not missing and not extra:
        return _record(PASS, expected=label, actual=actual, detail=detail)
    detail.update(missing=missing, extra=extra)
    return _record(
        FAIL,
        expected=label,
        actual=actual,
        detail=detail,
        cause=(
            f"torch was built for {' '.join(actual)}; the image's cuda-archs label says {label}"
            + (f" (the wheel lacks {' '.join(missing)})" if missing else "")
            + (f" (the label leaves out {' '.join(extra)})" if extra else "")
        ),
        fix=(
            "record the wheel's list, with its source, in imagekit/data/gpus.yaml wheel_arch_lists "
            "(per release: torch, per machine: machines) and rebuild: the label, the devel image's "
            "TORCH_CUDA_ARCH_LIST, plan --coverage and Kubernetes scheduling read it"
        ),
    )
