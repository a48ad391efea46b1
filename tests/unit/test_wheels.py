"""Wheel closures: pip resolves each cell's requirement set against the wheelhouse, on the host.

The wheels here are real (valid zip files with METADATA, as pip reads them) but tiny: two
"torch" releases with different dependencies, two NumPy releases, a manylinux wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from imagekit.errors import InputError
from imagekit.wheels import Request, WheelResolver, platform_tags


def wheel(
    where: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any"
) -> Path:
    path = where / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    python, abi, platform = tag.split("-")
    wheel_file = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {python}-{abi}-{platform}\n"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", wheel_file)
        archive.writestr(f"{info}/RECORD", "")
    return path


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
