"""The live build table shows build output as text: brackets in it are never rich markup."""

from __future__ import annotations

import io

from rich.console import Console

from imagekit.build.progress import LiveProgress


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
