"""`nvcc: wheels`: a devel cell's compiler from NVIDIA's wheels at torch's own CUDA pins, on a base
with no toolkit, so each CUDA library is in the image once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagekit.plan.cells import WheelCell
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import BuildSettings
from imagekit.render.dockerfile import Renderer
from imagekit.render.layers import wheel_layers
from imagekit.render.run_options import (
    COMPILER_WHEELS_CONTEXT,
    CUDA_WHEELS_CONTEXT,
    WHEELHOUSE_CONTEXT,
    StepOptions,
)
from imagekit.render.wheel_toolkit import COMPILER_REQUIREMENT, wheel_toolkit
from imagekit.render.wheels import slice_closure
from testbed.waivers import WAIVE_TORCH_2_5

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
        assert COMPILER_REQUIREMENT not in text and "CUDA_HOME" not in text


def test_cuda_12_is_refused_with_the_reason(write_matrix: Callable[[str], Path]) -> None:
    matrix = MATRIX.replace('"2.15.0"', '"2.5.1"').replace('"13.2"', '"12.4"') + WAIVE_TORCH_2_5
    plan = load_plan(write_matrix(matrix))
    assert {c.flavour for c in plan.cells} == {"runtime"}
    reasons = {r.reason for r in plan.refused}
    assert any("hold ptxas and libnvvm but no nvcc" in r for r in reasons), reasons


def test_the_compiler_wheels_are_a_slice_of_their_own(write_matrix: Callable[[str], Path]) -> None:
    """A devel cell's CUDA slice stays its runtime twin's (one shared layer); the compiler goes above
    it, and nvidia-cuda-runtime, which torch's cudart extra installs too, stays in the CUDA slice."""
    names = (
        "nvidia_cublas-13.4.1.3-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia_cuda_runtime-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "cuda_toolkit-13.2.2-py2.py3-none-any.whl",
        "nvidia_cuda_nvcc-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia_cuda_crt-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia_nvvm-13.2.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        "nvidia_cuda_cccl-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    )
    devel = slice_closure([(f"wheelhouse/{n}", Path(n)) for n in names])
    runtime = slice_closure([(f"wheelhouse/{n}", Path(n)) for n in names if "nvcc" not in n and "crt" not in n
                             and "nvvm" not in n and "cccl" not in n])  # fmt: skip
    assert devel.cuda == runtime.cuda and runtime.compiler == ()
    assert devel.pins(devel.compiler) == (
        "nvidia-cuda-cccl==13.2.86",
        "nvidia-cuda-crt==13.2.86",
        "nvidia-cuda-nvcc==13.2.86",
        "nvidia-nvvm==13.2.86",
    )
    layers = wheel_layers(
        devel, StepOptions.of(load_plan(write_matrix(MATRIX)).matrix, BuildSettings(builder="buildkit"))
    )
    assert [layer.context for layer in layers] == [
        f"{CUDA_WHEELS_CONTEXT}-cuda-toolkit", f"{CUDA_WHEELS_CONTEXT}-nvidia-cublas",
        f"{CUDA_WHEELS_CONTEXT}-nvidia-cuda-runtime", COMPILER_WHEELS_CONTEXT, WHEELHOUSE_CONTEXT,
    ]  # fmt: skip
