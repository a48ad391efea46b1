"""Plan + render of a large matrix: target under 2 s for 10,000 cells, linear in cells.

Run: python -m bench.plan_render [--cells 10000] [--repeat 3] [--frontends]
(--frontends adds the axis `frontend: [none, jupyter, ssh]`: three cells per combination, two of
them front ends built FROM the third.)
Prints one line per size: cells, plan s, render s (Dockerfiles + input digests), write s
(`render`'s atomic writes to a fresh directory), floor s (the same files written with plain
mkdir + write_text: what any tool pays on this disk), microseconds per cell for plan + render.
Figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from imagekit.render.drift import expected_files, write_rendered
from testbed.waivers import WAIVE_OLD_TORCH

TORCH = ["2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1"]
CELLS_PER_BASE = len(TORCH) * 2 * 2  # x cuda (11.8, 12.1) x flavour (devel, runtime)


def matrix_text(cells: int, frontends: bool = False) -> str:
    per_base = CELLS_PER_BASE * (3 if frontends else 1)
    bases = max(1, cells // per_base)
    names = [f"site{i:04d}" for i in range(bases)]
    lines = [
        "axes:",
        f"  torch: {TORCH}",
        '  cuda: ["11.8", "12.1"]',
        "  flavour: [devel, runtime]",
        *(["  frontend: [none, jupyter, ssh]"] if frontends else []),
        f"  base: [{', '.join(names)}]",
        "publish:",
        '  tags: {readable: "{base}-{torch}-{stack}-{flavour}-{os}"}',
        "bases:",
    ]
    for name in names:
        image = f"registry.{name}.example/cuda:{{cuda_full}}-{{cudnn_tag}}{{flavour}}-ubuntu22.04"
        lines.append(f'  {name}: {{image: "{image}", os: ubuntu22.04}}')
    # Torch 2.1-2.5 carry critical advisories that refuse every cell unwaived; what is measured is
    # planning and rendering, not the advisory gate.
    return "\n".join(lines) + "\n" + WAIVE_OLD_TORCH


def measure(cells: int, frontends: bool) -> tuple[int, float, float, float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "matrix.yaml"
        path.write_text(matrix_text(cells, frontends), encoding="utf-8")
        started = time.perf_counter()
        plan = load_plan(path)
        planned = time.perf_counter()
        renderer = Renderer(plan)
        digests = [r.input_digest for r in renderer.render_all()]
        rendered = time.perf_counter()
        out = Path(scratch) / "out"
        expected = expected_files(plan, renderer, out)
        begun = time.perf_counter()
        write_rendered(expected, out)
        written = time.perf_counter()
        floor_dir = Path(scratch) / "floor"
        floor_started = time.perf_counter()
        for path, text in expected.items():
            target = floor_dir / path.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        floor = time.perf_counter() - floor_started
        assert len(digests) == len(plan.cells)
        return len(plan.cells), planned - started, rendered - planned, written - begun, floor


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--frontends", action="store_true")
    args = parser.parse_args()
    sizes = [args.cells // 8, args.cells // 4, args.cells // 2, args.cells]
    print(f"{'cells':>6} {'plan_s':>7} {'render_s':>8} {'write_s':>7} {'floor_s':>7} {'us/cell':>7}")
    per_cell = []
    last_write_ratio = 0.0
    for size in sizes:
        runs = [measure(size, args.frontends) for _ in range(args.repeat)]
        count = runs[0][0]
        plan_s, render_s, write_s, floor_s = (statistics.median(r[i] for r in runs) for i in (1, 2, 3, 4))
        per_cell.append((plan_s + render_s) / count * 1e6)
        print(f"{count:>6} {plan_s:7.3f} {render_s:8.3f} {write_s:7.3f} {floor_s:7.3f} {per_cell[-1]:7.1f}")
        last_write_ratio = write_s / floor_s
    linearity = per_cell[-1] / per_cell[0]
    print(f"linearity: us/cell at {sizes[-1]} / at {sizes[0]} = {linearity:.2f} (1.00 is linear)")
    print(f"write vs plain-write floor at {sizes[-1]}: {last_write_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
