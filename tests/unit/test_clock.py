"""Dates: SOURCE_DATE_EPOCH, as the reproducible-builds specification defines it."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from imagekit.clock import today
from imagekit.errors import InputError


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
