"""Dates and timestamps, in UTC everywhere."""

from __future__ import annotations

import os
from datetime import date, datetime, timezone


def today() -> date:
    """UTC today, or SOURCE_DATE_EPOCH's day: the {date} of dated tags, reproducible on demand."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit() and len(epoch) <= 12:
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc).date()
    return datetime.now(tz=timezone.utc).date()


def timestamp() -> str:
    """``2026-11-30T12:00:00Z``: when something happened (a run started, a verdict, a publication)."""
    return datetime.now(tz=timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
