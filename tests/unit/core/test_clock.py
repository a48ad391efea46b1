"""Dates: SOURCE_DATE_EPOCH, as the reproducible-builds specification defines it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from imagekit.core.clock import future_problem, time_problem, today
from imagekit.core.errors import InputError
from imagekit.core.limits import CLOCK_SKEW_S
from imagekit.report.lockfile import Lock, as_document, read_lock
from imagekit.report.store import read_report
from tests.unit.report_samples import build_report, lock_entry


@pytest.mark.parametrize(
    ("epoch", "day"),
    [("0", date(1970, 1, 1)), ("1700000000", date(2023, 11, 14)), ("253402300799", date(9999, 12, 31))],
)
def test_source_date_epoch_dates_the_tags(epoch: str, day: date, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    assert today() == day


def test_without_source_date_epoch_it_is_todays_utc_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "")
    assert today() == datetime.now(tz=timezone.utc).date()


@pytest.mark.parametrize(
    "epoch", ["253402300800", "99999999999999", "-1", "1.5", "abc", "\u0661\u0662", " 1"]
)
def test_a_malformed_source_date_epoch_stops_the_run(epoch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a year past 9999 was a ValueError traceback; text was silently replaced by today
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    with pytest.raises(
        InputError, match=r"^SOURCE_DATE_EPOCH=.* is not a Unix time in seconds .*or unset it$"
    ):
        today()


# -- recorded times: none may lie in the future (issue 33) ------------------------------------------


def _ahead(seconds: float) -> str:
    return (datetime.now(tz=timezone.utc) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_future_problem_allows_the_clock_skew_and_names_a_time_past_it() -> None:
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert future_problem(now + timedelta(seconds=CLOCK_SKEW_S), now) is None
    problem = future_problem(now + timedelta(seconds=CLOCK_SKEW_S + 1), now)
    assert problem is not None and problem.startswith("2026-12-01T00:05:01Z is in the future")
    assert time_problem("2026-13-01T00:00:00Z") is not None  # the pattern's shape, no real time
    assert time_problem(_ahead(-86400)) is None


@pytest.mark.parametrize("field", ["verified_at", "published_at"])
def test_a_lock_recording_a_future_time_is_refused(tmp_path: Path, field: str) -> None:
    """A lock's verification or publication dated years ahead was read as recorded (before)."""
    document = as_document(Lock({"a": lock_entry("a")}))
    entry = document["images"]["a"]
    (entry["verification"] if field == "verified_at" else entry)[field] = _ahead(10 * 365 * 86400)
    path = tmp_path / "images.lock.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        read_lock(path)
    assert "is in the future" in caught.value.message and str(path) in caught.value.message
    assert "\n" not in caught.value.message


def test_a_report_started_in_the_future_is_refused(tmp_path: Path) -> None:
    report = replace(build_report(), started=_ahead(30 * 86400))
    (tmp_path / "report.json").write_text(json.dumps(report.as_json()))
    with pytest.raises(InputError, match=r"report\.json: started: .* is in the future"):
        read_report(tmp_path)
    report = replace(build_report(), started=_ahead(CLOCK_SKEW_S / 2))  # within the skew: read
    (tmp_path / "report.json").write_text(json.dumps(report.as_json()))
    assert read_report(tmp_path).started == report.started
