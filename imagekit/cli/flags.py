"""The flags more than one command takes, declared once, and the checks every path flag gets.

bashbrew declares its common flags once beside one file per subcommand; here they are
``Annotated`` types a command's parameter names (``matrix: MatrixOption = DEFAULT_MATRIX``), so a
flag's name, help and checks are the same wherever it is taken. A path flag refuses the empty
value and an over-long path before any command runs (``path_option``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_TIMEOUT_S, VALUE_CHARS
from imagekit.core.paths import length_problem
from imagekit.core.text import shown


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


def gpus_option(help: str) -> Any:
    """``--gpus``, one type on every command that takes it (verify, build --verify, k8s): its text,
    read by ``imagekit.cli.app.gpu_request`` once per run."""
    return typer.Option("--gpus", help=help)


GpusOption = Annotated[
    str,
    gpus_option(
        "GPUs for the check containers, as docker takes it: all, none, 2, device=0,1; or CDI"
        " devices (an engine with CDI on): cdi:nvidia.com/gpu=all, cdi:nvidia.com/gpu=0,1."
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
RequireAttestationOption = Annotated[
    Path | None,
    path_option(
        "--require-attestation",
        help="PEM public key: hand out only digests that carry a verification attestation signed"
        " with it (checked in the registry first; no Docker engine needed).",
    ),
]
AttestationPolicyOption = Annotated[
    str,
    typer.Option(
        "--attestation-policy", help="validated (a GPU verification, default) or checked (also without GPU)."
    ),
]
DEFAULT_LOCK = Path("images.lock.json")  # what `publish` writes and `images`, `k8s` and `report` read


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
