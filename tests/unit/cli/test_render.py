"""render: where the Dockerfiles (and container-structure-test configs) may be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.cli.samples import (
    CELL,
    CUDA_BASE,
    GOOD_AXES,
    LOCAL_BASE,
    LinkCase,
    M,
    assert_no_read_or_write_outside,
    link,
    local_context_and,
    on_matrix,
)


@pytest.mark.parametrize("check", [(), ("--check",)], ids=["render", "render --check"])
def test_an_output_that_is_no_directory_is_bad_input_not_drift(check: tuple[str, ...]) -> None:
    # --check said "out of date" (exit 1) for /dev/null: no run could ever make that true
    result = run_cli("render", "--matrix", M, "--out", "/dev/null", *check)
    assert result.exit_code == 2 and "/dev/null: is not a directory" in result.stderr, result.stderr


LINK_CASES: dict[str, LinkCase] = {
    "output linked outside": (
        LOCAL_BASE + "output: gen\n",
        local_context_and(link("gen")),
        on_matrix("render"),
        "output: ",
    ),
    "a cell's output directory linked outside": (
        GOOD_AXES + CUDA_BASE,
        link(f"out/{CELL}"),
        on_matrix("render", "--out", "{p}/out"),
        f"out/{CELL} is a symbolic link; imagekit never writes through one",
    ),
    "a cst config linked outside": (
        GOOD_AXES + CUDA_BASE,
        link(f"cst/{CELL}.yaml", "secret/Dockerfile"),
        on_matrix("render", "--out", "{p}/out", "--cst", "{p}/cst"),
        f"cst/{CELL}.yaml is a symbolic link",
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    assert_no_read_or_write_outside(LINK_CASES[case], tmp_path)
