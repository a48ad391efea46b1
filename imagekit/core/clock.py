"""Dates and timestamps, in UTC everywhere."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone

from imagekit.core.errors import InputError
from imagekit.core.limits import CLOCK_SKEW_S
from imagekit.core.text import shown

# Created times and the file times BuildKit rewrites (only those newer: a base's own files keep
# theirs) where the matrix's checkout gives no time of its own (``imagekit.plan.source``): a fixed
# instant, so two runners building the same inputs make the same layers. Not 0: zip and wheel tools
# refuse times before 1980. One for the whole matrix, derived from nothing of a cell: a per-cell
# value would clamp the file times of the layers cells share (venv, CUDA wheels, dependencies)
# differently in each, so no layer could be shared across cells.
REPRODUCIBLE_EPOCH = 1_704_067_200  # 2024-01-01T00:00:00Z

# The last second a four-digit year (a {date} tag's YYYYMMDD) can hold: 9999-12-31T23:59:59Z.
_LAST_EPOCH = 253_402_300_799


def today() -> date:
    """UTC today, or SOURCE_DATE_EPOCH's day: the {date} of dated tags, reproducible on demand.

    A malformed SOURCE_DATE_EPOCH stops the run, as the reproducible-builds specification asks:
    silently dating tags today would defeat the reason it was set."""
    epoch = source_date_epoch()
    if epoch is None:
        return datetime.now(tz=timezone.utc).date()
    return datetime.fromtimestamp(epoch, tz=timezone.utc).date()


def source_date_epoch() -> int | None:
    """SOURCE_DATE_EPOCH, checked; None when it is unset or empty."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    if not (epoch.isascii() and epoch.isdigit() and len(epoch) <= 12 and int(epoch) <= _LAST_EPOCH):
        raise InputError(
            f"SOURCE_DATE_EPOCH={shown(epoch)} is not a Unix time in seconds up to {_LAST_EPOCH}"
            " (9999-12-31); set it to `date +%s` of the day to stamp, or unset it"
        )
    return int(epoch)


def utc_seconds(epoch: int) -> str:
    """``2026-11-30T12:00:00Z`` of a Unix time: an image's created time, to the second."""
    return _utc(datetime.fromtimestamp(epoch, tz=timezone.utc))


def timestamp() -> str:
    """``2026-11-30T12:00:00Z``: when something happened (a run started, a verdict, a publication)."""
    return _utc(datetime.now(tz=timezone.utc))


def parse_time(text: object) -> datetime | None:
    """An ISO 8601 time (``Z`` or an offset; none is UTC) as an aware datetime; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def future_problem(when: datetime, now: datetime | None = None) -> str | None:
    """Why ``when`` cannot have happened yet (later than ``now`` by more than the clock skew
    allowed, ``imagekit.core.limits.CLOCK_SKEW_S``), or None. One rule for every recorded time read."""
    now = now or datetime.now(tz=timezone.utc)
    if when - now <= timedelta(seconds=CLOCK_SKEW_S):
        return None
    return (
        f"{_utc(when)} is in the future (now {_utc(now)}, {CLOCK_SKEW_S // 60} minutes of clock skew"
        " allowed): a forged record or a wrong clock"
    )


def _utc(when: datetime) -> str:
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def time_problem(text: str) -> str | None:
    """Why ``text``, read from a file, is no time that has happened; None when it is one."""
    when = parse_time(text)
    if when is None:
        return f"{shown(text)} is no real time (like '2026-11-30T12:00:00Z')"
    return future_problem(when)
