"""merge-reports: the state it writes is never reached through a symbolic link."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.samples import (
    CUDA_BASE,
    GOOD_AXES,
    V1_STATE,
    LinkCase,
    assert_no_read_or_write_outside,
    link,
)

LINK_CASES: dict[str, LinkCase] = {
    "the state lock linked outside": (
        GOOD_AXES + CUDA_BASE,
        link("state/lock", "secret/Dockerfile"),
        lambda project: ["merge-reports", "--state-dir", str(project / "state"), V1_STATE],
        "state/lock is a symbolic link",
    ),
    "the report linked outside": (
        GOOD_AXES + CUDA_BASE,
        link("state/report.json", "secret/Dockerfile"),
        lambda project: ["merge-reports", "--state-dir", str(project / "state"), V1_STATE],
        "report.json: ",  # read through the link: no report, so refused before anything is written
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    assert_no_read_or_write_outside(LINK_CASES[case], tmp_path)
