"""The typer app with every command registered, and the process around one run of it.

``imagekit.cli.main`` imports this only when a command line is not answered before parsing
(``imagekit.builds.no_change``): typer and the options' pydantic adapters are most of a start-up.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import import_module

from typer.core import TyperCommand
from typer.main import get_command_name

from imagekit.cli.app import Launch, PlainHelp, app, say

# Each module registers its command (attest: its group) on import, in the order `imagekit --help`
# lists them.
COMMAND_MODULES = (
    "plan",
    "render",
    "schema",
    "matrix",
    "pin_bases",
    "build",
    "report",
    "verify",
    "rebuild_check",
    "publish",
    "images",
    "k8s",
    "k8s_results",
    "attest",
    "bake_import",
    "merge_reports",
)
for _module in COMMAND_MODULES:
    import_module(f"imagekit.cli.{_module}")
for _command in app.registered_commands:  # every command's --help in the plain layout
    if _command.cls in (None, TyperCommand):  # typer's default, not a class a command chose
        _command.cls = PlainHelp


@contextmanager
def _only_the_command_asked_for(argv: Sequence[str]) -> Iterator[None]:
    """Register only the command ``argv`` names while typer builds the app.

    typer turns every registered command into its click command (each parameter's type, default
    and pydantic adapter) before it parses anything; a run uses one of twelve (~35 ms of every
    command's start-up). The app's own options take no value, so the first word that is not an
    option is the command. Without one (``imagekit``, ``imagekit --help``), with a word that is no
    command (click's error lists the right ones), or while the shell asks for completions, the
    app is built whole.
    """
    commands = app.registered_commands
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    chosen = [
        info
        for info in commands
        if word is not None and (info.name or get_command_name(info.callback.__name__)) == word  # type: ignore[union-attr]
    ]
    completing = any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ)
    if len(chosen) == 1 and not completing:
        app.registered_commands = chosen
    try:
        yield
    finally:
        app.registered_commands = commands


def _no_pydantic_plugins() -> None:
    """imagekit's pydantic models are its own, not the environment's: pydantic would otherwise scan
    every installed distribution's entry points for plugins when it builds the first model (7 ms
    in the project's venv, more in a large environment; on every `imagekit plan`, and typer's own
    option adapters already turn them off). An explicit PYDANTIC_DISABLE_PLUGINS is kept as set.
    """
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def run() -> None:
    """Parse the process's arguments and run the command they name."""
    _no_pydantic_plugins()
    Launch.argv = tuple(sys.argv[1:])
    # SIGTERM (docker stop, a CI runner's cancel, systemd) takes Ctrl-C's path: Python's default
    # would end the process without running a `finally`, leaving check containers and half work.
    terminated = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with _only_the_command_asked_for(sys.argv[1:]):
            app()
    except KeyboardInterrupt:
        say("error", "terminated" if terminated.is_set() else "interrupted")
        sys.exit(143 if terminated.is_set() else 130)
    except SystemExit as exc:
        if terminated.is_set() and exc.code == 130:  # a stage's own Ctrl-C exit
            sys.exit(143)
        raise
