"""bench/pull_cost.py's own counting, the check it makes against imagekit's pull cost and the
registry's access log: a digest counted once across manifests, and the layers and files that differ."""

from __future__ import annotations

from bench.pull_cost import distinct_bytes, entry_differences, layer_diff


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
