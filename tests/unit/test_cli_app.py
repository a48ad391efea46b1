"""The command line's shared helpers: repeatable KEY=VALUE options."""

from __future__ import annotations

import pytest

from imagekit.cli.app import parse_mapping
from imagekit.errors import InputError

MIRROR_HINT = "expected SRC=DST (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"


# -- parse_mapping -----------------------------------------------------------------------------------


def test_parse_mapping_keeps_pairs_in_order() -> None:
    pairs = ["nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda", "docker.io=mirror.local", "k=a=b"]
    assert parse_mapping(pairs, "--mirror") == (
        ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
        ("docker.io", "mirror.local"),
        ("k", "a=b"),  # only the first '=' separates
    )
    assert parse_mapping([], "--label") == ()


@pytest.mark.parametrize(
    "pair", ["nvidia/cuda", "=mirror/cuda", "nvidia/cuda=", "=", "a = b", "a=b c", "a=\tb"]
)
def test_parse_mapping_rejects_malformed_pairs(pair: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_mapping(["ok=fine", pair], "--mirror")
    assert caught.value.message == f"--mirror {pair!r}: {MIRROR_HINT}"


def test_parse_mapping_names_the_option() -> None:
    with pytest.raises(InputError, match=r"^--label 'team': expected SRC=DST"):
        parse_mapping(["team"], "--label")
