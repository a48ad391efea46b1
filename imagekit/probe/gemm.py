"""gemm_cpu and gemm_gpu: matrix products checked element by element against a float64 reference."""

from __future__ import annotations

import math
import random
from typing import Any

from .context import Context, needs_gpu_and_torch, torch_skip
from .protocol import FAIL, PASS, SKIP
from .results import GPU_MISSING_FIX, CheckResult, failed, passed

FP8 = "float8_e4m3fn"  # torch._scaled_mm's input dtype; its product is written as bfloat16
# dtype -> machine epsilon (2^-mantissa bits) of the product's OUTPUT; tolerances of gemm_gpu derive
# from these (an FP8 GEMM's inputs are exact fp8 values, its output is rounded to bf16).
DTYPE_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7, FP8: 2.0**-7}
FP8_CAPABILITY = (8, 9)  # FP8 Tensor Cores: Ada (sm_89), Hopper, Blackwell


def fp8_available(torch: Any) -> bool:
    """This torch has the FP8 GEMM (torch._scaled_mm and the e4m3 dtype)."""
    return hasattr(torch, "_scaled_mm") and hasattr(torch, FP8)


def scaled_mm_fp8(torch: Any, a: Any, b: Any) -> Any:
    """a @ b through torch._scaled_mm in FP8 (E4M3, unit scales, bf16 out): cuBLASLt's FP8 GEMM.
    The second operand must be column-major; torch 2.1-2.4 return (out, amax)."""
    fp8 = getattr(torch, FP8)
    one = torch.ones((), device=a.device, dtype=torch.float32)
    out = torch._scaled_mm(
        a.to(fp8), b.to(fp8).t().contiguous().t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
    )
    return out[0] if isinstance(out, tuple) else out


def _python_matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    cols = list(map(list, zip(*b)))
    return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]


def check_gemm_cpu(ctx: Context) -> CheckResult:
    skip = torch_skip(ctx, "gemm_cpu")
    if skip:
        return skip
    torch = ctx.torch
    n = 64
    rng = random.Random(1234)
    a = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    b = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    got = (torch.tensor(a, dtype=torch.float32) @ torch.tensor(b, dtype=torch.float32)).tolist()
    ref = _python_matmul(a, b)  # float64, independent of torch's BLAS
    scale = max(abs(v) for row in ref for v in row)
    err = max(abs(g - r) for grow, rrow in zip(got, ref) for g, r in zip(grow, rrow)) / scale
    tolerance = 1e-5
    detail = {
        "n": n,
        "dtype": "float32",
        "reference": "pure Python float64",
        "max_rel_error": err,
        "tolerance": tolerance,
    }
    if not err <= tolerance:
        return failed(
            "gemm_cpu",
            "CPU matmul disagrees with the reference: broken BLAS in this torch build",
            "reinstall torch; check for a conflicting MKL/OpenBLAS in LD_LIBRARY_PATH",
            expected=f"<= {tolerance}",
            actual=err,
            detail=detail,
        )
    return passed("gemm_cpu", f"<= {tolerance}", err, detail)


def gemm_tolerance(dtype: str, k: int) -> float:
    """rtol of one output element relative to its scale sqrt(sum_k (a_ik b_kj)^2) (the natural size
    of a K-term dot product): output rounding (a few ulps of the output dtype, also covering split-K
    partial sums kept in that dtype) plus fp32 accumulation error growing with sqrt(K)."""
    return 8.0 * DTYPE_EPS[dtype] + 8.0 * math.sqrt(k) * DTYPE_EPS["float32"]


