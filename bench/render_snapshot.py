"""Everything plan and render produce for a set of matrices, written to a directory to diff.

A performance change to planning or rendering must not change a byte of what they give. Run this
in the tree before the change and in the tree after it (`python -m` puts the working directory
first on the import path, so each run imports its own tree's imagekit), then compare:

    (cd OLD && python -m bench.render_snapshot /tmp/before)
    (cd NEW && python -m bench.render_snapshot /tmp/after)
    diff -r /tmp/before /tmp/after && echo identical

Per matrix, under ``OUT/<name>/``: ``plan.txt`` (every cell's id, input digest and summary, every
refusal's reason and every warning, in plan order, or the error that refused the whole matrix) and
``dockerfiles/<cell id>`` (each rendered Dockerfile). The matrices: the shipped ``matrix.yaml``,
``examples/*/matrix.yaml``, the bench's generated matrix (1,240 cells, with and without front ends),
the unit tests' variants matrix (every template branch), and two wide matrices that cross every
torch release, CUDA minor, Python, flavour, platform and kind of base imagekit knows, so that most
cells are refused, each by the rule that applies to it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.plan_render import matrix_text
from imagekit.core.errors import InputError
from imagekit.facts.compat import load_compat
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer

REPO = Path(__file__).resolve().parent.parent
CELL = "torch: '2.4.1', python: '3.10'"  # the wide matrices' own rows


def wide_matrix(pypi: bool) -> str:
    """Every release the table knows (and a few it does not) crossed with every CUDA minor, Python,
    flavour, platform and kind of base: mostly refusals, each with its own reason."""
    compat = load_compat()
    torch = [*compat.torch, "2.1.1", "2.1.9", "2.99.0", "2.99", "1.13"]
    cuda = ["cpu", *compat.cuda, "99.1"]  # "12.1.1" and the like: in include (an axis makes twins)
    # under MAX_COMBINATIONS: the two matrices split the Pythons and the bases between them
    pythons, bases = (["3.9", "3.11"], "nv, old, plain") if pypi else (["3.8", "3.11"], "nv, nvcudnn, plain")
    lines = [
        "axes:",
        f"  torch: {json.dumps(torch)}",
        f"  cuda: {json.dumps(cuda)}",
        f"  python: {json.dumps(pythons)}",
        "  flavour: [devel, runtime]",
        "  platform: [linux/amd64, linux/arm64]",
        f"  base: [{bases}]",
        "include:",
        "  - { base: ngc, flavour: devel }",
        "  - { base: ngc, flavour: runtime }",
        '  - { base: ngc, flavour: devel, cuda: "11.8" }',
        '  - { base: ngc, flavour: devel, torch: "2.4.1" }',
        '  - { base: ngc, flavour: devel, python: "3.11" }',
        "  - { base: ngc, flavour: devel, platform: linux/arm64 }",
        *(
            f"  - {{ base: {entry} }}"
            for entry in (
                f"nv2, {CELL}, cuda: '12.1', flavour: devel, torchvision: '0.1.0'",
                f"nv2, {CELL}, cuda: '12.1', flavour: devel, pip_packages: [Torch-Vision]",
                f"nv2, {CELL}, cuda: '12.1', flavour: devel, cuda_full: '12.2.0'",
                f"nv2, {CELL}, cuda: '12.1.0', flavour: devel, cuda_full: '12.1.1'",
                f"nv2, {CELL}, cuda: '12.1.9', flavour: devel",
                "nvcudnn, torch: '2.1.2', cuda: '12.1.1', python: '3.10', flavour: devel",
                f"nv2, {CELL}, cuda: '12.1', flavour: runtime, frontend: jupyter",
                "plain, torch: '2.5.1', cuda: cpu, python: '3.11', flavour: runtime, frontend: ssh",
                "nv2, torch: '2.99.0', cuda: '12.1', python: '3.10', flavour: devel, allow_unknown: true",
                "plain, torch: '2.99.1', cuda: '99.1', python: '3.11', flavour: runtime, allow_unknown: true",
            )
        ),
        "defaults:",
        '  env: { OMP_NUM_THREADS: "1" }',
        "  pip_packages: [pillow]",
        "  apt_packages: [git]",
        "  build_args: { SITE: acme }",
        "bases:",
        '  nv: { image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu22.04", os: ubuntu22.04 }',
        '  nv2: { image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu22.04", os: ubuntu22.04 }',
        '  nvcudnn: { image: "nvidia/cuda:{cuda_full}-{cudnn_tag}{flavour}-ubuntu22.04", os: ubuntu22.04,'
        " flavours: [devel] }",
        '  plain: { image: "example/debian-python:bookworm", os: debian12, python: "3.11", cuda: false }',
        '  old: { image: "example/focal:{arch}", os: ubuntu20.04, cuda: false }',
        "  ngc: { stack: ngc-pytorch-23.10 }",
        "publish:",
        '  tags: {readable: "{base}-{torch}-{stack}-{python}-{flavour}-{os}"}',
        "sources:",
        '  apt: { mirror: "https://mirror.example.org/ubuntu" }',
    ]
    if pypi:
        lines += ["  pip:", "    torch_index_url: null"]
    return "\n".join(lines) + "\n"


def variants_matrix(root: Path) -> Path:
    from testbed.sample_projects import VARIANTS

    wheel = root / "wheelhouse" / "numpy-1.26.4-cp311-none-any.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(b"not really a wheel")
    path = root / "variants.yaml"
    path.write_text(VARIANTS, encoding="utf-8")
    return path


def snapshot(matrix: Path, out: Path) -> None:
    out.mkdir(parents=True)
    lines: list[str] = []
    try:
        plan = load_plan(matrix)
    except InputError as exc:
        (out / "plan.txt").write_text(f"refused: {exc.message}\n", encoding="utf-8")
        return
    renderer = Renderer(plan)
    dockerfiles = out / "dockerfiles"
    dockerfiles.mkdir()
    for cell in plan.cells:
        try:
            rendered = renderer.render(cell)
            digest = rendered.input_digest
            (dockerfiles / cell.id).write_text(rendered.dockerfile, encoding="utf-8")
        except InputError as exc:
            digest = f"error: {exc.message}"
        lines.append(f"cell {cell.id} {digest} {json.dumps(cell.summary(), sort_keys=True)}")
    lines += [f"refused {refusal.origin} {refusal.describe()}" for refusal in plan.refused]
    lines += [f"warning {warning}" for warning in plan.warnings]
    (out / "plan.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        generated = {
            "bench": matrix_text(1250),
            "bench-frontends": matrix_text(1250, frontends=True),
            "wide-index": wide_matrix(pypi=False),
            "wide-pypi": wide_matrix(pypi=True),
        }
        matrices = {"shipped": REPO / "matrix.yaml"}
        matrices |= {f"example-{p.parent.name}": p for p in sorted(REPO.glob("examples/*/matrix.yaml"))}
        for name, text in generated.items():
            (root / name).mkdir()
            matrices[name] = root / name / "matrix.yaml"
            matrices[name].write_text(text, encoding="utf-8")
        matrices["variants"] = variants_matrix(root / "variants")
        for name, path in matrices.items():
            snapshot(path, args.out / name)
            print(name, (args.out / name / "plan.txt").read_text(encoding="utf-8").count("\n"), "lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
