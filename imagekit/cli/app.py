"""The Typer application every command module registers on, and what every command shares.

Every command turns an ImagekitError into its one line on stderr and its exit code through
``reports_errors``; a usage error is one line too (``OneLineUsageErrors``); ``select_cells`` is the
one place that reads --only against a plan. The flags commands share are ``imagekit.cli.flags``'.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from imagekit.core.errors import ExitCode, ImagekitError
from imagekit.core.text import elided, printable, redact

if TYPE_CHECKING:
    from imagekit.plan.cells import Cell, Plan
    from imagekit.verify.gpus import GpuRequest

# click's ClickException (typer vendors click in newer releases): found through a class typer exports.
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class OneLineUsageErrors(TyperGroup):
    """Outside a terminal (CI, a pipe, a script), a usage error is one line like every other error,
    ``imagekit: error: ...`` with exit 2, not click's framed box that a log reader must unpick."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode or sys.stderr.isatty():
            return super().main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            # Not standalone: click hands us its exceptions, and an exit code where it would exit.
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except _CLICK_ERROR as exc:
            message = str(getattr(exc, "format_message")())  # noqa: B009 (click's, not typed here)
            if type(exc).__name__ == "NoArgsIsHelpError":  # `imagekit` alone: the help, as asked
                typer.echo(message, err=True)
                sys.exit(int(ExitCode.INVALID_INPUT))
            context = getattr(exc, "ctx", None)
            hint = f"; see `{context.command_path} --help`" if context is not None else ""
            say("error", message.rstrip(".") + hint)
            sys.exit(int(getattr(exc, "exit_code", ExitCode.INVALID_INPUT)))
        except typer.Abort:
            say("error", "aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class PlainHelp(TyperCommand):
    """A command whose --help is click's plain layout, not typer's rich panels: rendering with rich
    imports rich and markdown-it, about half of what `imagekit --help` cost. Two things of the
    plain layout are adjusted: the command list shows each command's whole summary line (click
    cuts it at 45 characters), and the docstring's ``Example:`` lines stay one per line (click
    would rewrap them into one paragraph)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        if self.short_help or not self.help:
            return super().get_short_help_str(limit)
        summary = inspect.cleandoc(self.help).partition("\n\n")[0]
        return " ".join(summary.split())

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        original = self.help
        if original:
            paragraphs = inspect.cleandoc(original).split("\n\n")
            # "\b" alone on a line before a paragraph: click writes its lines as they are
            self.help = "\n\n".join(
                "\b\n" + p if p.lstrip().startswith("Example:") else p for p in paragraphs
            )
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = original


app = typer.Typer(
    name="imagekit",
    help="Build, verify and publish GPU container images for PyTorch from one matrix.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    cls=OneLineUsageErrors,
    rich_markup_mode=None,  # plain help and errors: no rich import on the way (start-up is measured)
)


@app.callback()
def _group() -> None:
    # A callback keeps the app a group of commands even when main() registers only the one a run
    # names (typer makes an app of one command that command itself). It does nothing; the app's
    # help stays Typer(help=...).
    pass


P = ParamSpec("P")
R = TypeVar("R")


class Launch:
    """The process's arguments as ``imagekit.cli.commands.run`` handed them to the app; None when
    a command runs some other way (a test's CliRunner), whose arguments ``sys.argv`` does not hold."""

    argv: tuple[str, ...] | None = None


def say(kind: str, message: str) -> None:
    """One line on stderr: ``imagekit: <kind>: <message>``, with no control character in it (a
    value read from a file must not move the cursor, recolour the terminal or start a new line),
    and no longer than LINE_CHARS, the prefix included."""
    typer.echo(elided(f"imagekit: {kind}: {printable(redact(message))}"), err=True)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn an ImagekitError into its one line on stderr and its exit code; and so a failed engine
    call that no stage handled (an engine answering 500, or what is not JSON, to any call)."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ImagekitError as exc:
            say("error", exc.message)
            raise typer.Exit(int(exc.exit_code)) from None
        except Exception as exc:
            problem = _engine_problem(exc)
            if problem is None:
                raise  # a bug: its traceback is what to report
            say("error", problem.message)
            raise typer.Exit(int(problem.exit_code)) from None

    return wrapper


def _engine_problem(exc: Exception) -> ImagekitError | None:
    """``exc`` as a failed engine call's one line, when it is one. The engine client is looked up,
    not imported: a command that never loaded it (most never do) made no engine call, and importing
    docker-py here would cost every command's start-up."""
    client = sys.modules.get("imagekit.engine.client")
    problem = client.engine_problem(exc) if client is not None else None
    return problem if isinstance(problem, ImagekitError) else None


def load_plan(matrix: Path) -> Plan:
    """Read, validate and plan ``matrix``; its warnings go to stderr."""
    from imagekit.plan.matrix import load_plan as load

    plan = load(matrix)
    for warning in plan.warnings:
        say("warning", warning)
    return plan


def select_cells(matrix: Path, only: Sequence[str] | None) -> tuple[Plan, tuple[Cell, ...]]:
    """The plan and its cells --only selects; a selection matching nothing is exit 2."""
    plan = load_plan(matrix)
    return plan, plan.select(only or [])


def gpu_request(text: str) -> GpuRequest:
    """``--gpus`` as a request, the one reading of it every command makes (once, before any work):
    a bad value is exit 2 naming the flag, whether an engine answers or not."""
    from imagekit.verify.gpus import GpuRequest

    return GpuRequest.parse(text)
