"""tests/unit/probe/test_buildsteps.py's slow tests: the build steps run as processes under every Python the
probe supports (3.8 on), one per case, and on the real torch CPU wheel."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imagekit.probe import protocol
from tests.unit.probe.test_buildsteps import PYTHONS, fake_torch, guard
from tests.unit.probe_runs import SCRIPT, TORCH_VERSION


@pytest.mark.parametrize(
    ("installed", "want", "exact", "message"),
    [
        # (version, torch.version.cuda, _is_compiled), the cell's torch and CUDA, --exact, the failure
        (("2.5.1+cpu", None, False), ("2.5.1", "cpu"), False, None),
        (("2.5.1", None, False), ("2.5.1", "cpu"), False, None),
        (("2.1.2+cu121", "12.1.105", True), ("2.1.2", "12.1"), False, None),
        (("2.1.0a0+32f93b1", "12.2.2", True), ("2.1.0a0+32f93b1", "12.2"), True, None),
        (
            ("2.5.1+cu121", "12.1", True),
            ("2.5.1", "cpu"),
            False,
            "torch is 2.5.1+cu121 (CUDA 12.1), expected 2.5.1 CPU build",
        ),
        (
            ("2.1.2+cu118", "11.8", True),
            ("2.1.2", "12.1"),
            False,
            "torch is 2.1.2+cu118 (CUDA 11.8), expected 2.1.2 built for CUDA 12.1",
        ),
        (  # PyTorch's own release check: a CUDA build that was not compiled with CUDA
            ("2.1.2+cu121", "12.1", False),
            ("2.1.2", "12.1"),
            False,
            "torch is 2.1.2+cu121 (CUDA 12.1), expected 2.1.2 built for CUDA 12.1",
        ),
        (("2.1.3+cpu", None, False), ("2.1.2", "cpu"), False, "torch is 2.1.3+cpu (CUDA None), expected"),
        (  # a stack names its build exactly: a pip-installed 2.1.0a0 over it is not NVIDIA's
            ("2.1.0a0+other", "12.2", True),
            ("2.1.0a0+32f93b1", "12.2"),
            True,
            "torch is 2.1.0a0+other (CUDA 12.2), expected 2.1.0a0+32f93b1 built for CUDA 12.2",
        ),
    ],
)
@pytest.mark.parametrize("python", PYTHONS)
def test_the_build_guard_passes_only_the_cells_torch(
    python: str,
    tmp_path: Path,
    installed: tuple[str, str | None, bool],
    want: tuple[str, str],
    exact: bool,
    message: str | None,
) -> None:
    site = fake_torch(tmp_path, *installed)
    done = guard(site, *want, *([protocol.GUARD_EXACT_OPTION] if exact else []), python=python)
    assert done.stdout == ""
    if message is None:
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
    else:
        assert done.returncode == 1
        assert message in done.stderr and "Traceback" not in done.stderr


def test_the_build_steps_on_the_real_torch_cpu_wheel(torch_python: str) -> None:
    """What a CPU cell's Dockerfile runs after its install, on the real wheel (``2.13.0+cpu``)."""

    def step(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [torch_python, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False
        )

    assert step(protocol.BUILD_GUARD, "--torch", TORCH_VERSION, "--cuda", "cpu").returncode == 0
    wrong = step(protocol.BUILD_GUARD, "--torch", TORCH_VERSION, "--cuda", "12.1")
    assert wrong.returncode == 1
    expected = f"torch is {TORCH_VERSION}+cpu (CUDA None), expected {TORCH_VERSION} built for CUDA 12.1"
    assert expected in wrong.stderr
    pins = step(protocol.PINS)
    assert pins.returncode == 0 and f"torch=={TORCH_VERSION}+cpu" in pins.stdout.splitlines()
