"""Context bytes per cell against its wheel closure, with a wheelhouse holding two torch releases.

    python -m bench.context_bytes [--out bench/results/context_bytes.json]

The wheelhouse (bench/results/wheelhouse-two-torch/, filled once) holds:

* torch 2.13.0+cpu (PyTorch's CPU wheel for cp311 manylinux_2_28_x86_64, 192 MB) with its
  dependencies and NumPy 2.4.6: examples/offline/wheelhouse (examples/offline/setup.sh);
* torch 2.11.0 (PyPI's cp311 manylinux_2_28_x86_64 wheel, a CUDA build, 530 MB), fetched with
  `pip download --no-deps`: a second torch release in the same wheelhouse, as a site that keeps
  several releases there has it (its CUDA dependencies, ~4 GB more, are left out, so no cell
  here installs it: it is the weight every cell used to carry);
* NumPy 1.26.4 (cp311 manylinux_2_17), for a cell capped at NumPy 1.

Cells (debian12, Python 3.11, torch 2.13.0 CPU, no index): runtime with `numpy`, devel with
`numpy<2`. For each, the
context imagekit sends (the exact tar the builder streams: Dockerfile, check script, wheels) is
measured against the bytes of the wheels pip's dry-run report names (the closure), and against
the context the same cell had before (the whole wheelhouse). Goal: context <= 1.05 x closure.
Nothing is built: the context is what is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from imagekit.plan.matrix import load_plan
from imagekit.render.context import make_tar
from imagekit.render.dockerfile import Renderer
from imagekit.render.wheels import closure_bytes

REPO = Path(__file__).resolve().parent.parent
OFFLINE = REPO / "examples" / "offline" / "wheelhouse"
HOUSE = REPO / "bench" / "results" / "wheelhouse-two-torch"
EXTRA = ("torch==2.11.0", "numpy==1.26.4")

MATRIX = """\
version: 1
axes: {torch: ["2.13.0"], cuda: [cpu], base: [deb], flavour: [runtime, devel]}
allow_unknown: true
defaults: {torchvision: none, torchaudio: none, pip_packages: [numpy]}
include:
  - {flavour: devel, pip_packages: ["numpy<2"]}
bases:
  deb: {image: "imagekit-local/debian-python:bookworm", os: debian12, python: "3.11", cuda: false}
sources:
  pip: {no_index: true, find_links: [wheelhouse-two-torch], torch_index_url: null}
"""


def fill_wheelhouse() -> None:
    HOUSE.mkdir(parents=True, exist_ok=True)
    if not any(OFFLINE.glob("torch-2.13.0*.whl")):
        raise SystemExit("no torch 2.13.0 wheel: run examples/offline/setup.sh first")
    for wheel in OFFLINE.glob("*.whl"):
        if not (HOUSE / wheel.name).exists():
            shutil.copy2(wheel, HOUSE / wheel.name)
    missing = [r for r in EXTRA if not list(HOUSE.glob(r.replace("==", "-") + "-*.whl"))]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
             "--implementation", "cp", "--dest", str(HOUSE), *missing],
            check=True,
        )  # fmt: skip


def tar_bytes(rendered_dockerfile: str, files: list[tuple[str, Path]]) -> int:
    with make_tar(("Dockerfile", rendered_dockerfile), files) as tar:
        return tar.seek(0, 2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "context_bytes.json")
    args = parser.parse_args()
    fill_wheelhouse()
    house_bytes = sum(p.stat().st_size for p in HOUSE.glob("*.whl"))
    torches = sorted(p.name for p in HOUSE.glob("torch-*.whl"))
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-") as cache:
        root = HOUSE.parent  # the matrix sits beside the wheelhouse: find_links stays inside
        (root / "context-bytes.yaml").write_text(MATRIX)
        os.environ["IMAGEKIT_CACHE_DIR"] = cache  # cold: nothing resolved before
        rows = []
        for attempt in ("cold", "cached"):
            started = time.monotonic()
            plan = load_plan(root / "context-bytes.yaml")
            renderer = Renderer(plan)
            rendered = renderer.render_all()
            seconds = time.monotonic() - started
            if attempt == "cold":
                cold_s = seconds
                continue
            cached_s = seconds
            whole = renderer.wheelhouse_files()
            for cell in rendered:
                wheels = [path for name, path in cell.context_files if name.startswith("wheelhouse/")]
                closure = closure_bytes(wheels)
                context = tar_bytes(cell.dockerfile, list(cell.context_files))
                before = tar_bytes(cell.dockerfile, [*cell.context_files[:1], *whole])
                rows.append(
                    {
                        "cell": cell.cell.id,
                        "requirements": [
                            r for r in cell.dockerfile.split() if r.startswith(("torch==", "numpy"))
                        ],
                        "wheels": sorted(p.name for p in wheels),
                        "closure_bytes": closure,
                        "context_bytes": context,
                        "ratio": round(context / closure, 4),
                        "before_context_bytes": before,
                    }
                )
    result = {
        "wheelhouse_bytes": house_bytes,
        "wheelhouse_files": len(list(HOUSE.glob("*.whl"))),
        "torch_releases": torches,
        "resolve_cold_s": round(cold_s, 2),
        "resolve_cached_s": round(cached_s, 2),
        "cells": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    mb = 1e6
    count = result["wheelhouse_files"]
    print(f"wheelhouse: {house_bytes / mb:.1f} MB in {count} files; torch: {', '.join(torches)}")
    print(f"plan + render with closures: {cold_s:.2f} s cold (pip runs), {cached_s:.2f} s cached")
    for row in rows:
        print(
            f"{row['cell']}: closure {row['closure_bytes'] / mb:.1f} MB ({len(row['wheels'])} wheels),"
            f" context {row['context_bytes'] / mb:.1f} MB, ratio {row['ratio']:.4f};"
            f" before: {row['before_context_bytes'] / mb:.1f} MB"
        )


if __name__ == "__main__":
    main()
