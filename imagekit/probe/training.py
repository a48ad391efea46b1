"""train_step: a small MLP trained a few steps under autocast on the CPU and each GPU."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from .compilation import combine_parts, gpu_part
from .context import Context, torch_skip
from .gemm import bf16_support, cuda_device
from .protocol import FAIL, PASS, SKIP
from .results import CheckResult

TRAIN_STEPS = 40


def grad_scaler(torch: Any) -> Any:
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        with contextlib.suppress(TypeError):
            return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def train_run(torch: Any, index: int | None, dtype_name: str, use_scaler: bool) -> dict[str, Any]:
    """A 2-layer MLP on a fixed synthetic regression (seeded generators, no global RNG), TRAIN_STEPS
    Adam steps under autocast on the CPU (index None) or CUDA device `index`; the loss (float32,
    without autocast) before and after."""
    device = "cpu" if index is None else cuda_device(torch, index)
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 16, generator=gen)
    w = torch.randn(16, 1, generator=gen)
    y = torch.sin(x @ w) + 0.05 * torch.randn(512, 1, generator=gen)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    device_type = "cpu" if index is None else "cuda"
    dtype = getattr(torch, dtype_name)

    def full_loss() -> float:
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(x).float(), y).item())

    initial = full_loss()
    scaler = grad_scaler(torch) if use_scaler else None
    losses = []
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        losses.append(round(float(loss.item()), 6))
    final = full_loss()
    ok = math.isfinite(final) and final < 0.5 * initial
    return {
        "device": device,
        "dtype": dtype_name,
        "grad_scaler": use_scaler,
        "steps": TRAIN_STEPS,
        "initial_loss": round(initial, 6),
        "final_loss": round(final, 6),
        "ratio": round(final / initial, 4) if initial else None,
        "losses": losses[:: max(1, TRAIN_STEPS // 8)],
        "status": PASS if ok else FAIL,
    }


def check_train_step(ctx: Context) -> CheckResult:
    skip = torch_skip(ctx, "train_step")
    if skip:
        return skip
    torch = ctx.torch
    parts: dict[str, dict[str, Any]] = {}
    runs: list[tuple[str, int | None, str, bool]] = [("cpu/bfloat16", None, "bfloat16", False)]
    gpu = gpu_part(ctx, "train_step")
    if gpu is not None:
        parts["cuda"] = gpu
    else:
        for i in range(int(torch.cuda.device_count())):
            runs.append((f"cuda:{i}/float16", i, "float16", True))
            bf16_ok, reason = bf16_support(torch, i)
            if bf16_ok:
                runs.append((f"cuda:{i}/bfloat16", i, "bfloat16", False))
            else:
                parts[f"cuda:{i}/bfloat16"] = {"status": SKIP, "reason": reason}
    for key, index, dtype_name, scaler in runs:
        device = "cpu" if index is None else f"cuda:{index}"
        try:
            part = train_run(torch, index, dtype_name, scaler)
        except Exception as exc:
            part = {"status": FAIL, "error": f"{type(exc).__name__}: {exc}"}
        if part["status"] == FAIL:
            part["cause"] = (
                part.get("error")
                or f"the loss did not fall by half in {TRAIN_STEPS} steps ({part.get('initial_loss')} -> "
                f"{part.get('final_loss')}): autocast/backward/optimizer broken on {device} in {dtype_name}"
            )
            part["fix"] = (
                "check torch's build for this device (autocast kernels, cuBLAS/cuDNN) and the gemm checks"
            )
        parts[key] = part
    detail = {
        "model": "Linear(16,64)-ReLU-Linear(64,1), Adam lr 1e-2, MSE on a fixed synthetic set",
        "pass_if": "final < 0.5 * initial",
    }
    return combine_parts("train_step", parts, detail, True)
