"""``imagekit build``'s command line, declared once: every option with its spellings, whether it
takes a value, and its default, as the record ``BuildCommand`` of what the command parsed.

Three readers share it. The command (``imagekit.cli.build``) makes its typer parameters of these
spellings and maps them onto ``BuildCommand``, which keys the no-change record
(``imagekit.builds.run_key.options_key``); a test holds typer's parser to this declaration,
option for option. ``imagekit.builds.options.resolve`` merges the record over the matrix into the
build stage's options. And the no-change answer, which runs before typer (or anything else of
imagekit) is imported, reads a command line with ``parse``: click's own reading of these options
(``-mFILE``, ``-m FILE``, ``--matrix=FILE``, ``--matrix FILE``, a value that starts with a dash,
the last of a repeated option), or None wherever click would refuse it or show help instead.

Only the standard library and the state directory's name are imported here: the answer's start-up is measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.report.state import DEFAULT_STATE_DIR

DEFAULT_MATRIX = Path("matrix.yaml")  # every command's --matrix default (imagekit.cli.flags.MatrixOption)
HELP = "--help"  # typer's help option; no short spelling
_SPELLINGS = "spellings"  # the metadata key of a field's flag
_SWITCH = "switch"  # ... and whether it is a flag without a value (--force, --cache-from/--no-...)


def option(*spellings: str) -> dict[str, Any]:
    """The metadata of an option that takes a value (``--jobs N``, ``-j N``, ``-jN``, ``--jobs=N``)."""
    return {_SPELLINGS: spellings, _SWITCH: False}


def switch(*spellings: str) -> dict[str, Any]:
    """The metadata of a flag without a value; ``--on/--off`` declares both spellings, as typer does."""
    return {_SPELLINGS: spellings, _SWITCH: True}


@dataclass(frozen=True)
class BuildCommand:
    """Every option of ``imagekit build`` as parsed, one field per parameter of the command (which
    makes it from its own arguments, so an option added there and not here fails every build);
    its defaults are an empty command line's.

    The key of the no-change record is made of all its fields (``imagekit.builds.run_key.options_key``):
    an option added later counts without anyone listing it, and a record left by a run with other
    options never answers this one.
    """

    matrix: Path = field(default=DEFAULT_MATRIX, metadata=option("--matrix", "-m"))
    only: list[str] | None = field(default=None, metadata=option("--only"))
    jobs: int = field(default=1, metadata=option("--jobs", "-j"))
    force: bool = field(default=False, metadata=switch("--force"))
    timeout: float | None = field(default=None, metadata=option("--timeout"))
    fail_fast: bool = field(default=False, metadata=switch("--fail-fast"))
    pin_base_digests: bool = field(default=False, metadata=switch("--pin-base-digests"))
    mirror: list[str] | None = field(default=None, metadata=option("--mirror"))
    cache_from: bool = field(default=True, metadata=switch("--cache-from/--no-cache-from"))
    push: bool = field(default=False, metadata=switch("--push"))
    registry: str | None = field(default=None, metadata=option("--registry"))
    network: str | None = field(default=None, metadata=option("--network"))
    builder: str | None = field(default=None, metadata=option("--builder"))
    compression: str | None = field(default=None, metadata=option("--compression"))
    buildx_builder: str | None = field(default=None, metadata=option("--buildx-builder"))
    secret: list[str] | None = field(default=None, metadata=option("--secret"))
    label: list[str] | None = field(default=None, metadata=option("--label"))
    state_dir: Path = field(default=DEFAULT_STATE_DIR, metadata=option("--state-dir"))
    as_json: bool = field(default=False, metadata=switch("--json"))
    then_verify: bool = field(default=False, metadata=switch("--verify"))
    gpus: str = field(default="all", metadata=option("--gpus"))
    verify_timeout: float = field(default=900.0, metadata=option("--verify-timeout"))


def spellings(name: str) -> tuple[str, ...]:
    """The flags of ``BuildCommand``'s field ``name`` as typer declares them (``--jobs``, ``-j``;
    ``--cache-from/--no-cache-from``)."""
    found: tuple[str, ...] = _field(name).metadata[_SPELLINGS]
    return found


def flag(name: str) -> str:
    """The flag a message names for field ``name``: its first, long spelling (``--builder``)."""
    return spellings(name)[0].split("/")[0]


def _field(name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(BuildCommand) if f.name == name)


@dataclass(frozen=True)
class _Option:
    name: str  # the field
    switch: bool


def _options() -> tuple[dict[str, _Option], dict[str, _Option]]:
    """Every spelling, long (``--matrix``, ``--no-cache-from``) and short (``-m``), to its option."""
    long: dict[str, _Option] = {HELP: _Option("", switch=True)}
    short: dict[str, _Option] = {}
    for declared in dataclasses.fields(BuildCommand):
        taken = _Option(declared.name, declared.metadata[_SWITCH])
        for spelling in declared.metadata[_SPELLINGS]:
            for name in spelling.split("/"):
                (long if name.startswith("--") else short)[name] = taken
    return long, short


def parse(argv: Sequence[str]) -> Mapping[str, list[str | None]] | None:
    """The options ``imagekit build ARGV`` gives (``argv`` after the command's name), each field's
    values in order (None for a switch given), read as click reads them; None where click would
    refuse the line or show the help: an unknown option, a switch given a value, an option without
    its value, an argument (the command takes none), ``--help``.

    click takes ``--name=value`` and ``--name value``; a short option's value is the rest of its word
    (``-mFILE``) or the next word, whatever it starts with (``--only -m`` selects the cells ``-m``);
    short switches combine before one that takes a value (this command has no short switch).
    """
    long, short = _options()
    given: dict[str, list[str | None]] = {}
    words = list(argv)
    while words:
        word = words.pop(0)
        if word == "--" or not word.startswith("-") or word == "-":
            return None  # arguments follow (the command takes none), or this is one
        name, equals, value = word.partition("=")
        if name in long:
            found = long[name]
            if found.switch:
                if equals or found is long[HELP]:
                    return None  # "does not take a value", or the help shown instead
                given.setdefault(found.name, []).append(None)
                continue
            if not equals:
                if not words:
                    return None  # "requires an argument"
                value = words.pop(0)
            given.setdefault(found.name, []).append(value)
            continue
        if word.startswith("--"):
            return None  # no such option
        # short options, one letter each: a switch, then the next; one that takes a value ends the word
        for index, letter in enumerate(word[1:], start=2):
            found_short = short.get(f"-{letter}")
            if found_short is None:
                return None
            if found_short.switch:
                given.setdefault(found_short.name, []).append(None)
                continue
            rest = word[index:]
            if not rest:
                if not words:
                    return None
                rest = words.pop(0)
            given.setdefault(found_short.name, []).append(rest)
            break
    return given


def last(given: Mapping[str, list[str | None]], name: str) -> str | None:
    """The value of an option given once or more (the last counts, as click takes it); None: not given."""
    values = given.get(name)
    return values[-1] if values else None
