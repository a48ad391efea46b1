"""The check run: every check in ``protocol.CHECK_NAMES`` order, the report document, and ``main``
(also the child roles: a collective rank, a bounded task; and the build steps)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from .arch import check_arch, check_cuda_archs, check_cuda_available
from .arguments import ArgumentError, Invocation, parse_args
from .bandwidth import WORKER_ROLE, bandwidth_worker, check_nccl_bandwidth
from .buildsteps import run_step
from .collectives import check_nccl, collective_worker
from .compilation import check_compile, check_extension
from .context import Context
from .conv import check_cudnn_conv
from .driver import check_driver
from .emulation import mark_timed
from .gemm import check_gemm_cpu, check_gemm_gpu
from .inventory import inventory
from .libraries import check_cudnn, check_libcudart, check_torch, check_torch_cuda
from .perf import check_gemm_perf
from .protocol import BUILD_STEPS, EXIT_BAD_ARGUMENTS, EXIT_FAILED, EXIT_OK, SCHEMA
from .require import check_require
from .results import CheckResult, run_check, skipped, summarize
from .sharedlibs import check_libraries_once
from .system import check_cuda_installs, check_environment, check_nvcc, check_nvidia_smi, check_python
from .tasks import run_task_child
from .training import check_train_step

CHECKS: tuple[tuple[str, Callable[[Context], CheckResult]], ...] = (
    ("environment", check_environment),
    ("python", check_python),
    ("nvcc", check_nvcc),
    ("cuda_installs", check_cuda_installs),
    ("nvidia_smi", check_nvidia_smi),
    ("driver", check_driver),
    ("require", check_require),
    ("torch", check_torch),
    ("torch_cuda", check_torch_cuda),
    ("cudnn", check_cudnn),
    ("libcudart", check_libcudart),
    ("cuda_available", check_cuda_available),
    ("arch", check_arch),
    ("cuda_archs", check_cuda_archs),
    ("gemm_cpu", check_gemm_cpu),
    ("gemm_gpu", check_gemm_gpu),
    ("cudnn_conv", check_cudnn_conv),
    ("gemm_perf", check_gemm_perf),
    ("compile", check_compile),
    ("extension", check_extension),
    ("train_step", check_train_step),
    ("libraries_once", check_libraries_once),
    ("nccl", check_nccl),
    ("nccl_bandwidth", check_nccl_bandwidth),
)


def selected(name: str, invocation: Invocation) -> str | None:
    """None when the check runs, else the reason it was left out (--only / --skip)."""
    if invocation.only and name not in invocation.only:
        return "not selected (--only " + ",".join(invocation.only) + ")"
    if name in invocation.skip:
        return "left out (--skip)"
    return None


def build_report(ctx: Context, invocation: Invocation | None = None) -> dict[str, Any]:
    chosen = invocation or Invocation()
    started = time.monotonic()
    _ = ctx.torch  # import once up front, so its cost is not billed to whichever check asks first
    ctx.torch_import_s = round(time.monotonic() - started, 3)
    checks = []
    try:
        with ctx.cache_environment():
            for name, fn in CHECKS:
                reason = selected(name, chosen)
                result = skipped(name, reason) if reason else run_check(name, fn, ctx)
                checks.append(mark_timed(result, ctx.platform))
    finally:
        ctx.cleanup()  # builds, caches and result files of this run: nothing stays behind
    summary = summarize(checks)
    expect = asdict(ctx.expect)
    return {
        "schema": SCHEMA,
        "checks": [asdict(c) for c in checks],
        "summary": summary,
        "gpu_visible": ctx.gpu_visible,
        "gpu_requested": ctx.gpu_requested,
        "expected": expect,
        "telemetry": ctx.telemetry,
        "inventory": inventory(ctx.torch, ctx.duplicate_libraries),
        "platform": ctx.platform,
    }


def _flush_c_stdio() -> None:
    """fflush(NULL): flush every C stdio stream (a native library's printf buffer)."""
    # no libc symbol table (static or unusual runtimes): nothing to flush
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in BUILD_STEPS:  # a Dockerfile's build step, not a check run
        return run_step(args)
    try:
        expect, invocation = parse_args(args, environ)
    except ArgumentError as exc:
        sys.stderr.write(f"check.py: bad arguments: {exc}\n")
        return EXIT_BAD_ARGUMENTS
    if invocation.worker is not None:
        worker = invocation.worker
        try:
            rank, world, port = int(worker[0]), int(worker[1]), int(worker[2])
        except ValueError:
            sys.stderr.write("check.py: --collective-worker RANK WORLD PORT BACKEND --result-file PATH\n")
            return EXIT_BAD_ARGUMENTS
        backend, _, role = worker[3].partition("+")
        work = bandwidth_worker if role == WORKER_ROLE else collective_worker
        return work(rank, world, port, backend, str(invocation.result_file))
    if invocation.task is not None:
        return run_task_child(invocation.task, invocation.device, str(invocation.result_file))
    # Libraries may print to stdout (warnings, banners); keep stdout for the one JSON document.
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        report = build_report(Context(expect, environ, invocation.host_machine), invocation)
    finally:
        sys.stdout.flush()
        _flush_c_stdio()  # C libraries' buffered stdout must land on stderr, not after the JSON
        os.dup2(saved, 1)
        os.close(saved)
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.flush()
    return EXIT_OK if report["summary"]["ok"] else EXIT_FAILED
