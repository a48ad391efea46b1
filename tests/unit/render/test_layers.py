"""The BuildKit builder installs a resolved closure in layers (issue 36, "Share") and declares
SOURCE_DATE_EPOCH in the stage ("Reproducible"); the classic builder's Dockerfiles are unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.facts.advisories import load_advisories
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import BuildSettings
from imagekit.render.dockerfile import Renderer
from imagekit.render.wheels import Request, WheelResolver, slice_closure, wheel_pin
from testbed.sample_projects import wheel
from testbed.waivers import WAIVE_OLD_TORCH

MATRIX = (
    """
version: 1
axes: {torch: ["2.1.1", "2.1.2"], cuda: [cpu], base: [deb], flavour: [runtime]}
defaults: {torchvision: none, torchaudio: none, apt_packages: [curl], build_args: {CELL_ARG: x}}
bases:
  deb: {image: "imagekit-local/debian-python:bookworm", os: debian12, python: "3.11", cuda: false}
sources:
  pip: {no_index: true, find_links: [wheelhouse], torch_index_url: null}
"""
    + WAIVE_OLD_TORCH
)


def test_a_closure_is_sliced_by_project_name() -> None:
    files = [
        (f"wheelhouse/{name}", Path(name))
        for name in (
            "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
            "nvidia_cublas_cu12-12.1.3.1-py3-none-manylinux1_x86_64.whl",
            "cuda_bindings-13.0.1-cp311-cp311-manylinux_2_28_x86_64.whl",
            "nvidia_cublas-13.0.0.19-py3-none-manylinux_2_27_x86_64.whl",
            "triton-2.1.0-0-cp311-cp311-manylinux2014_x86_64.whl",
            "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl",
            "torchvision-0.16.2-cp311-cp311-manylinux1_x86_64.whl",
            "pip-26.2.1-py3-none-any.whl",
            "setuptools-81.0.0-py3-none-any.whl",
        )
    ]
    slices = slice_closure(files)
    assert slices.pins(slices.cuda) == (
        "cuda-bindings==13.0.1",
        "nvidia-cublas-cu12==12.1.3.1",
        "nvidia-cublas==13.0.0.19",
    )
    assert slices.pins(slices.deps) == ("numpy==1.26.4", "triton==2.1.0")
    assert slices.pins(slices.top) == ("torch==2.13.0+cpu", "torchvision==0.16.2")
    # the venv's own tools: installed first, right after the venv is made
    assert slices.pins(slices.tools) == ("pip==26.2.1", "setuptools==81.0.0")
    assert all("/" not in name for name, _ in slices.tools + slices.cuda + slices.deps + slices.top)
    with pytest.raises(InputError, match="not a wheel file name"):
        wheel_pin("wheelhouse/README.txt")


def _renderers(write_matrix: Callable[[str], Path]) -> tuple[Renderer, Renderer]:
    path = write_matrix(MATRIX)
    house = path.parent / "wheelhouse"
    house.mkdir()
    wheel(house, "nvidia_fake_cu12", "1.0")
    wheel(house, "numpy", "1.0")  # torch 2.1 asks numpy<2 where torchvision brings none
    for tool, version in load_advisories().venv_tools.items():  # every venv installs these first
        wheel(house, tool, version)
    for release in ("2.1.1", "2.1.2"):
        wheel(house, "torch", release, ("nvidia-fake-cu12==1.0",))
    plan = load_plan(path)
    return Renderer(plan), Renderer(plan, build=BuildSettings(builder="buildkit"))


def test_buildkit_installs_the_closure_in_shared_layers(write_matrix: Callable[[str], Path]) -> None:
    classic, buildkit = _renderers(write_matrix)
    cells = [buildkit.render(cell) for cell in buildkit.plan.cells]
    for rendered in cells:
        text = rendered.dockerfile
        names = [name for name, _ in rendered.context_files]
        # each CUDA wheel in a directory (and a step) of its own, named by its project alone
        assert "wheelhouse-cuda-nvidia-fake-cu12/nvidia_fake_cu12-1.0-py3-none-any.whl" in names
        assert f"wheelhouse-venv/pip-{load_advisories().venv_tools['pip']}-py3-none-any.whl" in names
        assert "wheelhouse-deps/numpy-1.0-py3-none-any.whl" in names
        assert any(name.startswith("wheelhouse/torch-") for name in names)
        # the header names every directory of the context
        listed = "imagekit-check.py, wheelhouse-venv/, wheelhouse-cuda-nvidia-fake-cu12/, wheelhouse-deps/,"
        listed += " wheelhouse/"
        assert f"{listed} (`imagekit build`" in text
        tools = text.index("source=wheelhouse-venv,target=/tmp/wheelhouse-venv")
        assert text.index("-m venv /opt/venv\n") < tools < text.index("source=wheelhouse-cuda")
        cuda = text.index(
            "source=wheelhouse-cuda-nvidia-fake-cu12,target=/tmp/wheelhouse-cuda-nvidia-fake-cu12"
        )
        deps = text.index("source=wheelhouse-deps,target=/tmp/wheelhouse-deps")
        top = text.index("source=wheelhouse,target=/tmp/wheelhouse")
        assert cuda < deps < top < text.index("pip check")
        assert "--no-deps --find-links /tmp/wheelhouse-cuda-nvidia-fake-cu12 --no-compile" in text
        assert "nvidia-fake-cu12==1.0" in text and "/tmp/wheelhouse-cuda/nvidia" not in text  # by name
        # the epoch before every RUN; the cell's own arguments only after the shared installs
        assert text.index("ARG SOURCE_DATE_EPOCH\n") < text.index("\nRUN ")
        assert text.index("pip check") < text.index("ARG CELL_ARG\n")
        assert "&& rm -rf /var/log/dpkg.log /var/log/alternatives.log /var/log/apt/*" in text
    # the shared steps are the same text in both cells: the same cache keys
    first, second = (r.dockerfile.split("pip check")[0].rsplit("RUN ", 1)[0] for r in cells)
    assert first.split("# Cell ")[1].split("\n", 1)[1] == second.split("# Cell ")[1].split("\n", 1)[1]
    for cell in classic.plan.cells:
        text = classic.render(cell).dockerfile
        assert "wheelhouse-cuda" not in text and "SOURCE_DATE_EPOCH" not in text
        assert "/var/log/dpkg.log" not in text and "--no-deps" not in text


def test_a_wheelhouse_pip_cannot_satisfy_is_asked_once_per_cell(
    write_matrix: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheelhouse not filled yet (a checkout) renders a BuildKit Dockerfile with one install step;
    pip's failed answer is kept, so the Dockerfile and the context do not each ask again."""
    path = write_matrix(MATRIX)
    (path.parent / "wheelhouse").mkdir()
    renderer = Renderer(load_plan(path), build=BuildSettings(builder="buildkit"))
    asked: list[str] = []
    resolve = WheelResolver._resolve

    def counted(self: WheelResolver, request: Request) -> tuple[Path, ...]:
        asked.append(request.requirements[0])
        return resolve(self, request)

    monkeypatch.setattr(WheelResolver, "_resolve", counted)
    cell = renderer.plan.cells[0]
    for _ in range(3):
        assert "pip check" not in renderer.dockerfile(cell)  # one step: nothing to slice
    with pytest.raises(InputError, match=cell.id):
        renderer.render(cell)  # the context cannot be made: named, as before
    assert len(asked) == 1


