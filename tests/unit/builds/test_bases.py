"""Base images: mirror mapping, digests recorded for pinning, the FROM lines of local bases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.builds.bases import apply_mirrors, current_pins
from imagekit.core.errors import InputError
from imagekit.plan.matrix import load_plan
from imagekit.plan.pin_file import pins_path
from imagekit.plan.pins import pins_document
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE

# -- apply_mirrors -----------------------------------------------------------------------------------

MIRRORS = (
    ("nvidia", "mirror.local/nv"),
    ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        # the longest prefix wins, whichever comes first
        (
            "nvidia/cuda:12.1.1-devel-ubuntu22.04",
            "127.0.0.1:5000/mirror/nvidia-cuda:12.1.1-devel-ubuntu22.04",
        ),
        ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
        ("nvidia/cuda@sha256:" + "a" * 64, "127.0.0.1:5000/mirror/nvidia-cuda@sha256:" + "a" * 64),
        ("nvidia/cuda/sub:1", "127.0.0.1:5000/mirror/nvidia-cuda/sub:1"),
        # only at a path boundary: nvidia/cudax is not nvidia/cuda, but is under nvidia
        ("nvidia/cudax:1", "mirror.local/nv/cudax:1"),
        ("nvidia/pytorch:24.01-py3", "mirror.local/nv/pytorch:24.01-py3"),
        # no match at all: untouched
        ("nvidiax/cuda:1", "nvidiax/cuda:1"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("library/nvidia:1", "library/nvidia:1"),
    ],
)
def test_apply_mirrors(ref: str, expected: str) -> None:
    assert apply_mirrors(ref, MIRRORS) == expected
    assert apply_mirrors(ref, tuple(reversed(MIRRORS))) == expected


def test_apply_mirrors_does_not_rewrite_a_longer_name() -> None:
    mirrors = (("nvidia/cuda", "m/cuda"),)
    assert apply_mirrors("nvidia/cudax", mirrors) == "nvidia/cudax"
    assert apply_mirrors("nvidia/cudax:12.1", mirrors) == "nvidia/cudax:12.1"
    assert apply_mirrors("nvidia/cuda:12.1", mirrors) == "m/cuda:12.1"


def test_apply_mirrors_with_a_registry_port_prefix() -> None:
    mirrors = (("localhost:5000/team", "mirror.local/team"),)
    assert apply_mirrors("localhost:5000/team/app:1", mirrors) == "mirror.local/team/app:1"
    assert apply_mirrors("localhost:5000/teamx/app:1", mirrors) == "localhost:5000/teamx/app:1"


def test_apply_mirrors_first_of_equal_sources_wins() -> None:
    # The command line's mappings come first in BuildOptions.mirrors and override the matrix's.
    mirrors = (("nvidia/cuda", "cli/cuda"), ("nvidia/cuda", "matrix/cuda"))
    assert apply_mirrors("nvidia/cuda:12.1", mirrors) == "cli/cuda:12.1"
    assert apply_mirrors("nvidia/cuda:12.1", ()) == "nvidia/cuda:12.1"


# -- current_pins (pin-bases) -------------------------------------------------------------------------

PIN_AXES = 'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], flavour: [devel, runtime], base: [cuda]}\n'
DEVEL = "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04"
RUNTIME = "nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04"


def test_current_pins_asks_through_the_mirror_and_says_how_each_compares_to_the_lock(
    write_matrix: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.registry import lookup

    matrix = write_matrix(
        PIN_AXES + WAIVE_OLD_TORCH + CUDA_BASE + "mirrors: {nvidia/cuda: 127.0.0.1:5000/cuda}\n"
    )
    one, two = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    pins_path(matrix).write_text(pins_document({DEVEL: one, RUNTIME: two}), encoding="utf-8")
    asked: list[tuple[str, str, str]] = []

    class Asked:
        def __init__(self, host: str, credentials: object, **_: object) -> None:
            self.host = host

        def tag_digest(self, repository: str, tag: str) -> str:
            asked.append((self.host, repository, tag))
            return two

        def close(self) -> None:
            pass

    monkeypatch.setattr(lookup, "Registry", Asked)
    said: list[str] = []
    pinned = current_pins(load_plan(matrix, pinned=False), matrix, said.append)
    assert pinned.path == pins_path(matrix)
    assert pinned.before == {DEVEL: one, RUNTIME: two} and pinned.pins == {DEVEL: two, RUNTIME: two}
    assert said == [f"{DEVEL} {two} (moved from {one})", f"{RUNTIME} {two} (unchanged)"]
    assert {host for host, _, _ in asked} == {"127.0.0.1:5000"}  # where the build pulls
    assert [repository for _, repository, _ in asked] == ["cuda", "cuda"]


def test_current_pins_refuses_a_matrix_of_local_bases_only(write_matrix: Callable[[str], Path]) -> None:
    matrix = write_matrix(
        'axes:\n  torch: ["2.1.2"]\n  cuda: [cpu]\nbases:\n  deb:\n    image: example/deb:1\n'
        "    os: debian12\n    python: '3.11'\n    cuda: false\n    build: {context: ctx}\n" + WAIVE_OLD_TORCH
    )
    (matrix.parent / "ctx").mkdir()
    (matrix.parent / "ctx" / "Dockerfile").write_text("FROM x\n")
    with pytest.raises(
        InputError, match=r"no cell pulls a base from a registry \(local bases only\); nothing to pin$"
    ):
        current_pins(load_plan(matrix, pinned=False), matrix, print)
