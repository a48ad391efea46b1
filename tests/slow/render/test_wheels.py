"""tests/unit/render/test_wheels.py's slow tests: each runs pip (`pip install --dry-run` or `pip download`, a
process of its own, ~1-2 s) against a wheelhouse of built wheels."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.render import wheels
from imagekit.render.wheels import Request, WheelResolver, platform_tags
from testbed.sample_projects import wheel
from tests.unit.render.test_wheels import names


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
