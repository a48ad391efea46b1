"""The BuildKit builder's closure in layers for real (issue 36, "Share"; issue 49, one layer per CUDA
wheel): two cells that pin the same cuBLAS stand-in and dependencies but another NCCL stand-in and
torch get the very same cuBLAS and dependency layers (one diff_id each), and NCCL and torch layers
of their own.

The wheels are made here by hand (a fake torch per release requiring `nvidia-fake-cu12`, its own
`nvidia-fakenccl-cu12` and `fakedep`, plus a NumPy stand-in: torch without torchvision gets one; the
nvidia ones share the `nvidia/` package directory and its `__init__.py`, as NVIDIA's wheels do), so
the build takes seconds, not the ten minutes of real CUDA wheels. The cells use this test's own
template, which holds the shipped template's install steps verbatim (cut from
dockerfiles/templates/_pip.j2) and nothing of its build guard (it would import the fake torch):
the slices, their pins, mounts and pip options under test are the product's.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import docker
import pytest
import yaml

from testbed.matrix_projects import Project
from testbed.waivers import critical_waivers
from tests.integration.conftest import DEBIAN_PYTHON, install_steps_template, pip_freeze, venv_tool_wheels

TEMPLATE = install_steps_template("if recipe.wheel_layers")
RELEASES = ("2.1.1", "2.1.2")


def _wheel(directory: Path, project: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel of one module, written by hand (a zip with three metadata files)."""
    module = project.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    # NVIDIA's wheels each hold nvidia/__init__.py and their own nvidia/<library>/ under it
    package = f"nvidia/{module}" if project.startswith("nvidia-") else module
    shared = {"nvidia/__init__.py": ""} if project.startswith("nvidia-") else {}
    files = {
        **shared,
        f"{package}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: imagekit-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(name, text)


@pytest.fixture
def sliced(project: Project, debian_python: str) -> Project:
    wheelhouse = project.root / "wheelhouse"
    wheelhouse.mkdir()
    _wheel(wheelhouse, "nvidia-fake-cu12", "1.0")
    _wheel(wheelhouse, "fakedep", "1.0")
    _wheel(wheelhouse, "numpy", "1.0")
    for nccl, release in enumerate(RELEASES, start=1):
        _wheel(wheelhouse, "nvidia-fakenccl-cu12", f"{nccl}.0")
        _wheel(
            wheelhouse,
            "torch",
            release,
            ("nvidia-fake-cu12==1.0", f"nvidia-fakenccl-cu12=={nccl}.0", "fakedep"),
        )
    venv_tool_wheels(wheelhouse)  # every venv's own pip and setuptools, the real ones
    (project.root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    document = {
        "version": 1,
        "templates": "templates",
        "build": {"builder": "buildkit"},
        "publish": {"repository": project.repository, "tags": {"readable": "{base}-{torch}"}},
        "defaults": {"torchvision": "none", "torchaudio": "none"},
        "axes": {"torch": list(RELEASES), "flavour": ["runtime"]},
        "bases": {"debian": {"image": DEBIAN_PYTHON, "os": "debian12", "python": "3.11", "cuda": False}},
        "sources": {"pip": {"no_index": True, "find_links": ["wheelhouse"], "torch_index_url": None}},
        "advisories": critical_waivers(RELEASES),
    }
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return project


def test_cells_with_the_same_cuda_wheels_share_their_layers(sliced: Project, api: docker.APIClient) -> None:
    done = sliced.build("--builder", "buildkit")
    assert done.returncode == 0, done.stderr
    base_layers = len(api.inspect_image(DEBIAN_PYTHON)["RootFS"]["Layers"])
    layers: dict[str, list[str]] = {}
    for cell, result in sorted(sliced.report().items()):
        image = str(result["image_id"])
        layers[cell] = api.inspect_image(image)["RootFS"]["Layers"]
        listed = pip_freeze(image)
        assert {"nvidia-fake-cu12==1.0", "fakedep==1.0", "numpy==1.0"} <= set(listed), listed
    assert len(layers) == 2, layers
    first, second = layers.values()
    # base, venv, its pip and setuptools, one layer per CUDA wheel, dependencies slice, torch slice
    assert len(first) == len(second) == base_layers + 6
    venv, tools, cuda, nccl, deps, top = range(base_layers, base_layers + 6)
    assert first[venv] == second[venv] and first[tools] == second[tools]
    assert first[cuda] == second[cuda]  # one cuBLAS layer for both cells, whatever NCCL they pin
    assert first[nccl] != second[nccl]
    assert first[deps] == second[deps]
    assert first[top] != second[top]  # torch 2.1.1's and 2.1.2's own

    # The same flow again on this engine, every step cached: each cell's tags still name the image
    # of its own torch (two cells share three layers; a cache hit must not hand one the other's top).
    images = {cell: str(result["image_id"]) for cell, result in sliced.report().items()}
    again = sliced.build("--builder", "buildkit", "--force")
    assert again.returncode == 0, again.stderr
    for cell, result in sorted(sliced.report().items()):
        assert str(result["image_id"]) == images[cell], cell  # the same inputs, the same image
        release = next(r for r in RELEASES if f"torch{r}-" in cell)
        assert result["tags"], cell
        for tag in result["tags"]:
            listed = pip_freeze(str(tag))
            assert f"torch=={release}" in listed, (cell, tag, listed)
