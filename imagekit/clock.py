"""Dates and timestamps, in UTC everywhere."""

from __future__ import annotations

import os
from datetime import date, datetime, timezone

from imagekit.errors import InputError
from imagekit.text import shown

# The last second a four-digit year (a {date} tag's YYYYMMDD) can hold: 9999-12-31T23:59:59Z.
_LAST_EPOCH = 253_402_300_799


def today() -> date:
    """UTC today, or SOURCE_DATE_EPOCH's day: the {date} of dated tags, reproducible on demand.

    A malformed SOURCE_DATE_EPOCH stops the run, as the reproducible-builds specification asks:
    silently dating tags today would defeat the reason it was set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return datetime.now(tz=timezone.utc).date()
    if not (epoch.isascii() and epoch.isdigit() and len(epoch) <= 12 and int(epoch) <= _LAST_EPOCH):
        raise InputError(
            f"SOURCE_DATE_EPOCH={shown(epoch)} is not a Unix time in seconds up to {_LAST_EPOCH}"
            " (9999-12-31); set it to `date +%s` of the day to stamp, or unset it"
        )
    return datetime.fromtimestamp(int(epoch), tz=timezone.utc).date()


def timestamp() -> str:
    """``2026-11-30T12:00:00Z``: when something happened (a run started, a verdict, a publication)."""
    return datetime.now(tz=timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
