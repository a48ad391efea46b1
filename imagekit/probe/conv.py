"""cudnn_conv: a small convolution forward and backward through cuDNN on every visible GPU, checked
against a float64 reference on the CPU. The cudnn check only reads cuDNN's version; a cuDNN without
kernels for this device (or one torch cannot load) passes that, and fails here."""

from __future__ import annotations

from typing import Any

from .context import Context, needs_gpu_and_torch
from .gemm import cuda_device, cuda_devices
from .protocol import FAIL, PASS
from .results import GPU_MISSING_FIX, CheckResult, failed, passed, skipped

# float32 with TF32 off: every output element is a short dot product (8 channels x 3 x 3 = 72 terms
# forward, a few hundred backward); 1e-4 of the tensor's largest value is far above fp32 rounding and
# far below any wrong kernel.
CONV_RTOL = 1e-4
INPUT_SHAPE = (4, 8, 20, 20)
WEIGHT_SHAPE = (16, 8, 3, 3)
SHAPES: dict[str, Any] = {"input": list(INPUT_SHAPE), "weight": list(WEIGHT_SHAPE), "padding": 1, "stride": 1}


def _conv_reference(torch: Any) -> dict[str, Any]:
    """Inputs and the float64 CPU reference of y = conv2d(x, w) and of d(sum(y * g))/dx, /dw."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*INPUT_SHAPE, generator=gen)
    w = torch.randn(*WEIGHT_SHAPE, generator=gen)
    xr = x.double().requires_grad_(True)
    wr = w.double().requires_grad_(True)
    y = torch.nn.functional.conv2d(xr, wr, padding=SHAPES["padding"], stride=SHAPES["stride"])
    g = torch.randn(*y.shape, generator=gen)
    (y * g.double()).sum().backward()
    return {"x": x, "w": w, "g": g, "y": y.detach(), "dx": xr.grad, "dw": wr.grad}


def _rel_error(got: Any, ref: Any) -> float:
    return float((got.double().cpu() - ref).abs().max().item() / max(float(ref.abs().max().item()), 1e-30))


def _conv_device(torch: Any, device: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Forward and backward on device ``device`` with cuDNN enabled (TF32 off), against ``ref``."""
    i = device["index"]
    entry: dict[str, Any] = {
        "index": i,
        "name": device["name"],
        "capability": "{}.{}".format(*device["capability"]),
    }
    try:
        with torch.cuda.device(i), torch.backends.cudnn.flags(
            enabled=True, benchmark=False, deterministic=False, allow_tf32=False
        ):
            target = cuda_device(torch, i)
            x = ref["x"].to(target, copy=True).requires_grad_(True)  # a fresh leaf per device
            w = ref["w"].to(target, copy=True).requires_grad_(True)
            y = torch.nn.functional.conv2d(x, w, padding=SHAPES["padding"], stride=SHAPES["stride"])
            (y * ref["g"].to(target)).sum().backward()
            torch.cuda.synchronize(i)
            errors = {"forward": _rel_error(y.detach(), ref["y"])}
            errors["grad_input"] = _rel_error(x.grad, ref["dx"])
            errors["grad_weight"] = _rel_error(w.grad, ref["dw"])
    except Exception as exc:
        entry.update({"status": FAIL, "error": f"{type(exc).__name__}: {exc}"[:1000]})
        return entry
    entry["max_rel_error"] = errors
    bad = {k: v for k, v in errors.items() if not v <= CONV_RTOL}
    entry["status"] = FAIL if bad else PASS
    if bad:
        entry["error"] = "; ".join(f"{k} off by {v:.3g} of its largest value" for k, v in bad.items())
    return entry


@needs_gpu_and_torch("cudnn_conv")
def check_cudnn_conv(ctx: Context, torch: Any) -> CheckResult:
    if ctx.expect.is_cpu:
        return skipped("cudnn_conv", "CPU build: no cuDNN")
    if not torch.cuda.is_available():
        return failed(
            "cudnn_conv",
            "cannot run: torch.cuda.is_available() is False (see cuda_available)",
            "fix cuda_available first",
            expected="a convolution through cuDNN",
            actual=None,
        )
    if not torch.backends.cudnn.is_available():
        return failed(
            "cudnn_conv",
            "torch.backends.cudnn.is_available() is False: torch cannot load cuDNN",
            "install the nvidia-cudnn wheel torch pins (pip check), or the cuDNN base of the cell",
            expected="cuDNN available",
            actual=False,
        )
    ref = _conv_reference(torch)
    devices = [_conv_device(torch, d, ref) for d in cuda_devices(torch)]
    detail = {
        **SHAPES,
        "dtype": "float32",
        "tf32": False,
        "cudnn": {"enabled": True, "benchmark": False, "version": torch.backends.cudnn.version()},
        "reference": "float64 conv2d forward and autograd backward on the CPU",
        "rtol": CONV_RTOL,
        "devices": devices,
    }
    actual = {str(d["index"]): d["status"] for d in devices}
    if not devices:
        return failed(
            "cudnn_conv", "torch reports CUDA available but no devices", GPU_MISSING_FIX, detail=detail
        )
    bad = [d for d in devices if d["status"] == FAIL]
    if bad:
        return failed(
            "cudnn_conv",
            "a convolution through cuDNN failed or disagrees with the reference: "
            + "; ".join(
                f"GPU {d['index']} ({d['name']}, sm_{d['capability'].replace('.', '')}): {d['error']}"
                for d in bad
            ),
            "a cuDNN without kernels for this device, or one other than torch's: install the cuDNN torch "
            "pins (one cuDNN in the image; the cudnn check names it) and see the arch check for the device",
            expected=dict.fromkeys(actual, PASS),
            actual=actual,
            detail=detail,
        )
    return passed("cudnn_conv", dict.fromkeys(actual, PASS), actual, detail)
