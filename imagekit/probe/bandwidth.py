"""nccl_bandwidth: a large all-reduce timed between every pair of GPUs (and across all of them),
reported as bus bandwidth beside the link `nvidia-smi topo -m` names between them, against floors by
interconnect (data: imagekit/data/gpus.yaml). A 4 KB all-reduce (the nccl check) runs on NCCL's
low-latency protocol only: an NVLink or P2P fallback passes it, and fails here."""

from __future__ import annotations

import importlib
import itertools
import os
import re
import time
from dataclasses import asdict
from typing import Any

from .collectives import run_collectives
from .context import Context, needs_gpu_and_torch
from .proc import run_command, write_result
from .protocol import FAIL, PASS, SKIP
from .results import CheckResult, failed, skipped
from .tables import nccl_bandwidth

BACKEND = "nccl"  # gloo in the tests (the ranks then run on the CPU)
# A rank given the backend "<backend>+bandwidth" is a rank of this check (run.main sends it here).
WORKER_ROLE = "bandwidth"
SIZE_ENV = "IMAGEKIT_NCCL_BANDWIDTH_MIB"  # overrides the data's size (MiB per rank)
TIMEOUT_S = 300.0
NVLINK = re.compile(r"^NV(\d+)$")


def parse_topo(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` -> {(i, j): link} between GPUs i and j (nvidia-smi's indices): X, NV<n>,
    PIX, PXB, PHB, NODE, SYS. The GPU columns come first in the header, NICs and affinities after."""
    lines = [line for line in text.splitlines() if line.strip()]
    # the header is indented (it names the columns); a row starts with its own GPU label
    header = next(
        (line for line in lines if re.search(r"\bGPU\d+\b", line) and not re.match(r"GPU\d+\s", line)), ""
    )
    columns = [int(t[3:]) for t in header.split() if re.fullmatch(r"GPU\d+", t)]
    links: dict[tuple[int, int], str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens or not re.fullmatch(r"GPU\d+", tokens[0]):
            continue
        row = int(tokens[0][3:])
        for column, value in zip(columns, tokens[1 : 1 + len(columns)]):
            links[(row, column)] = value
    return links


def pair_floor(link: str | None, table: dict[str, Any]) -> tuple[float | None, str]:
    """(floor GB/s, how) for a pair joined by ``link``: per NVLink link, else by PCIe path kind."""
    if link is None:
        return None, "no topology (nvidia-smi topo -m unavailable): no floor"
    nvlink = NVLINK.match(link)
    if nvlink:
        links = int(nvlink.group(1))
        per_link = float(table["nvlink_per_link_gbps"])
        return round(links * per_link, 1), f"{link}: {links} NVLink links x {per_link} GB/s"
    floor = table["floors_gbps"].get(link)
    if floor is None:
        return None, f"no floor for link {link!r}"
    return float(floor), f"{link}: PCIe/host path floor"


def _size_bytes(table: dict[str, Any]) -> int:
    mib = float(os.environ.get(SIZE_ENV) or table["size_mib"])
    return max(int(mib * 2**20) // 4 * 4, 4)


def _timed_all_reduce(
    torch: Any, dist: Any, tensor: Any, group: Any, warmup: int, iterations: int, cuda: bool
) -> float:
    for _ in range(warmup):
        dist.all_reduce(tensor, group=group)
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / iterations


def bus_bandwidth(size: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce, GB/s: size / time x 2(n-1)/n."""
    return size / max(seconds, 1e-9) * 2 * (ranks - 1) / ranks / 1e9


def bandwidth_worker(rank: int, world: int, port: int, backend: str, result_file: str) -> int:
    """One rank: every pair's all-reduce in turn (all ranks make every group), then all ranks'."""
    from datetime import timedelta

    result: dict[str, Any] = {"rank": rank, "ok": False}
    try:
        torch: Any = importlib.import_module("torch")
        dist: Any = importlib.import_module("torch.distributed")
        table = nccl_bandwidth()
        cuda = backend == "nccl"
        if cuda:
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=120),
        )
        size = _size_bytes(table)
        tensor = torch.ones(size // 4, dtype=torch.float32, device=f"cuda:{rank}" if cuda else "cpu")
        warmup, iterations = int(table["warmup"]), int(table["iterations"])
        pairs = []
        for pair in itertools.combinations(range(world), 2):
            group = dist.new_group(list(pair))
            if rank in pair:
                seconds = _timed_all_reduce(torch, dist, tensor, group, warmup, iterations, cuda)
                if rank == pair[0]:
                    pairs.append(
                        {
                            "pair": list(pair),
                            "seconds": seconds,
                            "busbw_gbps": round(bus_bandwidth(size, seconds, 2), 2),
                        }
                    )
            dist.barrier()
        seconds = _timed_all_reduce(torch, dist, tensor, None, warmup, iterations, cuda)
        dist.barrier()
        dist.destroy_process_group()
        result.update(
            {
                "ok": True,
                "bytes": size,
                "pairs": pairs,
                "all_busbw_gbps": round(bus_bandwidth(size, seconds, world), 2),
            }
        )
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    write_result(result_file, result)
    return 0 if result["ok"] else 1


def _topology(ctx: Context) -> tuple[dict[tuple[int, int], str], str | None]:
    smi = ctx.smi.get("path")
    if not smi:
        return {}, "nvidia-smi not found"
    rc, out = run_command([smi, "topo", "-m"])
    if rc != 0:
        return {}, f"nvidia-smi topo -m exited {rc}: {out[-300:]}"
    return parse_topo(out), None


def _judge_pairs(
    measured: list[dict[str, Any]], links: dict[tuple[int, int], str], table: dict[str, Any]
) -> list[dict[str, Any]]:
    pairs = []
    for entry in sorted(measured, key=lambda e: e["pair"]):
        i, j = entry["pair"]
        link = links.get((i, j))
        floor, how = pair_floor(link, table)
        status = SKIP if floor is None else (FAIL if entry["busbw_gbps"] < floor else PASS)
        pairs.append({**entry, "link": link, "floor_gbps": floor, "floor": how, "status": status})
    return pairs


def check_nccl_bandwidth(ctx: Context) -> CheckResult:
    """Reported, never required (a shared machine may be busy): every result says required=false."""
    result = _check_nccl_bandwidth(ctx)
    return CheckResult(**{**asdict(result), "required": False})


@needs_gpu_and_torch("nccl_bandwidth")
def _check_nccl_bandwidth(ctx: Context, torch: Any) -> CheckResult:
    count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if count < 2:
        return skipped("nccl_bandwidth", f"fewer than 2 GPUs ({count})", actual=count)
    dist = importlib.import_module("torch.distributed")
    if BACKEND == "nccl" and not (dist.is_available() and dist.is_nccl_available()):
        return skipped("nccl_bandwidth", "torch.distributed has no NCCL backend (see the nccl check)")
    table = nccl_bandwidth()
    links, topo_error = _topology(ctx)
    # CUDA's device order follows the PCI bus, as nvidia-smi's indices (and topo -m) do
    worker_env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if ctx.env.get(SIZE_ENV):
        worker_env[SIZE_ENV] = ctx.env[SIZE_ENV]
    outcome = run_collectives(
        count,
        f"{BACKEND}+{WORKER_ROLE}",
        TIMEOUT_S,
        ctx.subdir("nccl-bandwidth"),
        worker_env,
    )
    detail: dict[str, Any] = {
        "backend": BACKEND,
        "size_mib": table["size_mib"],
        "iterations": table["iterations"],
        "topology_error": topo_error,
        "source": table["source"],
    }
    if not outcome["ok"]:
        return failed(
            "nccl_bandwidth",
            "the timed all-reduce across the GPUs failed"
            + (" (timed out: a hang)" if outcome["timed_out"] else ""),
            "run with NCCL_DEBUG=INFO; check --ipc=host / --shm-size and P2P (NCCL_P2P_LEVEL)",
            actual=outcome,
            detail=detail,
        )
    rank0 = outcome["ranks"][0]
    measured = [p for r in outcome["ranks"] for p in r.get("pairs", [])]
    pairs = _judge_pairs(measured, links, table)
    detail.update(
        {
            "bytes": rank0.get("bytes"),
            "all_busbw_gbps": rank0.get("all_busbw_gbps"),
            "pairs": pairs,
            "topology": {f"{i}-{j}": v for (i, j), v in sorted(links.items()) if i < j},
        }
    )
    return _verdict(pairs, detail)


def _verdict(pairs: list[dict[str, Any]], detail: dict[str, Any]) -> CheckResult:
    """Fail when a pair is below its link's floor; pass when one passed; else skip (no floors)."""
    actual = {"{}-{}".format(*p["pair"]): p["busbw_gbps"] for p in pairs}
    expected = {
        "{}-{}".format(*p["pair"]): f">= {p['floor_gbps']}" for p in pairs if p["floor_gbps"] is not None
    }
    bad = [p for p in pairs if p["status"] == FAIL]
    if bad:
        parts = [
            f"GPUs {p['pair'][0]}-{p['pair'][1]} ({p['link']}) {p['busbw_gbps']} GB/s < {p['floor_gbps']}"
            for p in bad
        ]
        return CheckResult(
            "nccl_bandwidth",
            FAIL,
            required=False,
            expected=expected,
            actual=actual,
            detail=detail,
            cause="all-reduce bus bandwidth below the link's floor (NVLink or P2P not used?): "
            + "; ".join(parts),
            fix="check nvidia-smi topo -m and nvidia-smi nvlink -s, NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, "
            "--ipc=host and the container's shared memory; NCCL_DEBUG=INFO names the transport NCCL chose",
        )
    if not any(p["status"] == PASS for p in pairs):
        return CheckResult(
            "nccl_bandwidth",
            SKIP,
            required=False,
            reason="no floor for any pair's link",
            actual=actual,
            detail=detail,
        )
    return CheckResult(
        "nccl_bandwidth", PASS, required=False, expected=expected, actual=actual, detail=detail
    )
