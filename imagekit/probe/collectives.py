"""nccl: all-reduce and broadcast across the GPUs in worker processes (this probe run again), each
returning its result in its own file; in a multi-node Job, across every pod's GPUs (rendezvous.py)."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any

from .context import Context, needs_gpu_and_torch
from .proc import read_result, read_text, self_command, write_result
from .protocol import RESULT_FILE_OPTION, WORKER_OPTION
from .rendezvous import DOMAIN_WAIT_S, Rendezvous, RendezvousError, from_env, worker_env, worker_place
from .results import CheckResult, failed, passed, skipped

NCCL_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _meeting(world: int, rendezvous: Rendezvous | None) -> tuple[list[int], int, int, dict[str, str]]:
    """(this node's ranks, the world's size, the store's port, what workers are told): all of
    ``world`` here on a free port, or this node's ranks of ``rendezvous``."""
    if rendezvous is None:
        return list(range(world)), world, _free_port(), {}
    return rendezvous.ranks(), rendezvous.world, rendezvous.port, worker_env(rendezvous)


def run_collectives(
    world: int,
    backend: str,
    timeout: float = NCCL_TIMEOUT_S,
    workdir: str | None = None,
    extra_env: dict[str, str] | None = None,
    rendezvous: Rendezvous | None = None,
) -> dict[str, Any]:
    """Spawn `world` worker processes (this script) that all-reduce and broadcast; bounded by timeout.
    With ``rendezvous``: this node's ranks of a multi-node world instead, meeting at its address.

    Each rank returns its result in its own file (--result-file); its stdout and stderr go to files
    too (not pipes: a rank blocked on a full pipe while another waits for it in a collective would
    hang until the timeout), and are only quoted when a rank wrote no result."""
    ranks, total, port, told = _meeting(world, rendezvous)
    extra_env = {**(extra_env or {}), **told}
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[dict[str, Any]] = []
    timed_out = False
    own_dir = workdir is None
    directory = tempfile.mkdtemp(prefix="imagekit-collective-") if workdir is None else workdir
    try:
        logs = [os.path.join(directory, f"rank{rank}.log") for rank in ranks]
        results = [os.path.join(directory, f"rank{rank}.json") for rank in ranks]
        try:
            for number, rank in enumerate(ranks):
                command = [
                    *self_command(),
                    WORKER_OPTION,
                    str(rank),
                    str(total),
                    str(port),
                    backend,
                    RESULT_FILE_OPTION,
                    results[number],
                ]
                with open(logs[number], "wb") as log:
                    env = {**os.environ, **extra_env}
                    procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
            deadline = time.monotonic() + timeout
            for proc in procs:
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    for other in procs:
                        other.kill()
                    proc.wait()
        finally:
            for proc in procs:  # also on an exception: no rank outlives the check
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for number, (rank, proc) in enumerate(zip(ranks, procs)):
            result = read_result(results[number])
            if result is None:
                output = read_text(logs[number]) or ""
                result = {"rank": rank, "ok": False, "rc": proc.returncode, "output": output[-600:]}
            outputs.append(result)
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
    return {
        "ok": not timed_out and len(outputs) == len(ranks) and all(o.get("ok") for o in outputs),
        "timed_out": timed_out,
        "ranks": outputs,
    }


def collective_worker(rank: int, world: int, port: int, backend: str, result_file: str) -> int:
    """One rank: all_reduce(sum) of rank+1 and broadcast of rank 0's tensor; writes its result file.
    (A backend named "<backend>+bandwidth" is a rank of nccl_bandwidth: ``run.main`` sends it there.)"""
    from datetime import timedelta

    result: dict[str, Any] = {"rank": rank, "ok": False}
    try:
        torch: Any = importlib.import_module("torch")
        dist: Any = importlib.import_module("torch.distributed")
        address, gpu, wait_s = worker_place(os.environ, rank, world)
        device = f"cuda:{gpu}" if backend == "nccl" else "cpu"
        if backend == "nccl":
            torch.cuda.set_device(gpu)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=wait_s),
        )
        t = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(t)
        want_sum = world * (world + 1) / 2
        reduce_ok = bool((t == want_sum).all().item())
        expected = torch.arange(1024, dtype=torch.float32, device=device)
        src = expected.clone() if rank == 0 else torch.zeros(1024, device=device)
        dist.broadcast(src, 0)
        broadcast_ok = bool((src == expected).all().item())
        dist.barrier()
        dist.destroy_process_group()
        result.update({"all_reduce": reduce_ok, "broadcast": broadcast_ok, "ok": reduce_ok and broadcast_ok})
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    write_result(result_file, result)
    return 0 if result["ok"] else 1


@needs_gpu_and_torch("nccl")
def check_nccl(ctx: Context, torch: Any) -> CheckResult:
    count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    try:
        domain = from_env(os.environ, count)
    except RendezvousError as exc:
        return failed(
            "nccl",
            f"the multi-node rendezvous variables disagree: {exc}",
            "write the Job again with `imagekit k8s --compute-domain`, or set NNODES, NODE_RANK,"
            " NPROC_PER_NODE (the GPUs a pod), MASTER_ADDR and MASTER_PORT alike in every pod",
            expected="NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT",
            actual=str(exc),
        )
    if count < (2 if domain is None else 1):
        return skipped("nccl", f"fewer than 2 GPUs ({count})", actual=count)
    dist = importlib.import_module("torch.distributed")
    if not dist.is_available() or not dist.is_nccl_available():
        return failed(
            "nccl",
            "torch.distributed has no NCCL backend in this build",
            "install a CUDA torch wheel (it ships NCCL through nvidia-nccl-cu*)",
            expected="nccl",
            actual=None,
        )
    if domain is None:
        scope: dict[str, Any] = {"world": count}
        outcome = run_collectives(count, "nccl", workdir=ctx.subdir("nccl"))
    else:
        scope = {"world": domain.world, "nodes": domain.nodes, "node_rank": domain.node_rank}
        timeout = DOMAIN_WAIT_S + NCCL_TIMEOUT_S
        outcome = run_collectives(count, "nccl", timeout, ctx.subdir("nccl"), rendezvous=domain)
    if not outcome["ok"]:
        return failed(
            "nccl",
            f"NCCL all-reduce/broadcast across {'the' if domain is None else 'all the nodes'} GPUs failed"
            + (" (timed out: a hang)" if outcome["timed_out"] else ""),
            "run with NCCL_DEBUG=INFO (its output does not disturb the check); check --ipc=host / "
            "--shm-size and P2P (NCCL_P2P_DISABLE=1)"
            + (
                ""
                if domain is None
                else "; across nodes: that every pod reaches MASTER_ADDR:MASTER_PORT and sees its IMEX"
                " channel (ls /dev/nvidia-caps-imex-channels)"
            ),
            expected=scope,
            actual=outcome,
        )
    return passed("nccl", {**scope, "ops": ["all_reduce", "broadcast"]}, outcome)
