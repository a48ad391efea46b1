"""bench/plan_render.py run as BENCHMARKS.md says, on a small matrix: its generated matrix plans, renders
and writes (slow: a process that plans, renders and writes four matrices, seconds on a busy disk).
Tests never import bench; they run it, as a user does."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_plan_render_bench_measures_its_generated_matrix() -> None:
    # Its matrix's torch 2.1-2.5 cells were all refused once critical advisories were gated, and
    # the bench stopped on a traceback with nothing failing.
    done = subprocess.run(
        [sys.executable, "-m", "bench.plan_render", "--cells", "160", "--repeat", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts = [int(line.split()[0]) for line in done.stdout.splitlines()[1:5]]
    assert counts == [20, 40, 80, 160] and "linearity:" in done.stdout
