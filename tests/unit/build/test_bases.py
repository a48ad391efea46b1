"""Base images: mirror mapping, digests recorded for pinning, the FROM lines of local bases."""

from __future__ import annotations

import pytest

from imagekit.build.bases import apply_mirrors

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
