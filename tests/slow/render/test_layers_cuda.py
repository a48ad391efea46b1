"""The CUDA layers of an index-installed cell, run: the `pip install` steps of its rendered
Dockerfile (one per CUDA wheel, then torch's), as written there, against a package index on disk
that stands in for both PyTorch's and PyPI's (slow: pip runs about thirty times, ~1 s each).

The index holds small stand-in wheels with the real projects' names and the Requires-Dist shape of
torch 2.1.2's CUDA 12.1 build (its eleven exact nvidia-*-cu12 pins; cuSOLVER asking for any
nvjitlink), so the pins are the ones imagekit/data/cuda_wheels.yaml holds for that build.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from testbed.sample_projects import CUDA_PINS_2_1_2 as PINS
from testbed.sample_projects import cuda_index, cuda_index_matrix


def pip_steps(dockerfile: str) -> list[list[str]]:
    """The arguments of each ``RUN pip install`` of the Dockerfile, continuation lines joined."""
    steps: list[list[str]] = []
    lines = iter(dockerfile.splitlines())
    for line in lines:
        if not line.startswith("RUN pip install "):
            continue
        text = line
        while text.endswith("\\"):
            text = text[:-1] + next(lines)
        steps.append(shlex.split(text)[2:])  # after RUN pip: install and its arguments
    return steps


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the host's find-links and extra indexes are not the image's
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def installed(venv: Path) -> dict[str, str]:
    listing = json.loads(pip(venv, "list", "--format", "json").stdout)
    return {
        p["name"].lower().replace("_", "-"): p["version"]
        for p in listing
        if p["name"] not in ("pip", "setuptools")
    }


def render(tmp_path: Path, index: Path) -> list[list[str]]:
    path = tmp_path / "matrix.yaml"
    path.write_text(cuda_index_matrix(index), encoding="utf-8")
    plan = load_plan(path)
    (cell,) = plan.cells
    return pip_steps(Renderer(plan).dockerfile(cell))


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    where = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    return where


def test_the_cuda_step_installs_the_pins_and_torch_installs_none_again(tmp_path: Path, venv: Path) -> None:
    assert PINS is not None and len(PINS) == 11
    *cuda_steps, torch_step = render(tmp_path, cuda_index(tmp_path / "index"))
    assert len(cuda_steps) == 11 and all(step[-1] in PINS for step in cuda_steps)  # one wheel each
    for step in cuda_steps:
        done = pip(venv, *step)
        assert done.returncode == 0, done.stderr
    assert installed(venv) == dict(pin.split("==") for pin in PINS)  # exactly the pins: --no-deps
    site = next((venv / "lib").glob("python3*/site-packages"))
    before = {p.name: p.stat().st_mtime_ns for p in site.glob("nvidia_*.dist-info")}
    done = pip(venv, *torch_step)
    assert done.returncode == 0, done.stderr
    after = installed(venv)
    # torch's step adds torch, its companions and what the pins leave open (nvjitlink)...
    added = {k: v for k, v in after.items() if f"{k}=={v}" not in PINS}
    assert added == {
        "torch": "2.1.2",
        "torchvision": "0.16.2",
        "torchaudio": "2.1.2",
        "numpy": "1.26.4",
        "nvidia-nvjitlink-cu12": "12.9.86",
    }
    # ...and rewrites no CUDA wheel of the layer below (a reinstall would be a second copy)
    assert {
        p.name: p.stat().st_mtime_ns for p in site.glob("nvidia_*.dist-info") if p.name in before
    } == before


def test_an_index_whose_torch_pins_another_cuda_wheel_fails_the_build(tmp_path: Path, venv: Path) -> None:
    *cuda_steps, torch_step = render(tmp_path, cuda_index(tmp_path / "index", cudnn_for_torch="8.9.2.27"))
    assert all(pip(venv, *step).returncode == 0 for step in cuda_steps)
    done = pip(venv, *torch_step)
    assert done.returncode != 0 and "nvidia-cudnn-cu12" in done.stderr
    assert installed(venv)["nvidia-cudnn-cu12"] == "8.9.2.26"  # nothing was swapped in above it
