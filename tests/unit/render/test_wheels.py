"""Wheel closures: pip resolves each cell's requirement set against the wheelhouse, on the host.

The wheels here are real (valid zip files with METADATA, as pip reads them) but tiny: two
"torch" releases with different dependencies, two NumPy releases, a manylinux wheel.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.render import wheels
from imagekit.render.wheels import Request, WheelResolver, platform_tags
from testbed.sample_projects import wheel


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel(house, "torch", "2.1.0", ("filelock",))
    wheel(house, "torch", "2.2.0", ("filelock", "sympy>=2"))
    wheel(house, "filelock", "3.0")
    wheel(house, "sympy", "1.0")
    wheel(house, "sympy", "2.0")
    wheel(house, "numpy", "1.26.4", tag="cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64")
    wheel(house, "numpy", "2.1.0", tag="cp311-cp311-manylinux_2_27_x86_64")
    return house


def names(files: tuple[Path, ...]) -> list[str]:
    return sorted(f.name.split("-")[0] + "-" + f.name.split("-")[1] for f in files)


def test_a_cache_that_cannot_be_written_costs_only_the_cache(wheelhouse: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")  # the cache's directory cannot be made under a file
    request = Request(("torch==2.1.0",), "3.11", platform_tags("2.36"))
    found = WheelResolver([wheelhouse], cache_dir=blocked).closure(request)
    assert "torch-2.1.0" in names(found)
    assert blocked.read_text() == ""


# torch 2.10.0's aarch64 wheel on PyPI, in small: its CUDA requirements hold on x86_64 only, a
# setuptools requirement from Python 3.12 on. One wheelhouse holds both machines' wheels.
@pytest.fixture
def two_machines(tmp_path: Path) -> Path:
    house = tmp_path / "two-machines"
    house.mkdir()
    gated = ('nvidia-cudnn-cu12==9.10.2.21; platform_machine == "x86_64"', "filelock")
    for machine in ("x86_64", "aarch64"):
        tag = f"cp311-cp311-manylinux_2_28_{machine}"
        wheel(house, "torch", "2.10.0", (*gated, 'setuptools; python_version >= "3.12"'), tag=tag)
        wheel(house, "nvidia_cudnn_cu12", "9.10.2.21", tag=f"py3-none-manylinux_2_27_{machine}")
    wheel(house, "filelock", "3.0")
    wheel(house, "setuptools", "80.0")
    return house


def test_a_target_like_the_host_runs_plain_pip_and_another_the_marker_runner() -> None:
    host = platform.machine()
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert wheels.pip_command(python, host) == [sys.executable, "-m", "pip"]
    other = "aarch64" if host == "x86_64" else "x86_64"
    command = wheels.pip_command(python, other)
    assert command[:2] == [sys.executable, "-c"]
    assert json.loads(command[3]) == {"platform_machine": other}
    assert json.loads(wheels.pip_command("3.9", host)[3]) == {
        "python_version": "3.9",
        "python_full_version": "3.9",
        "implementation_version": "3.9",
    }


def test_platform_tags_per_machine() -> None:
    arm = platform_tags("2.36", "aarch64")
    assert arm[0] == "manylinux_2_36_aarch64" and arm[-1] == "linux_aarch64"
    assert "manylinux2014_aarch64" in arm and all(t.endswith("_aarch64") for t in arm)
    # manylinux1 and manylinux2010 were x86 only (PEP 513, 571): no such aarch64 tags
    assert not any(t.startswith(("manylinux1_", "manylinux2010_")) for t in arm)
    assert platform_tags("2.28") == platform_tags("2.28", "x86_64")  # x86_64 is the default
    with pytest.raises(InputError, match="machine 'arm64'"):
        platform_tags("2.36", "arm64")  # the wheel tag's spelling is aarch64


def test_a_request_whose_tags_are_another_machines_is_refused() -> None:
    with pytest.raises(ValueError, match="aarch64"):
        Request(("torch",), "3.11", platform_tags("2.36"), "aarch64")
    assert Request(("torch",), "3.11", platform_tags("2.36")).machine == "x86_64"


def test_a_pip_whose_markers_cannot_be_set_is_an_environment_problem(
    two_machines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = "import sys; sys.stderr.write('imagekit: cannot set it: no markers\\n'); sys.exit(70)"
    monkeypatch.setattr(wheels, "_RUNNER", broken)
    monkeypatch.setattr(wheels, "marker_overrides", lambda python, machine: {"platform_machine": machine})
    resolver = WheelResolver([two_machines], cache_dir=tmp_path / "cache")
    with pytest.raises(EnvironmentProblem, match="cannot set it: no markers"):
        resolver.closure(Request(("torch",), "3.11", platform_tags("2.36", "aarch64"), "aarch64"))
