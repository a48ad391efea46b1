"""The probe's build steps (``check.py build-guard``, ``check.py pins``), run as a Dockerfile runs
them: the shipped zipapp in a Python whose only packages are the ones a test lays out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.probe import protocol
from tests.unit.probe_runs import SCRIPT, python_3_8

# This interpreter, and the oldest an image may run where this host has one.
PYTHONS = [sys.executable, *([python] if (python := python_3_8()) else [])]

FAKE_TORCH = """
__version__ = {version!r}
class version:
    cuda = {cuda!r}
class cuda:
    @staticmethod
    def _is_compiled():
        return {compiled!r}
"""


def run_step(site: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """``python -S check.py ARGS`` with ``site`` as the only place packages come from."""
    return subprocess.run(
        [python, "-S", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def fake_torch(site: Path, version: str, cuda: str | None, compiled: bool) -> Path:
    (site / "torch").mkdir(parents=True, exist_ok=True)
    text = FAKE_TORCH.format(version=version, cuda=cuda, compiled=compiled)
    (site / "torch" / "__init__.py").write_text(text, encoding="utf-8")
    return site


def guard(
    site: Path, torch: str, cuda: str, *extra: str, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return run_step(site, protocol.BUILD_GUARD, "--torch", torch, "--cuda", cuda, *extra, python=python)


def test_the_build_guard_fails_the_build_without_torch(tmp_path: Path) -> None:
    done = guard(tmp_path, "2.5.1", "cpu")
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


def dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("python", PYTHONS)
def test_pins_name_torchs_family_and_its_cuda_wheels_as_installed(python: str, tmp_path: Path) -> None:
    for name, version in [
        ("torch", "2.1.2+cu121"),
        ("torchvision", "0.16.2+cu121"),
        ("triton", "2.1.0"),
        ("nvidia-cudnn-cu12", "8.9.2.26"),  # CUDA 12 layout
        ("nvidia_cublas", "13.0.0.19"),  # CUDA 13 layout, the name spelled with an underscore
        ("cuda-bindings", "13.0.3"),
        ("Pillow", "10.0.0"),  # not torch's: free to move
        ("numpy", "1.26.4"),
    ]:
        dist(tmp_path, name, version)
    done = run_step(tmp_path, protocol.PINS, protocol.PINS_EXTRA_OPTION, "numpy<2", python=python)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "cuda-bindings==13.0.3",
        "nvidia-cublas==13.0.0.19",
        "nvidia-cudnn-cu12==8.9.2.26",
        "torch==2.1.2+cu121",
        "torchvision==0.16.2+cu121",
        "triton==2.1.0",
        "numpy<2",
    ]
    assert run_step(tmp_path, protocol.PINS).stdout.splitlines()[-1] == "triton==2.1.0"


@pytest.mark.parametrize("python", PYTHONS)
def test_freeze_names_every_installed_distribution(python: str, tmp_path: Path) -> None:
    """A front end's build stage installs under these as constraints: it can only add."""
    for name, version in [("torch", "2.5.1+cpu"), ("Pillow", "10.0.0"), ("jupyterlab", "4.6.6")]:
        dist(tmp_path, name, version)
    done = run_step(tmp_path, protocol.FREEZE, python=python)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Pillow==10.0.0", "jupyterlab==4.6.6", "torch==2.5.1+cpu"]


@pytest.mark.parametrize(
    "args",
    [
        [protocol.BUILD_GUARD, "--torch", "2.5.1"],  # no --cuda
        [protocol.PINS, "--numpy", "<2"],
        [protocol.FREEZE, "--all"],
    ],
)
def test_a_build_step_with_bad_arguments_exits_2(tmp_path: Path, args: list[str]) -> None:
    done = run_step(tmp_path, *args)
    assert done.returncode == protocol.EXIT_BAD_ARGUMENTS
    assert f"check.py {args[0]}: bad arguments" in done.stderr and done.stdout == ""
