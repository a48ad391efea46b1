"""Version strings compared numerically, component by component: ``12.10`` after ``12.9``, a local
or pre-release part ends the numbers, a missing component is 0, and no component is long enough to
reach Python's limit on converting digits."""

from __future__ import annotations

import pytest

from imagekit.core.versions import (
    MAX_COMPONENT_DIGITS,
    compare,
    cuda_variant,
    display_key,
    minor_of,
    project_key,
    variant_cuda,
    version_key,
)


@pytest.mark.parametrize(
    ("version", "key"),
    [
        ("12.10", (12, 10)),
        ("2.1.0a0+32f93b1", (2, 1, 0)),  # the pre-release's leading digits, then nothing
        ("2.1.2+cu121", (2, 1, 2)),
        ("2.0rc1.5", (2, 0)),  # nothing after a component that is not all digits
        ("450.80.02", (450, 80, 2)),
        ("v1.0", ()),
        ("", ()),
        ("1..2", (1,)),
        ("1" * 5_000, (int("1" * MAX_COMPONENT_DIGITS),)),  # never int() of 5,000 digits
    ],
)
def test_the_key_is_the_numbers_up_to_the_first_that_is_not_all_digits(
    version: str, key: tuple[int, ...]
) -> None:
    assert version_key(version) == key


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("12.10", "12.9", 1),
        ("2.10", "2.10.0", 0),  # a missing component is 0 (tuples alone would order them)
        ("2.1", "2.1.1", -1),
        ("2.1.0a0+32f93b1", "2.1.0", 0),
        ("580.65.06", "580.65.6", 0),
        ("1.0", "0.999", 1),
    ],
)
def test_compare_orders_numerically_and_both_ways(left: str, right: str, order: int) -> None:
    assert compare(left, right) == order and compare(right, left) == -order


def test_display_order_is_numeric_and_text_breaks_ties() -> None:
    assert sorted(["12.10", "12.9", "2.10", "2.10.0", "2.9"], key=display_key) == [
        "2.9",
        "2.10",
        "2.10.0",
        "12.9",
        "12.10",
    ]


def test_minors_and_wheel_variants() -> None:
    assert [minor_of(v) for v in ("2.1.2", "12.1.1", "2.1.0a0+32f93b1", "13")] == ["2.1", "12.1", "2.1", "13"]
    assert [cuda_variant(c) for c in ("12.1", "13.0", "11.8", "cpu", "12.4.1")] == [
        "cu121",
        "cu130",
        "cu118",
        "cpu",
        "cu124",
    ]
    for cuda in ("12.1", "13.0", "11.8"):
        assert variant_cuda(cuda_variant(cuda)) == cuda
    assert variant_cuda("cu90") == "9.0"  # CUDA 9: one digit of major


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Torch_Vision", "torch-vision"),
        ("torch.vision", "torch-vision"),
        ("nvidia--cuda__runtime", "nvidia-cuda-runtime"),
    ],
)
def test_project_names_compare_as_pip_compares_them(name: str, key: str) -> None:
    assert project_key(name) == key
