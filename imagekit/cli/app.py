"""The Typer application every command module registers on, and the options they share.

Common flags are declared once here (bashbrew declares its common flags once beside one file per
subcommand): --matrix, --only, --state-dir, --json, --registry. Every command turns an ImagekitError into its
one line on stderr and its exit code through ``reports_errors``; ``select_cells`` is the one
place that reads --only against a plan.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from imagekit.core.errors import ExitCode, ImagekitError, InputError
from imagekit.core.limits import MAX_TIMEOUT_S, VALUE_CHARS
from imagekit.core.paths import length_problem
from imagekit.core.text import elided, printable, redact, shown

if TYPE_CHECKING:
    from imagekit.plan.cells import Cell, Plan

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


def checked_path(value: Any) -> Any:
    """A path flag's value (or values), refused as bad usage (exit 2, naming the flag) when it is
    too long to exist, before any command runs: the OS would say so as an odd error mid-way."""
    for path in value if isinstance(value, list) else [value]:
        problem = length_problem(Path(path)) if path is not None else None
        if problem is not None:
            raise typer.BadParameter(problem)
    return value


def path_flag(text: str) -> Path:
    """A path flag's text as a Path. An empty one is refused: pathlib makes it '.', and imagekit
    would write its files into the current directory."""
    if not text:
        raise typer.BadParameter("is empty; name a path (. for the current directory)")
    return Path(text)


def complete_path(incomplete: str) -> list[str]:
    """Shell completion for a path flag (``parser=`` takes the place of click's path type and its
    file completion): the entries that start with what was typed, directories with a '/'."""
    typed = Path(incomplete or ".")
    folder, stem = (typed, "") if incomplete.endswith("/") or not incomplete else (typed.parent, typed.name)
    try:
        entries = sorted(p for p in folder.iterdir() if p.name.startswith(stem))[:200]
    except OSError:
        return []
    prefix = str(folder)
    if prefix == "." and not incomplete.startswith("./"):
        prefix = ""
    elif not prefix.endswith("/"):
        prefix += "/"
    return [f"{prefix}{p.name}" + ("/" if p.is_dir() else "") for p in entries]


def path_option(*names: str, **settings: Any) -> Any:
    """``typer.Option`` for a path flag: the empty value refused (``path_flag``), the shell
    completing paths (``complete_path``), and by default ``checked_path``'s bounds."""
    return typer.Option(
        *names,
        parser=path_flag,
        autocompletion=complete_path,
        **{"callback": checked_path, **settings},
    )


def path_argument(**settings: Any) -> Any:
    """``typer.Argument`` for path arguments, with ``path_option``'s checks."""
    return typer.Argument(
        parser=path_flag,
        autocompletion=complete_path,
        **{"callback": checked_path, **settings},
    )


def checked_dir(value: Any) -> Any:
    """A directory flag's value: ``checked_path``, and when it exists, a directory (/dev/null
    or a file is refused before any command runs)."""
    checked_path(value)
    if value is not None and os.path.lexists(value) and not Path(value).is_dir():
        raise typer.BadParameter(f"{shown(str(value))} exists and is not a directory; name a directory")
    return value


MatrixOption = Annotated[
    Path,
    path_option(
        "--matrix",
        "-m",
        help="The matrix file.",
        show_default=True,
    ),
]
OnlyOption = Annotated[
    list[str] | None,
    typer.Option("--only", help="Only cells whose id matches this glob (repeatable)."),
]
StateDirOption = Annotated[
    Path,
    path_option(
        "--state-dir",
        help="Where the report, logs and lock live.",
        callback=checked_dir,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
LockOption = Annotated[
    Path,
    path_option(
        "--lock",
        help="The lock file `publish` writes and `images`/`k8s` read.",
    ),
]
GpusOption = Annotated[
    str,
    typer.Option(
        "--gpus",
        help="GPUs for the check containers, as docker takes it: all, none, 2, device=0,1; or CDI"
        " devices (an engine with CDI on): cdi:nvidia.com/gpu=all, cdi:nvidia.com/gpu=0,1.",
    ),
]
VerifyTimeoutOption = Annotated[
    float,
    typer.Option(
        "--verify-timeout",
        min=1,
        max=MAX_TIMEOUT_S,
        help="Seconds one check container may run before it is killed.",
    ),
]
RegistryOption = Annotated[
    str | None,
    typer.Option("--registry", help="Registry host[:port]; overrides publish.registry."),
]
DEFAULT_MATRIX = Path("matrix.yaml")
DEFAULT_LOCK = Path("images.lock.json")


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


def parse_mapping(pairs: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    """``SRC=DST`` / ``KEY=VALUE`` strings from a repeatable option, as pairs."""
    out = []
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if len(pair) > VALUE_CHARS:
            raise InputError(f"{option}: {len(pair):,} characters; at most {VALUE_CHARS:,}")
        if not sep or not source or not target or any(c.isspace() for c in pair):
            raise InputError(
                f"{option} {shown(pair)}: expected SRC=DST"
                " (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"
            )
        out.append((source, target))
    return tuple(out)


def registry_host(value: str | None, plan: Plan, matrix: Path) -> str:
    """--registry (validated like the matrix's) or the matrix's publish.registry; exit 2 if none."""
    from pydantic import TypeAdapter, ValidationError

    from imagekit.core.safetypes import Registry

    if value is None:
        if not plan.matrix.publish.registry:
            raise InputError(f"{matrix}: no registry; set publish.registry or pass --registry HOST[:PORT]")
        return plan.matrix.publish.registry
    try:
        return str(TypeAdapter(Registry).validate_python(value))
    except ValidationError as exc:
        raise InputError(f"--registry {shown(value)}: {exc.errors()[0]['msg']}") from None
