"""matrix: where the bake build contexts may be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.samples import (
    CELL,
    CUDA_BASE,
    GOOD_AXES,
    LinkCase,
    assert_no_read_or_write_outside,
    link,
    on_matrix,
)

LINK_CASES: dict[str, LinkCase] = {
    "a bake context linked outside": (
        GOOD_AXES + CUDA_BASE,
        link(f"bake/{CELL}"),
        on_matrix("matrix", "--format", "bake", "--context-dir", "{p}/bake"),
        f"bake/{CELL} is a symbolic link; imagekit never writes through one",
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    assert_no_read_or_write_outside(LINK_CASES[case], tmp_path)
