"""What the checks share: expectations, environment, lazily probed facts (torch, nvidia-smi), the
GPU policy and its gates, and the run's scratch directory."""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .arguments import Expect
from .emulation import EMULATED_GPU_CAUSE, EMULATED_GPU_FIX, run_platform
from .proc import temp_root
from .protocol import REQUIRE_GPU_OPTION
from .results import (
    GPU_MISSING_CAUSE,
    GPU_MISSING_FIX,
    NO_GPU_REQUESTED,
    WSL_HINT,
    CheckResult,
    failed,
    skipped,
)
from .smi import probe_nvidia_smi


class Context:
    """What the checks share: expectations, environment, and lazily probed facts."""

    def __init__(self, expect: Expect, env: dict[str, str], host_machine: str | None = None) -> None:
        self.expect = expect
        self.env = env
        # where this run is: the document's "platform" (protocol.PLATFORM_FIELDS)
        self.platform: dict[str, Any] = run_platform(host_machine)
        self._smi: dict[str, Any] | None = None
        self._torch: Any = None
        self._torch_error: str | None = None
        self._torch_tried = False
        self.torch_import_s: float | None = None
        self._workdir: str | None = None
        self._devices: list[dict[str, str | None]] | None = None
        self.telemetry: dict[str, Any] | None = None  # set by gemm_perf
        self.duplicate_libraries: dict[str, Any] | None = None  # set by libraries_once

    # scratch space ---------------------------------------------------------------------------
    def workdir(self) -> str:
        """One fresh directory under the temporary directory for every build, cache and result file
        of this run (the image's root may be read-only; /tmp is the tmpfs). Removed by cleanup()."""
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="imagekit-check-", dir=temp_root(self.env))
        return self._workdir

    def subdir(self, name: str) -> str:
        path = os.path.join(self.workdir(), name)
        os.makedirs(path, exist_ok=True)
        return path

    @contextlib.contextmanager
    def cache_environment(self) -> Iterator[None]:
        """While the checks run, point this process's own torch caches (inductor, which the optimizer
        may touch; Triton; the CUDA JIT cache) into the work directory too; restored afterwards."""
        names = {
            "TORCHINDUCTOR_CACHE_DIR": "inductor",
            "TRITON_CACHE_DIR": "triton",
            "CUDA_CACHE_PATH": "nv-compute-cache",
        }
        saved = {name: os.environ.get(name) for name in names}
        try:
            for name, sub in names.items():
                if not os.environ.get(name):
                    os.environ[name] = os.path.join(self.workdir(), "process", sub)
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def cleanup(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # torch ----------------------------------------------------------------------------------
    @property
    def torch(self) -> Any:
        if not self._torch_tried:
            self._torch_tried = True
            try:
                self._torch = importlib.import_module("torch")
            except Exception as exc:  # ImportError, or a broken install raising OSError
                self._torch_error = f"{type(exc).__name__}: {exc}"
        return self._torch

    @property
    def torch_error(self) -> str | None:
        _ = self.torch
        return self._torch_error

    # nvidia-smi -----------------------------------------------------------------------------
    @property
    def smi(self) -> dict[str, Any]:
        if self._smi is None:
            self._smi = probe_nvidia_smi(self.env)
        return self._smi

    # GPU policy ------------------------------------------------------------------------------
    @property
    def wsl(self) -> bool:
        return os.path.exists("/dev/dxg")

    def gpu_request_reasons(self) -> list[str]:
        reasons = []
        if self.expect.require_gpu:
            reasons.append(REQUIRE_GPU_OPTION)
        visible = self.env.get("NVIDIA_VISIBLE_DEVICES")
        if visible is not None and visible.strip().lower() not in ("", "void", "none", "all"):
            reasons.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
        nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
        if os.path.exists("/dev/nvidiactl"):
            nodes.append("/dev/nvidiactl")
        if nodes:
            reasons.append("NVIDIA device nodes present: " + ", ".join(nodes[:4]))
        if self.smi.get("path"):
            reasons.append(f"nvidia-smi injected at {self.smi['path']}")
        return reasons

    @property
    def gpu_requested(self) -> bool:
        return bool(self.gpu_request_reasons())

    @property
    def gpu_visible(self) -> bool:
        if self.smi.get("gpus"):
            return True
        torch = self.torch
        if torch is None:
            return False
        try:
            return bool(torch.cuda.is_available()) and int(torch.cuda.device_count()) > 0
        except Exception:
            return False

    @property
    def emulated(self) -> bool:
        """This run is emulated (known to be: the host passed its machine, and it is another)."""
        return self.platform["emulated"] is True

    def gpu_gate(self, name: str) -> CheckResult | None:
        """The GPU policy: a result to return instead of running a GPU check, or None to run it.
        An emulated run never runs one: asked for a GPU, it fails saying why."""
        if self.emulated:
            return self._emulated_gate(name)
        if self.gpu_visible:
            return None
        if self.gpu_requested:
            cause = GPU_MISSING_CAUSE + (WSL_HINT if self.wsl else "")
            detail = {
                "requested_by": self.gpu_request_reasons(),
                "NVIDIA_VISIBLE_DEVICES": self.env.get("NVIDIA_VISIBLE_DEVICES"),
                "nvidia_smi": self.smi.get("error") or "lists no GPU",
            }
            return failed(
                name, cause, GPU_MISSING_FIX, expected="a visible GPU", actual="none", detail=detail
            )
        return skipped(name, NO_GPU_REQUESTED)

    def _emulated_gate(self, name: str) -> CheckResult:
        if not self.gpu_requested:
            return skipped(name, NO_GPU_REQUESTED)
        where = {"machine": self.platform["machine"], "host": self.platform["host_machine"]}
        return failed(
            name,
            EMULATED_GPU_CAUSE.format(**where),
            EMULATED_GPU_FIX.format(**where),
            expected="a native run with a visible GPU",
            actual=f"emulated: {where['machine']} on {where['host']}",
            detail={"platform": self.platform, "requested_by": self.gpu_request_reasons()},
        )


def driver_capabilities(value: str | None) -> set[str]:
    """NVIDIA_DRIVER_CAPABILITIES -> the set it grants for certain; unset or empty counts as {"utility"}
    (older runtimes mount only that; current toolkits default to utility,compute: the environment
    check warns about an unset value rather than failing); "all" grants everything."""
    names = {c.strip().lower() for c in (value or "").split(",") if c.strip()}
    if not names:
        return {"utility"}
    if "all" in names:
        return {"all", "compute", "compat32", "graphics", "utility", "video", "display", "ngx"}
    return names


def is_cuda_build(ctx: Context) -> bool:
    """The cell is a CUDA build: an expected CUDA version, or (none expected) a CUDA torch."""
    if ctx.expect.cuda is not None:
        return not ctx.expect.is_cpu
    torch = ctx.torch
    try:
        return torch is not None and bool(torch.version.cuda)
    except AttributeError:
        return False


def torch_skip(ctx: Context, name: str) -> CheckResult | None:
    if ctx.torch is None:
        return skipped(name, "torch is not importable (see the torch check)")
    return None


def _gpu_torch_gate(ctx: Context, name: str) -> CheckResult | None:
    """For checks that need both a GPU and torch: the GPU policy first, then torch's presence."""
    return ctx.gpu_gate(name) or torch_skip(ctx, name)


def needs_gpu_and_torch(
    name: str,
) -> Callable[[Callable[[Context, Any], CheckResult]], Callable[[Context], CheckResult]]:
    """A check that runs only past the GPU policy and with torch importable; it gets torch."""

    def wrap(check: Callable[[Context, Any], CheckResult]) -> Callable[[Context], CheckResult]:
        def gated(ctx: Context) -> CheckResult:
            blocked = _gpu_torch_gate(ctx, name)
            return blocked if blocked is not None else check(ctx, ctx.torch)

        gated.__name__ = check.__name__
        gated.__doc__ = check.__doc__
        return gated

    return wrap
