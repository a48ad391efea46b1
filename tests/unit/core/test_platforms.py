"""The platform axis at plan time: ids, shared published names, refusals, local bases, identity."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.core import platforms
from imagekit.core.errors import InputError
from imagekit.plan.cells import FrontendCell, WheelCell
from imagekit.plan.matrix import load_plan
from testbed.waivers import WAIVE_TORCH_2_5

TWO_PLATFORMS = """
version: 1
axes:
  torch: ["2.11.0"]
  cuda: ["13.0"]
  base: [cuda]
  flavour: [runtime]
  platform: [linux/amd64, linux/arm64]
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu24.04"
    os: ubuntu24.04
"""

LOCAL = """
version: 1
axes:
  torch: ["2.10.0"]
  cuda: [cpu]
  base: [deb]
  flavour: [runtime]
  platform: [linux/amd64, linux/arm64]
  frontend: [none, jupyter]
bases:
  deb:
    image: "site/debian-python:bookworm-{arch}"
    os: debian12
    python: "3.11"
    cuda: false
    build: {context: base, args: {FROM_IMAGE: "imagekit-local/debian-python:bookworm-{arch}"}}
sources:
  pip: {torch_index_url: "https://download.pytorch.org/whl/{variant}"}
"""


@pytest.fixture
def matrix(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        (tmp_path / "base").mkdir(exist_ok=True)
        (tmp_path / "base" / "Dockerfile").write_text("ARG FROM_IMAGE\nFROM ${FROM_IMAGE}\n")
        path = tmp_path / "matrix.yaml"
        path.write_text(text)
        return path

    return write


def test_a_matrix_without_platforms_keeps_its_ids_tags_and_platform(matrix: Callable[[str], Path]) -> None:
    plan = load_plan(matrix(TWO_PLATFORMS.replace("  platform: [linux/amd64, linux/arm64]\n", "")))
    (cell,) = plan.cells
    assert cell.id == "cuda-torch2.11.0-cuda13.0-py3.12-runtime"
    assert cell.platform == platforms.DEFAULT
    assert cell.image_tag == cell.readable_tag


def test_the_platforms_of_a_cell_share_its_published_name_and_nothing_local(
    matrix: Callable[[str], Path],
) -> None:
    plan = load_plan(matrix(TWO_PLATFORMS))
    amd64, arm64 = plan.cells
    assert (amd64.id, arm64.id) == (
        "cuda-torch2.11.0-cuda13.0-py3.12-runtime",
        "cuda-torch2.11.0-cuda13.0-py3.12-runtime-arm64",
    )
    assert (amd64.platform, arm64.platform) == ("linux/amd64", "linux/arm64")
    assert amd64.readable_tag == arm64.readable_tag  # one index
    assert (amd64.image_tag, arm64.image_tag) == (amd64.readable_tag, amd64.readable_tag + "-arm64")
    assert amd64.base_image == arm64.base_image  # nvidia/cuda: one tag serves both platforms
    assert plan.groups() == {amd64.readable_tag: (amd64, arm64)}


def test_an_aarch64_combination_without_a_wheel_is_refused_with_its_reason(
    matrix: Callable[[str], Path],
) -> None:
    text = (
        TWO_PLATFORMS.replace('torch: ["2.11.0"]', 'torch: ["2.11.0", "2.5.1"]').replace(
            'cuda: ["13.0"]', 'cuda: ["13.0", "12.1"]'
        )
        + WAIVE_TORCH_2_5
    )
    plan = load_plan(matrix(text))
    reasons = {r.describe() for r in plan.refused}
    assert any(
        "torch=2.5.1, cuda=12.1" in r and "platform=linux/arm64" in r and "its aarch64 wheels: CPU only" in r
        for r in reasons
    ), reasons
    # the same combination exists for amd64
    assert "cuda-torch2.5.1-cuda12.1-py3.12-runtime" in {c.id for c in plan.cells}


def test_pypi_serves_aarch64_its_own_build(matrix: Callable[[str], Path]) -> None:
    # torch 2.10.0 from PyPI: cu128 on x86_64, CPU only on aarch64 (its CUDA requirements are gated)
    text = (
        TWO_PLATFORMS.replace('torch: ["2.11.0"]', 'torch: ["2.10.0"]').replace(
            'cuda: ["13.0"]', 'cuda: ["12.8"]'
        )
        + "sources:\n  pip: {torch_index_url: null}\n"
    )
    plan = load_plan(matrix(text))
    assert [c.platform for c in plan.cells] == ["linux/amd64"]
    (refusal,) = plan.refused
    assert "PyPI, whose aarch64 torch 2.10 is the cpu build, not cu128" in refusal.reason


def test_a_local_base_is_built_per_platform_under_its_arch_tag(matrix: Callable[[str], Path]) -> None:
    plan = load_plan(matrix(LOCAL))
    assert [(b.id, b.image, b.args, b.platform) for b in plan.local_bases] == [
        (
            "deb",
            "site/debian-python:bookworm-amd64",
            (("FROM_IMAGE", "imagekit-local/debian-python:bookworm-amd64"),),
            "linux/amd64",
        ),
        (
            "deb-arm64",
            "site/debian-python:bookworm-arm64",
            (("FROM_IMAGE", "imagekit-local/debian-python:bookworm-arm64"),),
            "linux/arm64",
        ),
    ]
    cells = {c.id: c for c in plan.cells}
    arm = cells["deb-torch2.10.0-cpu-py3.11-runtime-arm64"]
    assert (
        isinstance(arm, WheelCell) and arm.local_base is not None and arm.local_base.platform == "linux/arm64"
    )
    front = cells["deb-torch2.10.0-cpu-py3.11-runtime-jupyter-arm64"]
    # a front end is its parent's platform, built FROM the parent's own per-platform tag
    assert isinstance(front, FrontendCell) and front.platform == "linux/arm64"
    assert front.base_image.endswith(":" + arm.image_tag)
    assert front.readable_tag == cells["deb-torch2.10.0-cpu-py3.11-runtime-jupyter"].readable_tag


def test_a_local_base_for_two_platforms_needs_arch_in_its_name(matrix: Callable[[str], Path]) -> None:
    with pytest.raises(
        InputError, match=r"bases\.deb\.image: .* built here for two platforms.*put \{arch\} in it"
    ):
        load_plan(
            matrix(LOCAL.replace('"site/debian-python:bookworm-{arch}"', '"site/debian-python:bookworm"'))
        )


def test_cells_sharing_a_published_name_must_be_one_build(matrix: Callable[[str], Path]) -> None:
    # two Pythons, a readable tag without {python}: amd64 3.12 and arm64 3.11 would be one index
    text = TWO_PLATFORMS.replace("  platform: [linux/amd64, linux/arm64]\n", "") + (
        "include:\n  - {torch: '2.11.0', cuda: '13.0', base: cuda, flavour: runtime,"
        " platform: linux/arm64, python: '3.11'}\n"
    )
    text = text.replace("os: ubuntu24.04", "os: ubuntu24.04\n    python: null").replace(
        "    python: null\n", ""
    )
    text = text.replace('ubuntu24.04"\n    os: ubuntu24.04', 'ubuntu22.04"\n    os: ubuntu22.04')
    text = text.replace("[runtime]", "[runtime]\n  python: ['3.10']")
    with pytest.raises(InputError, match=r"would publish one index under .* but differ in python"):
        load_plan(matrix(text))


def test_identity_gains_the_platform_only_off_the_default(matrix: Callable[[str], Path]) -> None:
    from imagekit.render.dockerfile import Renderer  # render is not a plan-stage import

    plan = load_plan(matrix(TWO_PLATFORMS))
    amd64, arm64 = plan.cells
    renderer = Renderer(plan)
    one, other = renderer.render(amd64), renderer.render(arm64)
    # the Dockerfile differs only in the header naming the cell, in the GPUs its wheels serve
    # (2.11.0's cu130 wheels, as read in their images: no sm_75/sm_86 on aarch64, sm_110 there)
    # and in the machine whose CUDA wheels the table lacks: the engine builds for the platform
    x86, arm = '"7.5;8.0;8.6;9.0;10.0;12.0"', '"8.0;9.0;10.0;11.0;12.0"'
    assert f"imagekit.cuda-archs={x86}" in one.dockerfile and f"imagekit.cuda-archs={arm}" in other.dockerfile
    as_amd64 = (
        other.dockerfile.replace(arm64.id, amd64.id).replace(arm, x86).replace(" on aarch64 ", " on x86_64 ")
    )
    assert one.dockerfile.replace(arm64.id, amd64.id) == as_amd64
    assert one.input_digest != other.input_digest
    alone = load_plan(matrix(TWO_PLATFORMS.replace("  platform: [linux/amd64, linux/arm64]\n", "")))
    assert Renderer(alone).render(alone.cells[0]).input_digest == one.input_digest


def test_an_aarch64_cu126_devel_cell_builds_extensions_for_grace_hoppers_only() -> None:
    # PyTorch's cu126 aarch64 wheels carry sm_80/sm_90 kernels only (GH200, not GB200)
    from imagekit.render.dockerfile import Renderer

    plan = load_plan(Path(__file__).resolve().parents[3] / "matrix.yaml")
    rendered = {c.id: c for c in plan.cells}
    arm = rendered["cuda-ubuntu22.04-torch2.14.1-cuda12.6-py3.10-devel-arm64"]
    amd = rendered["cuda-ubuntu22.04-torch2.14.1-cuda12.6-py3.10-devel"]
    renderer = Renderer(plan)
    assert "TORCH_CUDA_ARCH_LIST='8.0;9.0'" in renderer.render(arm).dockerfile
    assert "TORCH_CUDA_ARCH_LIST='5.0;6.0;7.0;7.5;8.0;8.6;9.0'" in renderer.render(amd).dockerfile
