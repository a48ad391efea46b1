"""Build progress: a live table on a terminal, one plain line per event in CI logs.

Every line and detail shown is masked (``imagekit.core.text.redact``): it is what a build printed.

rich is imported by the live table only: a CI run (and every no-change nightly) prints plain lines
and does not pay for it (~20 ms of start-up).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Protocol, TextIO

from imagekit.core.text import counted, elided, printable, redact

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


class Progress(Protocol):
    def planned(self, names: list[str]) -> None: ...
    def event(self, name: str, state: str, detail: str = "") -> None: ...
    def output(self, name: str, line: str) -> None: ...
    def close(self) -> None: ...


class PlainProgress:
    """``imagekit: <cell>: <state> <detail>`` lines, safe to interleave from worker threads."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()

    def planned(self, names: list[str]) -> None:
        self._write(f"imagekit: building {counted(len(names), 'image')}")

    def event(self, name: str, state: str, detail: str = "") -> None:
        self._write(f"imagekit: {name}: {state}{' ' + detail if detail else ''}")

    def output(self, name: str, line: str) -> None:
        pass  # the full output goes to the cell's log file; CI logs keep one line per event

    def _write(self, line: str) -> None:
        line = redact(line)  # a detail is what a build or an engine said
        # A failed cell's line repeats its error, which a build's runaway output line can make long.
        with self._lock:
            print(elided(printable(line)), file=self._stream, flush=True)

    def close(self) -> None:
        pass


class LiveProgress:
    """A rich table redrawn in place: one row per image with its state and latest output."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = console or Console(stderr=True)
        self._rows: dict[str, tuple[str, str, float]] = {}
        self._lock = threading.Lock()
        self._live = Live(
            console=self._console, refresh_per_second=4, transient=False, get_renderable=self._table
        )
        self._live.start()

    def _table(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=True, header_style="bold")
        for header in ("image", "state", "time", "latest"):
            table.add_column(
                header, overflow="ellipsis", no_wrap=True, max_width=60 if header == "latest" else None
            )
        now = time.monotonic()
        with self._lock:
            for name, (state, detail, since) in self._rows.items():
                style = {"built": "green", "skipped": "cyan", "failed": "red", "cancelled": "yellow"}.get(
                    state, ""
                )
                elapsed = f"{now - since:.0f}s" if state in ("building", "pulling") else ""
                # Text, never markup: build output such as "[notice] ..." or "COPY [/x]" is
                # shown as it is, and can neither vanish nor break the refresh.
                table.add_row(Text(name), Text(state, style=style), elapsed, Text(detail))
        return table

    def planned(self, names: list[str]) -> None:
        with self._lock:
            for name in names:
                self._rows[name] = ("waiting", "", time.monotonic())

    def event(self, name: str, state: str, detail: str = "") -> None:
        with self._lock:
            previous = self._rows.get(name)
            since = previous[2] if previous and previous[0] == state else time.monotonic()
            self._rows[name] = (state, " ".join(redact(detail).split())[:200], since)

    def output(self, name: str, line: str) -> None:
        if line.strip():
            with self._lock:
                state, _, since = self._rows.get(name, ("building", "", time.monotonic()))
                self._rows[name] = (state, " ".join(redact(line).split())[:200], since)

    def close(self) -> None:
        self._live.stop()


def make_progress(live: bool) -> Progress:
    return LiveProgress() if live else PlainProgress()
