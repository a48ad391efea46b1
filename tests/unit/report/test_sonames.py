"""The duplicate sonames a verification records (imagekit/report/sonames.py): the probe's
``duplicate_libraries`` read as untrusted input, carried by the record, shown on the text row."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from imagekit.core.limits import MAX_DUPLICATE_PATHS, MAX_DUPLICATE_SONAMES
from imagekit.report.sonames import Duplicates
from imagekit.report.text import ROW_HEADERS, rows
from imagekit.report.verification import Inventory, Verification
from tests.unit.report_samples import sample_report

GOOD = {
    "count": 2,
    "duplicates": {
        "libcublas.so.12": [
            "/usr/local/cuda/lib64/libcublas.so.12.1.3.1",
            "/opt/venv/nvidia/cublas/lib/libcublas.so.12",
        ],
        "libnccl.so.2": [
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.17.1",
            "/opt/venv/nvidia/nccl/lib/libnccl.so.2",
        ],
    },
    "extra_bytes": 123_456_789,
    "bound": None,
}


def test_a_well_formed_scan_is_carried_whole() -> None:
    found = Duplicates.from_script(GOOD)
    assert found is not None and found.count == 2 and found.extra_bytes == 123_456_789 and found.bound is None
    assert [d.soname for d in found.libraries] == ["libcublas.so.12", "libnccl.so.2"]
    assert found.libraries[1].paths[1] == "/opt/venv/nvidia/nccl/lib/libnccl.so.2"
    assert found.text == "2 sonames twice"


@pytest.mark.parametrize(
    "raw",
    [None, [], "3", {}, {"count": True}, {"count": -1}, {"count": 2**63}, {"count": 1.5}, {"count": "2"}],
)
def test_no_usable_count_is_no_figure(raw: Any) -> None:
    assert Duplicates.from_script(raw) is None


def test_hostile_lists_are_bounded_escaped_and_counted() -> None:
    raw = {
        "count": 0,  # smaller than what it lists: the list wins
        "duplicates": {
            **{f"lib{i}.so": [f"/a/lib{i}.so", f"/b/lib{i}.so"] for i in range(MAX_DUPLICATE_SONAMES + 50)},
            "lib\x1b[2J\nforged.so": ["/x/\x1b]0;title\x07\n/y" + "z" * 5000, 7, None] + ["/p"] * 100,
            "": ["/empty-name"],
            "notalist.so": "/a",
        },
        "extra_bytes": -5,
        "bound": ["not", "text"],
    }
    found = Duplicates.from_script(raw)
    assert found is not None
    assert len(found.libraries) == MAX_DUPLICATE_SONAMES and found.count == MAX_DUPLICATE_SONAMES
    assert found.extra_bytes is None and found.bound is None
    # the hostile entry itself, read alone
    only = Duplicates.from_script(
        {"count": 1, "duplicates": {k: v for k, v in raw["duplicates"].items() if "forged" in k}}
    )
    assert only is not None and len(only.libraries) == 1
    entry = only.libraries[0]
    assert entry.soname.isprintable() and "\x1b" not in entry.soname
    assert len(entry.paths) == MAX_DUPLICATE_PATHS and all(
        p.isprintable() and len(p) <= 1024 for p in entry.paths
    )


def test_a_bound_hit_is_shown() -> None:
    found = Duplicates.from_script({**GOOD, "bound": "stopped after 60 s: the list may be short"})
    assert found is not None and found.text == "2 sonames twice (scan stopped early)"


def verified_with(inventory: dict[str, Any] | None) -> Verification:
    report = sample_report()
    cell = report.cells[0]
    assert cell.verification is not None
    return replace(cell.verification, inventory=Inventory.from_script(inventory))


def test_the_record_carries_it_through_json_and_the_text_row_shows_it() -> None:
    record = verified_with({"python": "3.10.12", "duplicate_libraries": GOOD})
    back = Verification.from_json(record.as_json())
    assert back.inventory is not None and back.inventory.duplicates == record.inventory.duplicates  # type: ignore[union-attr]
    report = sample_report()
    shown = replace(report, cells=(replace(report.cells[0], verification=back), *report.cells[1:]))
    row = dict(zip(ROW_HEADERS, rows(shown)[0], strict=True))
    assert "2 sonames twice" in row["verified"]


def test_an_earlier_probe_without_the_scan_reads_none_and_shows_nothing() -> None:
    record = verified_with({"python": "3.10.12"})
    assert record.inventory is not None and record.inventory.duplicates is None
    report = sample_report()
    shown = replace(report, cells=(replace(report.cells[0], verification=record), *report.cells[1:]))
    assert "twice" not in dict(zip(ROW_HEADERS, rows(shown)[0], strict=True))["verified"]
