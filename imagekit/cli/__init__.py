"""The command line: a thin shell that parses options, calls a stage, and prints.

One module per command, each a thin mapping from its flags onto a stage's functions (bashbrew's
one file per subcommand, pre-commit's commands/): ``plan``, ``render``, ``schema``, ``matrix``,
``pin_bases``, ``build`` (also `build --verify`), ``report``, ``verify``, ``rebuild_check``,
``publish``, ``images``, ``k8s``, ``k8s_results``, ``attest`` (the `attest` group), ``bake_import``,
``merge_reports``; the flags they share are declared once in ``imagekit.cli.flags``, and all
register on the one app in ``imagekit.cli.app`` (``imagekit.cli.commands`` imports them). The
stages are imported inside the commands that use them: `imagekit verify IMAGE` or `imagekit
report` should not pay for pydantic models and Jinja (process start is measured).

Exit codes everywhere: 0 success; 1 a cell failed (or drift); 2 invalid input or usage;
3 the environment (Docker engine or registry unreachable, no GPU runtime).

``main`` first asks ``imagekit.builds.no_change`` whether this very command line is a build that the
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
        from imagekit.builds.no_change import answer_command_line

        if answer_command_line(sys.argv[1:]):
            return
    from imagekit.cli.commands import run

    run()
