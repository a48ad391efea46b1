"""The live build table shows build output as text: brackets in it are never rich markup."""

from __future__ import annotations

import io

from rich.console import Console

from imagekit.builds.progress import LiveProgress, PlainProgress
from imagekit.core.text import LINE_CHARS


def test_build_output_with_brackets_is_shown_verbatim() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200, color_system=None)
    progress = LiveProgress(console)
    try:
        progress.planned(["cell-[a]", "cell-b", "cell-c"])
        progress.output("cell-[a]", "[notice] A new release of pip is available")
        progress.output("cell-b", "Step 4/9 : COPY [/x]")
        progress.event("cell-c", "failed", "ERROR: [bold]not markup[/bold]")
        capture = Console(file=io.StringIO(), width=200, color_system=None)
        with capture.capture() as captured:
            capture.print(progress._table())
    finally:
        progress.close()
    text = captured.get()
    assert "cell-[a]" in text
    assert "[notice] A new release of pip is available" in text
    assert "COPY [/x]" in text
    assert "[bold]not markup[/bold]" in text


def test_a_plain_progress_line_is_one_bounded_line() -> None:
    """A failed cell's line repeats its error: a runaway one (or its newline) stays one line."""
    stream = io.StringIO()
    PlainProgress(stream).event("cell-a", "failed", "step 3: " + "x" * 100_000 + "\nimagekit: forged")
    (line,) = stream.getvalue().splitlines()
    assert len(line) == LINE_CHARS and line.startswith("imagekit: cell-a: failed step 3: xxx")
    assert line.endswith("imagekit: forged")
