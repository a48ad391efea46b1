"""Bounded child tasks (torch.compile, C++/CUDA extensions): run in a process of their own, results
through a file, every cache under the run's scratch directory."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from typing import Any

from . import extension, prebuilt
from .context import Context
from .proc import read_result, read_text, self_command, write_result
from .protocol import DEVICE_OPTION, RESULT_FILE_OPTION, TASK_OPTION

COMPILE_TIMEOUT_S = 300.0  # torch.compile's first call: tens of seconds (inductor + a C++ build)
EXTENSION_TIMEOUT_S = 600.0  # load_inline: torch/extension.h alone takes ~30 s to compile
PREBUILT_TIMEOUT_S = 120.0  # loading a built module and one call: torch's import and CUDA's start


def _files_under(directory: str | None) -> list[str]:
    found: list[str] = []
    if not directory or not os.path.isdir(directory):
        return found
    for root, _dirs, files in os.walk(directory):
        found.extend(os.path.join(root, f) for f in files)
    return found


def task_compile(device: str) -> dict[str, Any]:
    """torch.compile (inductor) of a small function, compared with eager, on one device."""
    torch: Any = importlib.import_module("torch")
    dynamo: Any = importlib.import_module("torch._dynamo")
    dynamo.config.suppress_errors = False  # a failed compile must raise, not quietly run eager

    def fn(x: Any, y: Any) -> Any:
        return torch.nn.functional.gelu(x @ y) * torch.sigmoid(y.sum(dim=0)) + torch.sin(x).mean(
            dim=1, keepdim=True
        )

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=gen).to(device)
    y = torch.randn(64, 64, generator=gen).to(device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    started = time.monotonic()
    compiled = torch.compile(fn, fullgraph=True)
    out = compiled(x, y)
    sync()
    first = time.monotonic() - started
    started = time.monotonic()
    again = compiled(x, y)
    sync()
    second = time.monotonic() - started
    ref = fn(x, y)
    max_err = float((out - ref).abs().max().item())
    close = bool(torch.allclose(out, ref, rtol=1e-4, atol=1e-4)) and bool(torch.equal(out, again))
    generated = [
        f
        for f in _files_under(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        if f.endswith((".cpp", ".py", ".so", ".cubin", ".ptx"))
    ]
    result: dict[str, Any] = {
        "ok": close and bool(generated),
        "device": device,
        "torch": str(torch.__version__),
        "max_abs_error": max_err,
        "first_call_s": round(first, 2),
        "second_call_s": round(second, 4),
        "generated_files": len(generated),
    }
    if not close:
        result["error"] = f"compiled result differs from eager (max abs error {max_err:.3g})"
    elif not generated:
        result["error"] = "no generated code in TORCHINDUCTOR_CACHE_DIR: torch.compile did not compile"
    return result


def task_extension(cuda: bool) -> dict[str, Any]:
    """The check's C++ (or CUDA) extension through load_inline, built into a fresh directory, then called."""
    torch: Any = importlib.import_module("torch")
    cpp_extension: Any = importlib.import_module("torch.utils.cpp_extension")
    info: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda_home": getattr(cpp_extension, "CUDA_HOME", None),
    }
    failed = extension.missing_ninja(cpp_extension)
    if failed is not None:
        return {**info, **failed}
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or tempfile.mkdtemp()
    build = os.path.join(root, "cuda" if cuda else "cpu")
    os.makedirs(build, exist_ok=True)
    name = f"imagekit_check_{'cuda' if cuda else 'cpu'}_{os.getpid()}"
    started = time.monotonic()
    module = extension.build_module(cpp_extension, cuda, name, build)
    build_s = time.monotonic() - started
    ran = extension.exercise(torch, module, cuda)
    built = [os.path.basename(f) for f in _files_under(build) if f.endswith(".so")]
    result = {**info, **ran, "ok": ran["ok"] and bool(built), "build_s": round(build_s, 1), "built": built}
    if ran["ok"] and not built:
        result["error"] = "no .so was built"
    return result


def task_extension_prebuilt(device: str) -> dict[str, Any]:
    """Load the module built at image build time (``prebuilt``; the parent checked its manifest) and
    call it on ``device``; on ``cuda-no-gpu`` (no GPU visible) load it and read torch's arch flags only,
    which is what the image build did with the same TORCH_CUDA_ARCH_LIST. ``loaded`` says whether
    the library loaded: a load failure sends the check back to building, a wrong result fails it."""
    torch: Any = importlib.import_module("torch")
    kind = "cpu" if device == "cpu" else "cuda"
    path = prebuilt.module_path(prebuilt.directory(dict(os.environ)), kind)
    info: dict[str, Any] = {"torch": str(torch.__version__), "module": path, "loaded": False}
    started = time.monotonic()
    try:
        module = extension.load_module(prebuilt.module_name(kind), path)
    except Exception as exc:
        return {**info, "ok": False, "error": f"loading {path}: {type(exc).__name__}: {exc}"[-4000:]}
    info.update(loaded=True, load_s=round(time.monotonic() - started, 2))
    function = extension.function_name(kind == "cuda")
    if not callable(getattr(module, function, None)):
        return {**info, "loaded": False, "ok": False, "error": f"{path} has no {function}()"}
    if device != "cuda-no-gpu":
        return {**info, **extension.exercise(torch, module, kind == "cuda")}
    cpp_extension: Any = importlib.import_module("torch.utils.cpp_extension")
    flags, failed = extension.arch_flags(cpp_extension)
    info.update(
        TORCH_CUDA_ARCH_LIST=os.environ.get("TORCH_CUDA_ARCH_LIST"),
        CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES"),
        visible_gpus=int(torch.cuda.device_count()),
    )
    if failed is not None:
        return {**info, **failed}
    return {**info, "ok": True, "arch_flags": flags}


