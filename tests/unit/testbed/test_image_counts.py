"""bench/pull_cost.py's own counting, the check it makes against imagekit's pull cost and the
registry's access log: a digest counted once across manifests, and the layers and files that differ."""

from __future__ import annotations

import pytest

from testbed.image_counts import (
    closure_layers,
    distinct_bytes,
    entry_differences,
    layer_diff,
    layer_sharing,
    one_layer_per_cell_bytes,
    ratio,
)


def _blob(digest: str, size: int) -> dict[str, object]:
    return {"digest": f"sha256:{digest * 64}", "size": size}


def test_a_layer_two_manifests_hold_is_counted_once_and_each_config_too() -> None:
    first = {"config": _blob("a", 3), "layers": [_blob("b", 100), _blob("c", 40)]}
    second = {"config": _blob("d", 5), "layers": [_blob("b", 100), _blob("e", 7)]}
    assert distinct_bytes([first, second]) == 3 + 100 + 40 + 5 + 7
    assert distinct_bytes([first]) + distinct_bytes([second]) == 255


def test_the_positions_of_differing_layers_a_missing_one_included() -> None:
    a = [_blob("b", 1), _blob("c", 2), _blob("d", 3)]
    assert layer_diff(a, list(a)) == []
    assert layer_diff(a, [a[0], _blob("e", 2)]) == [1, 2]


def test_files_that_differ_or_are_in_one_layer_only() -> None:
    a = {"x": ("0", 1, 0o644, 0, 0, 1, "", "h1"), "y": ("0", 1, 0o644, 0, 0, 1, "", "h2")}
    b = {"x": ("0", 1, 0o644, 0, 0, 2, "", "h1"), "y": a["y"], "z": ("5", 0, 0o755, 0, 0, 1, "", "")}
    assert entry_differences(a, b) == ["x", "z"]


def _history(*steps: str | None) -> dict[str, object]:
    """A config whose history makes a layer for each step (None: an ENV-like step, no layer)."""
    return {
        "history": [
            {"created_by": "ENV X=1", "empty_layer": True} if step is None else {"created_by": step}
            for step in steps
        ]
    }


PIP = "RUN /bin/sh -c pip install --no-index --no-deps --find-links /tmp/"


def test_the_closure_layers_are_named_by_the_step_that_made_them() -> None:
    manifest = {
        "config": _blob("0", 1),
        "layers": [_blob("a", 10), _blob("b", 20), _blob("c", 30), _blob("d", 40), _blob("e", 50)],
    }
    config = _history(
        "debian base",
        None,
        f"{PIP}wheelhouse-cuda-nvidia-cublas-cu12 --no-compile nvidia-cublas-cu12==12.1.3.1",
        f"{PIP}wheelhouse-cuda-nvidia-nccl-cu12 --no-compile nvidia-nccl-cu12==2.19.3",
        f"{PIP}wheelhouse-deps filelock==4.3.2 triton==2.2.0",
        f"{PIP}wheelhouse torch==2.2.2",
    )
    assert closure_layers(manifest, config) == {
        "nvidia-cublas-cu12": _blob("b", 20),
        "nvidia-nccl-cu12": _blob("c", 30),
        "deps": _blob("d", 40),
    }


def test_a_history_that_does_not_match_the_layers_is_refused() -> None:
    manifest = {"config": _blob("0", 1), "layers": [_blob("a", 10)]}
    with pytest.raises(ValueError, match="2 history entries made a layer, the manifest has 1"):
        closure_layers(manifest, _history("base", "RUN x"))


THREE = {
    "2.1.2": {"cublas": _blob("b", 500), "nccl": _blob("n", 100), "deps": _blob("x", 60)},
    "2.2.2": {"cublas": _blob("b", 500), "nccl": _blob("o", 110), "deps": _blob("y", 70)},
    "2.3.1": {"cublas": _blob("b", 500), "nccl": _blob("p", 120)},
}


def test_a_closure_layer_is_shared_only_with_one_digest_in_every_cell() -> None:
    assert layer_sharing(THREE) == {"shared": ["cublas"], "differ": ["deps", "nccl"]}


def test_one_layer_per_cell_counts_a_shared_layer_once_per_cell() -> None:
    # the new layout fetched cuBLAS once; one layer per cell would fetch it in each of the three
    assert one_layer_per_cell_bytes(2000, THREE) == 2000 + 500 * 2
    assert one_layer_per_cell_bytes(2000, {"one": THREE["2.1.2"]}) == 2000


def test_a_ratio_to_nothing_is_refused() -> None:
    assert ratio(105, 100) == 1.05
    with pytest.raises(ValueError, match="the whole is 0 bytes"):
        ratio(1, 0)
