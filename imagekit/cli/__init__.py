"""The command line: a thin shell that parses options, calls a stage, and prints.

One module per command group (``plan``: plan, render, schema, matrix; ``build``: build, verify,
report; ``publish``: publish, images; ``k8s``: k8s, k8s-results; ``attest``: attest verify;
``ci``: bake-import, merge-reports), all registered on the one app in ``imagekit.cli.app`` with
the options they share. The stages are imported inside the commands that use them: `imagekit verify IMAGE` or
`imagekit report` should not pay for pydantic models and Jinja (process start is measured).

Exit codes everywhere: 0 success; 1 a cell failed (or drift); 2 invalid input or usage;
3 the environment (Docker engine or registry unreachable, no GPU runtime).

``main`` first asks ``imagekit.build.no_change`` whether this very command line is a build that the
record of the last full run answers (a nightly where nothing changed); only otherwise does it
import typer and the commands (``imagekit.cli.commands``).
"""

from __future__ import annotations

import sys


def _never_fail_to_print() -> None:
    """A terminal, pipe or CI log whose encoding is ASCII (LANG=C, PYTHONIOENCODING=ascii) must
    still get every line: a character it cannot show (a value's U+FFFD stand-in, a name from an
    edited report) is written as an escape instead of ending the command in a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main() -> None:
    _never_fail_to_print()
    if sys.argv[1:2] == ["build"]:  # the only command a record answers: others import nothing more
        from imagekit.build.no_change import answer_command_line

        if answer_command_line(sys.argv[1:]):
            return
    from imagekit.cli.commands import run

    run()