EXT_KERNEL = """
__global__ void scaled_add_kernel(const float* a, const float* b, float* out, float alpha, long n) {
  long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + alpha * b[i];
}
"""


def _nvcc_path(cpp_extension: Any) -> str | None:
    home = getattr(cpp_extension, "CUDA_HOME", None) or os.environ.get("CUDA_HOME")
    candidates = [os.path.join(home, "bin", "nvcc")] if home else []
    candidates += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and os.path.exists(c)), None)


def _nvcc_objects(nvcc: str, flags: list[str], build: str) -> dict[str, Any]:
    """Compile a kernel for ``flags`` with nvcc (no torch library to link: a CPU torch build)."""
    source = os.path.join(build, "kernel.cu")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write(EXT_KERNEL)
    target = os.path.join(build, "kernel.o")
    done = subprocess.run(
        [nvcc, "-c", source, "-o", target, *flags], capture_output=True, text=True, check=False
    )
    ok = done.returncode == 0 and os.path.exists(target)
    result: dict[str, Any] = {"ok": ok, "nvcc": nvcc, "built": ["kernel.o"] if ok else []}
    if not ok:
        result["error"] = f"nvcc failed (exit {done.returncode}): {(done.stderr or done.stdout)[-1500:]}"
    return result


def task_extension_no_gpu() -> dict[str, Any]:
    """What a `docker build` that compiles a CUDA extension does: no GPU visible (the parent sets
    CUDA_VISIBLE_DEVICES empty), so torch's _get_cuda_arch_flags must take the architectures from
    TORCH_CUDA_ARCH_LIST (pytorch issue 137261); then the extension is built (not run). With a CUDA
    torch that is load_inline's whole build; with a CPU torch (tests) nvcc compiles the kernel."""
    torch: Any = importlib.import_module("torch")
    cpp_extension: Any = importlib.import_module("torch.utils.cpp_extension")
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    info: dict[str, Any] = {
        "torch": str(torch.__version__),
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "visible_gpus": int(torch.cuda.device_count()),
    }
    flags, failed = extension.arch_flags(cpp_extension)
    if failed is not None or flags is None:
        return {**info, **(failed or {})}
    info["arch_flags"] = flags
    build = os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR") or tempfile.mkdtemp(), "cuda-nogpu")
    os.makedirs(build, exist_ok=True)
    started = time.monotonic()
    if torch.version.cuda:
        extension.build_module(cpp_extension, True, f"imagekit_check_nogpu_{os.getpid()}", build)
        built = [os.path.basename(f) for f in _files_under(build) if f.endswith(".so")]
        result: dict[str, Any] = {"ok": bool(built), "built": built, "how": "load_inline (built, not run)"}
        if not built:
            result["error"] = "load_inline built no .so"
    else:
        nvcc = _nvcc_path(cpp_extension)
        if nvcc is None:
            return {**info, "ok": False, "missing": "nvcc", "error": "no nvcc (CUDA_HOME, PATH)"}
        result = {**_nvcc_objects(nvcc, flags, build), "how": "nvcc -c with torch's arch flags (CPU torch)"}
    return {**info, **result, "build_s": round(time.monotonic() - started, 1)}


def run_task_child(task: str, device: str, result_file: str) -> int:
    """Child side of run_task: do the task, write its result file, exit 0 when it passed."""
    try:
        if task == "compile":
            result = task_compile(device)
        elif task == "extension_cpu":
            result = task_extension(cuda=False)
        elif task == "extension_cuda_nogpu":
            result = task_extension_no_gpu()
        elif task == "extension_prebuilt":
            result = task_extension_prebuilt(device)
        else:
            result = task_extension(cuda=True)
    except Exception as exc:
        result = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[-4000:],
            "traceback": traceback.format_exc(limit=8)[-3000:],
        }
    write_result(result_file, result)
    return 0 if result.get("ok") else 1


def task_env(ctx: Context, taskdir: str) -> dict[str, str]:
    """The child's environment: every cache and build directory inside the run's work directory,
    so nothing lands outside the temporary directory and no stale build is reused."""
    env = dict(ctx.env)
    scratch = os.path.join(taskdir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    env.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(taskdir, "inductor"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",  # compile in the child itself: no worker pool to outlive it
            "TRITON_CACHE_DIR": os.path.join(taskdir, "triton"),
            "TRITON_HOME": taskdir,
            "TORCH_EXTENSIONS_DIR": os.path.join(taskdir, "extensions"),
            "CUDA_CACHE_PATH": os.path.join(taskdir, "nv-compute-cache"),
            "XDG_CACHE_HOME": os.path.join(taskdir, "cache"),
            "TMPDIR": scratch,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def run_task(
    ctx: Context, task: str, device: str, timeout: float, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `check.py --task` in a child process (own process group) bounded by `timeout`; its result
    comes back through a file, its output (kept for diagnosis) through another. ``extra_env`` is
    laid over the child's environment (CUDA_VISIBLE_DEVICES empty: no GPU visible)."""
    taskdir = ctx.subdir(f"{task}-{device.replace(':', '')}")
    result_file = os.path.join(taskdir, "result.json")
    log_path = os.path.join(taskdir, "output.log")
    command = [
        *self_command(),
        TASK_OPTION,
        task,
        DEVICE_OPTION,
        device,
        RESULT_FILE_OPTION,
        result_file,
    ]
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**task_env(ctx, taskdir), **(extra_env or {})},
            cwd=taskdir,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever it started
            rc = proc.wait()
    return {
        "rc": rc,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 1),
        "result": read_result(result_file),
        "output_tail": (read_text(log_path) or "")[-2000:],
    }
