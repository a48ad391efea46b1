"""The key of a build run: what besides its files decides its outcome.

The no-change record (``imagekit.builds.no_change``) answers a run only under the key it was left
by: the command line (every option, as parsed, or the arguments as given), the working directory,
the environment that steers a build (DOCKER_*, IMAGEKIT_*, PIP_*, PATH, ...), the interpreter and
its import path, and a stat of every file of the imagekit package (its code, templates and compat
table). Nothing here imports more than the standard library: the key of a command line is taken
before typer is imported.
"""

# Paths here are the plain strings audit events hand over; thousands of stats a run go without Path.
# ruff: noqa: PTH109, PTH116, PTH118, PTH120

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import imagekit
from imagekit.core.paths import FileKey, file_key

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# The environment a build reads, directly or through docker-py, pip and the registry client, and
# what decides which code runs (not PYTHONUNBUFFERED, PYTHONPROFILEIMPORTTIME and the like).
ENV_PREFIXES = ("DOCKER_", "IMAGEKIT_", "PIP_", "XDG_")
ENV_NAMES = frozenset(
    {
        "HOME",
        "PATH",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
    }
)  # the day is the record's own field (SOURCE_DATE_EPOCH: ``imagekit.core.clock.today``)


def stat_key(path: str) -> FileKey:
    """What a stat says of ``path``; ``(path, -1, 0, 0, 0)`` when there is nothing there, which
    is an answer too (a template directory without a front-end template uses imagekit's)."""
    try:
        return file_key(path, os.stat(path))
    except OSError:
        return (path, -1, 0, 0, 0)


def _package_files() -> list[FileKey]:
    """A stat of every file of the imagekit package: its code, templates and data tables."""
    root = os.path.dirname(imagekit.__file__)
    keys: list[FileKey] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        keys += [stat_key(os.path.join(directory, name)) for name in sorted(filenames)]
    return keys


def run_key(command: Mapping[str, Any]) -> str:
    """What besides its files decides a build's outcome: ``command`` (every option, as parsed)."""
    document = {
        "command": command,
        "cwd": os.getcwd(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)},
        "python": [sys.prefix, sys.base_prefix, sys.version],
        # an installed or upgraded package (Jinja, docker-py, pydantic) changes its directory's entries
        "path": [stat_key(p) for p in sys.path if p],
        "imagekit": _package_files(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


# Fields of a command's options record left out of its key: none. Every option counts, even one
# a keyed run cannot use (--gpus without --verify): counting one too many costs a full run, one
# too few lets a record answer a run it does not describe.
NOT_KEYED: frozenset[str] = frozenset()


def options_key(options: DataclassInstance) -> str:
    """The key of a run from its options record (a frozen dataclass, every field but
    ``NOT_KEYED``'s): no hand-kept list of names, so an option added later is never forgotten."""
    fields = dataclasses.fields(options)
    return run_key({f.name: getattr(options, f.name) for f in fields if f.name not in NOT_KEYED})


def argv_key(argv: Sequence[str]) -> str:
    """The key of a command line as given (``sys.argv[1:]``), before anything parses it."""
    return run_key({"argv": list(argv)})
