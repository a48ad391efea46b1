"""The command line: a thin shell that parses options, calls a stage, and prints.

One module per command group (``plan``: plan, render, schema, matrix; ``build``: build, verify,
report; ``publish``: publish, images, k8s; ``ci``: bake-import, merge-reports), all registered on
the one app in ``imagekit.cli.app`` with the options they share. The stages are imported inside
the commands that use them: `imagekit verify IMAGE` or `imagekit report` should not pay for
pydantic models and Jinja (process start is measured).

Exit codes everywhere: 0 success; 1 a cell failed (or drift); 2 invalid input or usage;
3 the environment (Docker engine or registry unreachable, no GPU runtime).
"""

from __future__ import annotations

import signal
import sys
import threading
from importlib import import_module

from typer.core import TyperCommand

from imagekit.cli.app import PlainHelp, app, say

# Each group registers its commands on import, in the order `imagekit --help` lists them.
for _group in ("plan", "build", "publish", "ci"):
    import_module(f"imagekit.cli.{_group}")
for _command in app.registered_commands:  # every command's --help in the plain layout
    if _command.cls in (None, TyperCommand):  # typer's default, not a class a command chose
        _command.cls = PlainHelp


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
    # SIGTERM (docker stop, a CI runner's cancel, systemd) takes Ctrl-C's path: Python's default
    # would end the process without running a `finally`, leaving check containers and half work.
    terminated = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app()
    except KeyboardInterrupt:
        say("error", "terminated" if terminated.is_set() else "interrupted")
        sys.exit(143 if terminated.is_set() else 130)
    except SystemExit as exc:
        if terminated.is_set() and exc.code == 130:  # a stage's own Ctrl-C exit
            sys.exit(143)
        raise


__all__ = ["app", "main"]