def gemm_references(torch: Any, a: Any, b: Any, dtypes: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """dtype -> (reference, scale), both float64 on the CPU, from the inputs rounded to that dtype
    (autocast rounds them before the product): only the GEMM's own error is measured."""
    refs: dict[str, tuple[Any, Any]] = {}
    for name in dtypes:
        ra = a.to(getattr(torch, name)).double()
        rb = b.to(getattr(torch, name)).double()
        refs[name] = (ra @ rb, ((ra * ra) @ (rb * rb)).sqrt())
    return refs


def gemm_error_stats(torch: Any, got: Any, ref: Any, scale: Any, rtol: float) -> dict[str, Any]:
    """Per-element check |got - ref| <= rtol * scale (+ a tiny absolute floor): how many elements
    exceed it (NaN and inf count), and the worst one."""
    err = (got.double() - ref).abs()
    tol = scale * rtol + 1e-30
    ratio = err / tol
    ratio = torch.where(torch.isnan(ratio), torch.full_like(ratio, math.inf), ratio)
    exceeding = int((ratio > 1.0).sum().item())
    flat = int(torch.argmax(ratio).item())
    cols = int(ref.shape[1])
    row, col = divmod(flat, cols)
    return {
        "elements": int(ref.numel()),
        "exceeding": exceeding,
        "max_abs_error": float(err.max().item()),
        "max_error_ratio": float(ratio.max().item()),
        "rtol": rtol,
        "worst": {
            "row": row,
            "col": col,
            "got": float(got[row, col].item()),
            "ref": float(ref[row, col].item()),
            "tolerance": float(tol[row, col].item()),
        },
    }


def bf16_support(torch: Any, index: int) -> tuple[bool, str | None]:
    """(supported, reason if not) for bf16 on CUDA device `index`, asked per device."""
    try:
        with torch.cuda.device(index):
            supported = bool(torch.cuda.is_bf16_supported())
    except Exception as exc:
        return False, f"torch.cuda.is_bf16_supported() raised {type(exc).__name__}: {exc}"
    if supported:
        return True, None
    major, minor = torch.cuda.get_device_capability(index)
    return False, (
        f"torch.cuda.is_bf16_supported() is False on device {index} (sm_{major}{minor}): bf16 needs compute "
        f"capability 8.0, and torch {torch.__version__} raises on bf16 autocast below it"
    )


def cuda_device(torch: Any, index: int) -> str:
    """The torch device of CUDA device `index` ("cuda:N"; a test double of torch may map it)."""
    mapper = getattr(torch, "imagekit_device", None)
    return str(mapper(index)) if callable(mapper) else f"cuda:{index}"


def cuda_devices(torch: Any) -> list[dict[str, Any]]:
    devices = []
    for i in range(int(torch.cuda.device_count())):
        props = torch.cuda.get_device_properties(i)
        devices.append(
            {
                "index": i,
                "name": str(props.name),
                "capability": (int(props.major), int(props.minor)),
                "sm_count": int(getattr(props, "multi_processor_count", 0) or 0) or None,
                "uuid": str(getattr(props, "uuid", "") or "") or None,
            }
        )
    return devices


def _gemm_dtype(
    torch: Any, i: int, da: Any, db: Any, dtype_name: str, ref: Any, scale: Any, rtol: float
) -> dict[str, Any]:
    """One dtype's product on device ``i``, checked element by element against its reference."""
    try:
        if dtype_name == "float32":
            out = da @ db
        elif dtype_name == FP8:
            out = scaled_mm_fp8(torch, da, db)
        else:
            with torch.autocast(device_type="cuda", dtype=getattr(torch, dtype_name)):
                out = da @ db
        torch.cuda.synchronize(i)
        got = out.float().cpu()
    except Exception as exc:
        return {"status": FAIL, "error": f"{type(exc).__name__}: {exc}"}
    stats = gemm_error_stats(torch, got, ref, scale, rtol)
    stats["status"] = PASS if stats["exceeding"] == 0 else FAIL
    return stats


def _gemm_device(
    torch: Any,
    device: dict[str, Any],
    a: Any,
    b: Any,
    refs: dict[str, tuple[Any, Any]],
    tolerances: dict[str, float],
) -> dict[str, Any]:
    i = device["index"]
    entry: dict[str, Any] = {
        "index": i,
        "name": device["name"],
        "capability": "{}.{}".format(*device["capability"]),
        "dtypes": {},
    }
    bf16_ok, bf16_reason = bf16_support(torch, i)
    with torch.cuda.device(i):
        da, db = a.to(cuda_device(torch, i)), b.to(cuda_device(torch, i))
        for dtype_name, (ref, scale) in refs.items():
            if dtype_name == "bfloat16" and not bf16_ok:
                entry["dtypes"][dtype_name] = {"status": SKIP, "reason": bf16_reason}
                continue
            if dtype_name == FP8 and tuple(device["capability"]) < FP8_CAPABILITY:
                entry["dtypes"][dtype_name] = {
                    "status": SKIP,
                    "reason": "FP8 Tensor Cores need compute capability 8.9 (sm_{}{})".format(
                        *device["capability"]
                    ),
                }
                continue
            entry["dtypes"][dtype_name] = _gemm_dtype(
                torch, i, da, db, dtype_name, ref, scale, tolerances[dtype_name]
            )
        del da, db
    statuses = [r["status"] for r in entry["dtypes"].values()]
    entry["status"] = FAIL if FAIL in statuses else PASS
    return entry


def _gemm_failures(bad: list[dict[str, Any]]) -> list[str]:
    parts = []
    for d in bad:
        for dtype_name, r in d["dtypes"].items():
            if r.get("status") != FAIL:
                continue
            if "error" in r:
                parts.append(f"GPU {d['index']} {dtype_name}: {r['error']}")
            else:
                w = r["worst"]
                parts.append(
                    f"GPU {d['index']} ({d['name']}) {dtype_name}: {r['exceeding']} of {r['elements']} "
                    f"elements off by more than the bound (worst [{w['row']},{w['col']}] got "
                    f"{w['got']:.6g}, expected {w['ref']:.6g} +- {w['tolerance']:.3g})"
                )
    return parts


@needs_gpu_and_torch("gemm_gpu")
def check_gemm_gpu(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda.is_available():
        return failed(
            "gemm_gpu",
            "cannot run: torch.cuda.is_available() is False (see cuda_available)",
            "fix cuda_available first",
            expected="GEMM on the GPU",
            actual=None,
        )
    n = 1024  # M = N = K; the float64 references are computed once on the CPU
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    devices = cuda_devices(torch)
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    if fp8_available(torch) and any(tuple(d["capability"]) >= FP8_CAPABILITY for d in devices):
        dtypes += (FP8,)
    refs = gemm_references(torch, a, b, dtypes)
    tolerances = {d: gemm_tolerance(d, n) for d in dtypes}
    per_device: list[dict[str, Any]] = []
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 is IEEE fp32 here, never TF32
        for device in devices:
            per_device.append(_gemm_device(torch, device, a, b, refs, tolerances))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    detail = {
        "shape": [n, n, n],
        "reference": "float64 on the CPU, from the same inputs rounded to each dtype",
        "bound": "|got - ref| <= rtol * sqrt(sum_k (a_ik b_kj)^2), every element",
        "rtol": tolerances,
        "tf32": False,
        "fp8": "torch._scaled_mm, E4M3 inputs, unit scales, bf16 out (sm_89+)" if FP8 in dtypes else None,
        "devices": per_device,
    }
    actual = [
        {
            "index": d["index"],
            "status": d["status"],
            "exceeding": {k: v.get("exceeding") for k, v in d["dtypes"].items() if "exceeding" in v},
        }
        for d in per_device
    ]
    if not per_device:
        return failed(
            "gemm_gpu",
            "torch reports CUDA available but no devices",
            GPU_MISSING_FIX,
            actual=[],
            detail=detail,
        )
    bad = [d for d in per_device if d["status"] == FAIL]
    if bad:
        parts = _gemm_failures(bad)
        return failed(
            "gemm_gpu",
            "GPU matmul disagrees with the float64 reference: " + "; ".join(parts),
            "check the device (ECC errors and row remapping: nvidia-smi -q -d ECC,ROW_REMAPPER; dmesg for "
            "Xid), and the cuBLAS in the image (one cuBLAS, the one torch pins)",
            expected=tolerances,
            actual=actual,
            detail=detail,
        )
    return passed("gemm_gpu", tolerances, actual, detail)
