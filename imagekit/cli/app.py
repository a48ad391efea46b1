"""The Typer application every command module registers on, and the options they share.

Common flags are declared once here (bashbrew declares its common flags once beside one file per
subcommand): --matrix, --only, --state-dir, --json, --registry. Every command turns an ImagekitError into its
one line on stderr and its exit code through ``reports_errors``; ``select_cells`` is the one
place that reads --only against a plan.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from imagekit.errors import ImagekitError, InputError

if TYPE_CHECKING:
    from imagekit.matrix import Cell, Plan

app = typer.Typer(
    name="imagekit",
    help="Build, verify and publish GPU container images for PyTorch from one matrix.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)

P = ParamSpec("P")
R = TypeVar("R")

MatrixOption = Annotated[
    Path,
    typer.Option("--matrix", "-m", help="The matrix file.", dir_okay=False, show_default=True),
]
OnlyOption = Annotated[
    list[str] | None,
    typer.Option("--only", help="Only cells whose id matches this glob (repeatable)."),
]
StateDirOption = Annotated[
    Path,
    typer.Option("--state-dir", help="Where the report, logs and lock live.", file_okay=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
LockOption = Annotated[
    Path,
    typer.Option("--lock", help="The lock file `publish` writes and `images`/`k8s` read.", dir_okay=False),
]
GpusOption = Annotated[
    str,
    typer.Option(
        "--gpus", help="GPUs for the check containers, as docker takes it: all, none, 2, device=0,1."
    ),
]
VerifyTimeoutOption = Annotated[
    float,
    typer.Option("--verify-timeout", min=1, help="Seconds one check container may run before it is killed."),
]
RegistryOption = Annotated[
    str | None,
    typer.Option("--registry", help="Registry host[:port]; overrides publish.registry."),
]
DEFAULT_MATRIX = Path("matrix.yaml")
DEFAULT_STATE_DIR = Path(".imagekit")
DEFAULT_LOCK = Path("images.lock.json")


def say(kind: str, message: str) -> None:
    """One line on stderr: ``imagekit: <kind>: <message>``."""
    typer.echo(f"imagekit: {kind}: {message}", err=True)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn an ImagekitError into its one line on stderr and its exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ImagekitError as exc:
            say("error", exc.message)
            raise typer.Exit(int(exc.exit_code)) from None

    return wrapper


def load_plan(matrix: Path) -> Plan:
    """Read, validate and plan ``matrix``; its warnings go to stderr."""
    from imagekit.matrix import load_plan as load

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
        if not sep or not source or not target or any(c.isspace() for c in pair):
            raise InputError(
                f"{option} {pair!r}: expected SRC=DST (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"
            )
        out.append((source, target))
    return tuple(out)


def registry_host(value: str | None, plan: Plan, matrix: Path) -> str:
    """--registry (validated like the matrix's) or the matrix's publish.registry; exit 2 if none."""
    from pydantic import TypeAdapter, ValidationError

    from imagekit.schema import Registry

    if value is None:
        if not plan.matrix.publish.registry:
            raise InputError(f"{matrix}: no registry; set publish.registry or pass --registry HOST[:PORT]")
        return plan.matrix.publish.registry
    try:
        return str(TypeAdapter(Registry).validate_python(value))
    except ValidationError as exc:
        raise InputError(f"--registry {value!r}: {exc.errors()[0]['msg']}") from None
