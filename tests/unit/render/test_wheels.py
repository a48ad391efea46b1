"""Wheel closures: pip resolves each cell's requirement set against the wheelhouse, on the host.

The wheels here are real (valid zip files with METADATA, as pip reads them) but tiny: two
"torch" releases with different dependencies, two NumPy releases, a manylinux wheel.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.render import wheels
from imagekit.render.wheels import Request, WheelResolver, platform_tags
from tests.unit.projects import wheel


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


def test_each_requirement_set_gets_only_its_own_wheels(wheelhouse: Path, tmp_path: Path) -> None:
    resolver = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache")
    tags = platform_tags("2.36")
    old = resolver.closure(Request(("torch==2.1.0", "numpy<2"), "3.11", tags))
    new = resolver.closure(Request(("torch==2.2.0", "numpy"), "3.11", tags))
    assert names(old) == ["filelock-3.0", "numpy-1.26.4", "torch-2.1.0"]
    assert names(new) == ["filelock-3.0", "numpy-2.1.0", "sympy-2.0", "torch-2.2.0"]
    assert all(f.parent == wheelhouse for f in old + new)


def test_platform_tags_follow_the_images_glibc(wheelhouse: Path, tmp_path: Path) -> None:
    assert platform_tags("2.28")[0] == "manylinux_2_28_x86_64"
    assert {"manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"} <= set(platform_tags("2.28"))
    assert "manylinux_2_27_x86_64" not in platform_tags("2.17")
    resolver = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache")
    # A glibc 2.17 image cannot install numpy 2.1.0 (manylinux_2_27): pip takes the older one.
    found = resolver.closure(Request(("numpy",), "3.11", platform_tags("2.17")))
    assert names(found) == ["numpy-1.26.4"]
    with pytest.raises(InputError, match=r"expected 2\.N"):
        platform_tags("musl")


def test_a_wheelhouse_that_cannot_satisfy_the_set_is_one_clear_error(
    wheelhouse: Path, tmp_path: Path
) -> None:
    resolver = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache")
    with pytest.raises(InputError) as caught:
        resolver.closure(Request(("torch==2.9.0",), "3.11", platform_tags("2.36")))
    message = caught.value.message
    assert message.startswith("the wheelhouse cannot satisfy torch==2.9.0 for Python 3.11: ")
    assert "torch==2.9.0" in message.split(": ", 1)[1] and "\n" not in message


def test_a_resolution_is_cached_per_requirement_set_and_wheelhouse_listing(
    wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = Request(("torch==2.1.0",), "3.11", platform_tags("2.36"))
    first = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache").closure(request)
    runs: list[object] = []
    real_run = subprocess.run

    def counting(*args: object, **kwargs: object) -> object:
        runs.append(args)
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", counting)
    assert WheelResolver([wheelhouse], cache_dir=tmp_path / "cache").closure(request) == first
    assert runs == []  # from the disk cache: pip did not run
    wheel(wheelhouse, "filelock", "3.1")  # the wheelhouse changed: resolved again, the newer wheel
    again = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache").closure(request)
    assert len(runs) == 1 and "filelock-3.1" in names(again)


def test_a_cache_that_cannot_be_written_costs_only_the_cache(wheelhouse: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")  # the cache's directory cannot be made under a file
    request = Request(("torch==2.1.0",), "3.11", platform_tags("2.36"))
    found = WheelResolver([wheelhouse], cache_dir=blocked).closure(request)
    assert "torch-2.1.0" in names(found)
    assert blocked.read_text() == ""


@pytest.mark.parametrize("kind", ["a FIFO", "a link loop entry"])
def test_a_cache_entry_that_is_not_a_closure_list_is_resolved_again(
    kind: str, wheelhouse: Path, tmp_path: Path
) -> None:
    request = Request(("torch==2.1.0",), "3.11", platform_tags("2.36"))
    resolver = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache")
    resolver.closure(request)
    [entry] = (tmp_path / "cache" / "closures").iterdir()
    entry.unlink()
    if kind == "a FIFO":  # read, it would wait for a writer forever
        os.mkfifo(entry)
    else:
        (tmp_path / "loop.whl").symlink_to(tmp_path / "loop.whl")
        entry.write_text(json.dumps([str(tmp_path / "loop.whl")]))
    outcome: list[object] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            WheelResolver([wheelhouse], cache_dir=tmp_path / "cache").closure(request)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the resolver hung on the cache entry"
    [found] = outcome
    assert "torch-2.1.0" in names(found)  # type: ignore[arg-type]


def test_the_hosts_pip_configuration_is_ignored(
    wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.1.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "elsewhere"))
    resolver = WheelResolver([wheelhouse], cache_dir=tmp_path / "cache")
    found = resolver.closure(Request(("torch",), "3.11", platform_tags("2.36")))
    assert "torch-2.2.0" in names(found)


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


def test_markers_are_the_target_machines_not_the_hosts(two_machines: Path, tmp_path: Path) -> None:
    # Both answers from one resolver and one cache directory: the machine is part of the key.
    resolver = WheelResolver([two_machines], cache_dir=tmp_path / "cache")
    for machine in ("x86_64", "aarch64"):
        found = resolver.closure(Request(("torch",), "3.11", platform_tags("2.36", machine), machine))
        expected = ["filelock-3.0", "torch-2.10.0"]
        if machine == "x86_64":  # the CUDA wheel comes with the x86_64 torch only, whatever the host
            expected.insert(1, "nvidia_cudnn_cu12-9.10.2.21")
        assert names(found) == expected, machine
        # and each wheel is the target's own (tags), never the other machine's
        assert all(f.name.endswith(("-any.whl", f"_{machine}.whl")) for f in found)
    assert len(list((tmp_path / "cache" / "closures").iterdir())) == 2


def test_markers_are_the_target_pythons_not_the_hosts(two_machines: Path, tmp_path: Path) -> None:
    # A 3.12 image gets setuptools (python_version >= "3.12"), whichever Python runs pip; the 3.11
    # closures above do not.
    for path in list(two_machines.glob("torch-*")):
        path.rename(path.with_name(path.name.replace("cp311-cp311", "cp312-cp312")))
    resolver = WheelResolver([two_machines], cache_dir=tmp_path / "cache")
    found = resolver.closure(Request(("torch",), "3.12", platform_tags("2.36", "aarch64"), "aarch64"))
    assert names(found) == ["filelock-3.0", "setuptools-80.0", "torch-2.10.0"]


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


def test_download_fills_a_wheelhouse_for_the_target_machine(
    two_machines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # the host's find-links and indexes stay out
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<2\n")  # a host cap on torch does not change what an image gets
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    dest = tmp_path / "aarch64"
    argv = ["download", "--machine", "aarch64", "--python-version", "3.11", "--glibc", "2.36"]
    argv += ["--dest", str(dest), "torch==2.10.0", "--", "--no-index", "--find-links", str(two_machines)]
    assert wheels.main(argv) == 0
    # no nvidia_cudnn_cu12 for aarch64 (it is in the x86_64 closure above)
    assert sorted(p.name for p in dest.iterdir()) == [
        "filelock-3.0-py3-none-any.whl",
        "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl",
    ]
