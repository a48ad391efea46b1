"""tests/unit/report/test_store.py's slow tests: a report of a million cells is written and refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.report.state import REPORT_NAME
from imagekit.report.store import read_report


def test_a_million_cells_are_refused_within_seconds(tmp_path: Path) -> None:
    cell = '{"id":"c","kind":"cell","status":"built","base_image":"b"}'
    head = (
        '{"version":1,"matrix":"m","started":"2024-05-17T10:00:00Z","duration_s":1,"engine":"e","bases":[],'
    )
    (tmp_path / REPORT_NAME).write_text(head + '"cells":[' + ",".join([cell] * 1_000_000) + "]}")
    started = time.monotonic()
    with pytest.raises(InputError, match=r"cells: 1,000,000 records; a report holds at most 100,000"):
        read_report(tmp_path)
    assert time.monotonic() - started < 10
