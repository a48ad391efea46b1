"""`nvcc: wheels`: a devel cell's compiler from NVIDIA's wheels at torch's own CUDA pins, on a base
with no toolkit, so each CUDA library is in the image once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagekit.plan.cells import WheelCell
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from imagekit.render.wheel_toolkit import COMPILER_REQUIREMENT, wheel_toolkit

MATRIX = """
axes:
  torch: ["2.15.0"]
  cuda: ["13.2"]
  base: [plain, nvidia]
  flavour: [devel, runtime]
defaults: {torchvision: none, torchaudio: none}
bases:
  plain: {image: "debian:bookworm", os: debian12, python: "3.11", cuda: false, nvcc: wheels}
  nvidia: {image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu24.04", os: ubuntu24.04, nvcc: wheels}
"""
HOME = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"


def test_the_toolkit_is_the_cu13_prefix_of_the_venv() -> None:
    toolkit = wheel_toolkit("3.11", "13.2")
    assert toolkit.home == HOME
    assert toolkit.cudart_link == ("ln", "-sf", "libcudart.so.13", f"{HOME}/lib/libcudart.so")


def test_a_devel_cell_gets_the_compiler_wheels_and_its_cuda_home(write_matrix: Callable[[str], Path]) -> None:
    plan = load_plan(write_matrix(MATRIX))
    cells = {(c.base, c.flavour): c for c in plan.cells}
    assert set(cells) == {
        ("plain", "devel"),
        ("plain", "runtime"),
        ("nvidia", "devel"),
        ("nvidia", "runtime"),
    }
    renderer = Renderer(plan)
    devel = renderer.dockerfile(cells["plain", "devel"])
    assert f"ninja '{COMPILER_REQUIREMENT}'" in devel  # resolved under torch's pins: its version
    assert f"&& ln -sf libcudart.so.13 {HOME}/lib/libcudart.so\n" in devel
    assert f"ENV CUDA_HOME={HOME} \\\n    PATH={HOME}/bin:$PATH\n" in devel
    # the ENV comes before the extension modules are built with it
    assert devel.rindex("ENV CUDA_HOME=") < devel.index("check.py build-extensions")
    # on nvidia/cuda the devel cell starts from the toolkit-less `base` image, as runtime cells do
    on_nvidia = renderer.dockerfile(cells["nvidia", "devel"])
    assert "FROM nvidia/cuda:13.2.1-base-ubuntu24.04\n" in on_nvidia
    assert "/opt/venv/lib/python3.12/site-packages/nvidia/cu13/bin:$PATH" in on_nvidia
    for flavour_runtime in (cells["plain", "runtime"], cells["nvidia", "runtime"]):
        assert isinstance(flavour_runtime, WheelCell) and not flavour_runtime.nvcc_from_wheels
        text = renderer.dockerfile(flavour_runtime)
        assert "cuda-toolkit" not in text and "CUDA_HOME" not in text


def test_cuda_12_is_refused_with_the_reason(write_matrix: Callable[[str], Path]) -> None:
    plan = load_plan(write_matrix(MATRIX.replace('"2.15.0"', '"2.5.1"').replace('"13.2"', '"12.4"')))
    assert {c.flavour for c in plan.cells} == {"runtime"}
    reasons = {r.reason for r in plan.refused}
    assert any("hold ptxas and libnvvm but no nvcc" in r for r in reasons), reasons
