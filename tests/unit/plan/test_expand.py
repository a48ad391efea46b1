"""A matrix's axes, include and exclude expanded into combinations as GitHub Actions documents it
(held to a transcription of its rules), the size refused from the axis lengths before any is made,
and warnings of one kind collapsed."""

from __future__ import annotations

import math
from itertools import product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_COMBINATIONS, MAX_EXPANSION_STEPS, WARNINGS_SHOWN
from imagekit.plan.expand import check_size, collapse, expand


def reference(
    axes: dict[str, list[Any]], include: list[dict[str, Any]], exclude: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """GitHub's documented rules, transcribed combination-first (the code goes include-first).

    1. cross the axes; 2. drop every combination an exclude entry partially matches;
    3. each remaining combination takes, in order, every include entry whose axis keys agree
    with it; 4. an include entry that agrees with no remaining combination is appended alone.
    """
    names = list(axes)
    crossed = [dict(zip(names, values, strict=True)) for values in product(*axes.values())] if names else []

    def excluded(combination: dict[str, Any]) -> bool:
        return any(all(combination.get(k) == v for k, v in rule.items()) for rule in exclude)

    def agrees(combination: dict[str, Any], entry: dict[str, Any]) -> bool:
        return all(combination[k] == v for k, v in entry.items() if k in axes)

    kept = [c for c in crossed if not excluded(c)]
    result = []
    for combination in kept:
        merged = dict(combination)
        for entry in include:
            if agrees(combination, entry):
                merged = {**merged, **entry}
        result.append(merged)
    result += [dict(e) for e in include if not any(agrees(c, e) for c in kept)]
    return result


def test_github_documentation_example() -> None:
    """The example from GitHub's "Expanding or adding matrix configurations" docs."""
    axes = {"fruit": ["apple", "pear"], "animal": ["cat", "dog"]}
    include = [
        {"color": "green"},
        {"color": "pink", "animal": "cat"},
        {"fruit": "apple", "shape": "circle"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]
    assert list(expand(axes, include, []).combinations) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_github_exclude_example() -> None:
    axes = {
        "os": ["macos", "windows"],
        "version": ["12", "14", "16"],
        "environment": ["staging", "production"],
    }
    exclude = [
        {"os": "macos", "version": "12", "environment": "production"},
        {"os": "windows", "version": "16"},
    ]
    result = expand(axes, [], exclude)
    assert len(result.combinations) == 12 - 1 - 2
    assert result.unused_excludes == ()


def test_unused_exclude_reported_and_origins() -> None:
    result = expand({"a": ["x"]}, [{"a": "y"}], [{"a": "z"}])
    assert result.unused_excludes == (0,)
    assert result.origins == ("axes", "include[0]")


KEYS = ["a", "b", "c"]
EXTRA = ["p", "q"]
VALUES = ["x", "y", "z"]

axes_strategy = st.dictionaries(
    st.sampled_from(KEYS), st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True), max_size=3
)
entry_strategy = st.dictionaries(
    st.sampled_from(KEYS + EXTRA), st.sampled_from(VALUES), min_size=1, max_size=3
)


@settings(max_examples=400, deadline=None)
@given(axes_strategy, st.lists(entry_strategy, max_size=4), st.lists(entry_strategy, max_size=3))
def test_expand_matches_reference(
    axes: dict[str, list[str]], include: list[dict[str, str]], exclude: list[dict[str, str]]
) -> None:
    assert list(expand(axes, include, exclude).combinations) == reference(axes, include, exclude)


@settings(max_examples=200, deadline=None)
@given(axes_strategy, st.lists(entry_strategy, max_size=4), st.lists(entry_strategy, max_size=3))
def test_expand_invariants(
    axes: dict[str, list[str]], include: list[dict[str, str]], exclude: list[dict[str, str]]
) -> None:
    result = expand(axes, include, exclude)
    for combination, origin in zip(result.combinations, result.origins, strict=True):
        if origin == "axes":
            # axis values are never overwritten by include, and exclude really removed its matches
            assert all(combination[k] in axes[k] for k in axes)
            assert not any(
                all(combination.get(k) == v for k, v in rule.items() if k in axes)
                and all(k in axes for k in rule)
                for rule in exclude
            )
        else:
            index = int(origin.removeprefix("include[").rstrip("]"))
            assert combination == include[index]


# -- size, before anything is expanded --------------------------------------------------------------


@settings(max_examples=200, deadline=2000, derandomize=True)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=5_000), min_size=1, max_size=5),
    includes=st.integers(min_value=0, max_value=50),
    excludes=st.integers(min_value=0, max_value=50),
)
def test_check_size_refuses_from_the_axis_lengths_alone(
    lengths: list[int], includes: int, excludes: int
) -> None:
    # Lists of the right length whose items are never looked at: only len() may be asked.
    axes = {f"axis{i}": [None] * n for i, n in enumerate(lengths)}
    crossed = math.prod(lengths)
    combinations = crossed + includes
    steps = crossed * (includes + excludes)
    if combinations > MAX_COMBINATIONS or steps > MAX_EXPANSION_STEPS:
        with pytest.raises(InputError, match=r"^m\.yaml: .*split"):
            check_size(axes, [{}] * includes, [{}] * excludes, "m.yaml")
    else:
        assert check_size(axes, [{}] * includes, [{}] * excludes, "m.yaml") == combinations


def test_the_benchmarked_size_is_allowed() -> None:
    # bench/plan_render.py: 500 bases x 5 torch x 2 CUDA x 2 flavours
    axes = {"base": [0] * 500, "torch": [0] * 5, "cuda": [0] * 2, "flavour": [0] * 2}
    assert check_size(axes, [], [], "m") == 10_000 == MAX_COMBINATIONS


def test_warnings_of_one_kind_collapse() -> None:
    warnings = [("allow_unknown", f"torch 3.{i}.0 is unknown") for i in range(100_000)]
    warnings += [("exclude", "exclude[0] matches nothing")] * 3
    out = collapse(warnings)
    assert out[:WARNINGS_SHOWN] == tuple(f"torch 3.{i}.0 is unknown" for i in range(WARNINGS_SHOWN))
    assert out[WARNINGS_SHOWN:] == (
        "exclude[0] matches nothing",  # the same warning three times is printed once
        f"... and {100_000 - WARNINGS_SHOWN:,} more warnings like it (allow_unknown)",
    )