def test_a_cuda_wheel_s_step_is_the_same_whatever_other_cuda_wheels_a_cell_installs(
    write_matrix: Callable[[str], Path],
) -> None:
    """Two torch releases that pin the same cuBLAS and different NCCLs: the cuBLAS step (its mount,
    its context directory and its files) is the same in both, and below NCCL's."""
    path = write_matrix(MATRIX)
    house = path.parent / "wheelhouse"
    house.mkdir()
    wheel(house, "nvidia_fakeblas_cu12", "1.0")
    wheel(house, "nvidia_fakenccl_cu12", "1.0")
    wheel(house, "nvidia_fakenccl_cu12", "2.0")
    wheel(house, "numpy", "1.0")
    for tool, version in load_advisories().venv_tools.items():
        wheel(house, tool, version)
    wheel(house, "torch", "2.1.1", ("nvidia-fakeblas-cu12==1.0", "nvidia-fakenccl-cu12==1.0"))
    wheel(house, "torch", "2.1.2", ("nvidia-fakeblas-cu12==1.0", "nvidia-fakenccl-cu12==2.0"))
    renderer = Renderer(load_plan(path), build=BuildSettings(builder="buildkit"))
    first, second = (renderer.render(cell) for cell in renderer.plan.cells)

    def step(text: str, project: str) -> str:
        start = text.rindex("RUN ", 0, text.index(f"source=wheelhouse-cuda-{project},"))
        return text[start : text.index("\nRUN ", start)]

    assert step(first.dockerfile, "nvidia-fakeblas-cu12") == step(second.dockerfile, "nvidia-fakeblas-cu12")
    assert step(first.dockerfile, "nvidia-fakenccl-cu12") != step(second.dockerfile, "nvidia-fakenccl-cu12")
    for rendered in (first, second):
        assert rendered.dockerfile.index("wheelhouse-cuda-nvidia-fakeblas-cu12") < rendered.dockerfile.index(
            "wheelhouse-cuda-nvidia-fakenccl-cu12"
        )
    blas = [
        name for name, _ in first.context_files if name.startswith("wheelhouse-cuda-nvidia-fakeblas-cu12/")
    ]
    assert blas == [
        n for n, _ in second.context_files if n.startswith("wheelhouse-cuda-nvidia-fakeblas-cu12/")
    ]
    assert blas == ["wheelhouse-cuda-nvidia-fakeblas-cu12/nvidia_fakeblas_cu12-1.0-py3-none-any.whl"]
