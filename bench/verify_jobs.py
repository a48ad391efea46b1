"""GPU minutes: `imagekit verify --jobs N` against `--jobs 1` on a built matrix's cells.

    python -m bench.verify_jobs --project DIR [--jobs 3] [--rounds 3] [--gpus none] [--docker-host URL]
        [--no-warm]

DIR holds a matrix.yaml built with `imagekit build` (its .imagekit/report.json names the images),
e.g. a copy of examples/offline after `examples/offline/setup.sh` and `imagekit build`. Each round
runs `imagekit verify --matrix matrix.yaml --gpus G --jobs 1` and `--jobs N`, in alternating
order, timed end to end (process start included); the GPU-seconds are read back from the report's
last verify run. Prints medians, their ratio and the load average, and writes
bench/results/verify_jobs.json. With --fake-gpus N the runs go to a private engine with the tests'
fake NVIDIA hook (testbed/fake_gpu_engine.py; as root), holding the report's images, with
--gpus device=0,...,N-1: each cell's first pass is pinned to a GPU of its own, and the checks that
need a driver fail (there is none), so it measures the scheduling, not a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_text

RESULTS = Path(__file__).resolve().parent / "results"


def verify(project: Path, gpus: str, jobs: int, env: dict[str, str]) -> tuple[float, dict[str, object]]:
    command = [sys.executable, "-m", "imagekit", "verify", "--matrix", "matrix.yaml", "--gpus", gpus]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--jobs", str(jobs)], cwd=project, env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a cell failed its checks, which the fake-GPU engine means
        raise SystemExit(f"verify --jobs {jobs} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    report = json.loads(
        read_regular_text(
            project / ".imagekit" / "report.json", STATE_BYTES, "the report.json imagekit writes"
        )
    )
    verdicts = [c["verification"]["verdict"] for c in report["cells"] if c.get("verification")]
    # a run cut short (a container removed under it by another user of the engine) is not a figure
    return elapsed, {**report["verify_runs"][-1], "verdicts": sorted(verdicts)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", default="none")
    parser.add_argument("--fake-gpus", type=int, default=0, help="run on a fake-GPU engine with N GPUs")
    parser.add_argument("--no-warm", action="store_true", help="skip the first, untimed --jobs 1 run")
    args = parser.parse_args()
    if args.fake_gpus:
        return on_fake_gpus(args)
    return measure(args, dict(os.environ))


def on_fake_gpus(args: argparse.Namespace) -> int:
    from testbed.fake_gpu_engine import fake_gpu_engine

    report = json.loads(
        read_regular_text(
            args.project / ".imagekit" / "report.json", STATE_BYTES, "the report.json imagekit writes"
        )
    )
    images = tuple(c["image_id"] for c in report["cells"] if c.get("image_id"))
    root = Path(tempfile.mkdtemp(prefix="ikvj-", dir="/tmp"))  # short: a unix socket path
    root.rmdir()
    args.gpus = "device=" + ",".join(str(i) for i in range(args.fake_gpus))
    with fake_gpu_engine(root, images) as engine:
        return measure(args, {**os.environ, "DOCKER_HOST": engine.host})


def measure(args: argparse.Namespace, env: dict[str, str]) -> int:
    if not args.no_warm:
        verify(args.project, args.gpus, 1, env)  # warm the page cache for both
    walls: dict[int, list[float]] = {1: [], args.jobs: []}
    runs: dict[int, list[dict[str, object]]] = {1: [], args.jobs: []}
    loads = [os.getloadavg()[0]]
    for round_index in range(args.rounds):
        order = (1, args.jobs) if round_index % 2 == 0 else (args.jobs, 1)
        for jobs in order:
            elapsed, run = verify(args.project, args.gpus, jobs, env)
            walls[jobs].append(elapsed)
            runs[jobs].append(run)
        loads.append(os.getloadavg()[0])
    serial, side = statistics.median(walls[1]), statistics.median(walls[args.jobs])
    result = {
        "project": str(args.project),
        "gpus": args.gpus,
        "cells": runs[1][-1]["cells"],
        "rounds": args.rounds,
        "jobs": args.jobs,
        "serial_wall_s": [round(w, 2) for w in walls[1]],
        "jobs_wall_s": [round(w, 2) for w in walls[args.jobs]],
        "serial_median_s": round(serial, 2),
        "jobs_median_s": round(side, 2),
        "ratio": round(side / serial, 3),
        "serial_gpu_seconds": [r["gpu_seconds"] for r in runs[1]],
        "jobs_gpu_seconds": [r["gpu_seconds"] for r in runs[args.jobs]],
        "jobs_devices": runs[args.jobs][-1]["devices"],
        "verdicts": sorted({v for r in (*runs[1], *runs[args.jobs]) for v in r["verdicts"]}),
        "load_average_1m": [round(x, 2) for x in loads],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "verify_jobs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
