"""Harness overhead: `imagekit verify IMAGE` vs `docker run --rm IMAGE python3 <script>`.

    python -m bench.verify_overhead [--image REF] [--rounds N]

Both run the same in-image check script with the same expectations on the same image, with no
GPU (`--gpus none`; `docker run --network none`), alternated within each round, timed end to end
as a user runs them (process start included). The default image is the offline demo's torch cell
(`bash scripts/demo.sh` builds it), so the script really imports torch and runs its CPU GEMM.
Prints the medians and their ratio; the target is <= 1.15.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import docker

from imagekit.render.contract import CHECK_SCRIPT_PATH
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import check_arguments

DOCKER = "/usr/bin/docker"
DEFAULT_IMAGE = "imagekit-demo/pytorch:2.13.0-cpu-runtime-debian12"


def timed(command: list[str], ok: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"{command[:3]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    labels = docker.APIClient(version="auto").inspect_image(args.image)["Config"]["Labels"] or {}
    expectations = check_arguments(labels, GpuRequest.parse("none"))
    # the environment the harness gives a no-GPU check, so both runs do the same work
    plain = [DOCKER, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=void", args.image,
             "python3", CHECK_SCRIPT_PATH, *expectations]  # fmt: skip
    ours = [sys.executable, "-m", "imagekit", "verify", args.image, "--gpus", "none"]
    timed(plain)  # warm the page cache for both
    timed(ours)
    plain_s, ours_s = [], []
    for round_index in range(args.rounds):
        pair = [(ours, ours_s), (plain, plain_s)]
        for command, into in pair if round_index % 2 == 0 else reversed(pair):
            into.append(timed(command))
    result = {
        "image": args.image,
        "rounds": args.rounds,
        "docker_run_median_s": round(statistics.median(plain_s), 3),
        "imagekit_verify_median_s": round(statistics.median(ours_s), 3),
        "ratio": round(statistics.median(ours_s) / statistics.median(plain_s), 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
