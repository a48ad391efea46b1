"""``imagekit build``'s options declared once (imagekit.builds.command_line): typer's parser is held
to the declaration, and ``parse``, the no-change answer's reading before typer loads, reads every
command line as click does, or not at all."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer.main

from imagekit.builds import command_line
from imagekit.builds import no_change as unchanged
from imagekit.builds.command_line import BuildCommand
from imagekit.cli.commands import app


def _click_build() -> Any:
    return typer.main.get_command(app).commands["build"]  # type: ignore[attr-defined]


def test_typers_build_options_are_the_declaration() -> None:
    """Every parameter of the command is a field, with its spellings, its kind and its default."""
    declared = {f.name: f for f in dataclasses.fields(BuildCommand)}
    params = {p.name: p for p in _click_build().params if p.name != "help"}
    assert list(params) == list(declared)
    defaults = BuildCommand()
    for name, param in params.items():
        names = [n for spelling in command_line.spellings(name) for n in spelling.split("/")]
        assert [*param.opts, *param.secondary_opts] == names, name
        assert param.is_flag == declared[name].metadata["switch"], name
        assert param.default == getattr(defaults, name), name


def _clicks_matrix(argv: list[str]) -> str | None:
    """The matrix typer's own parser reads from ``build ARGV``; None where it refuses the line."""
    try:
        context = _click_build().make_context("build", list(argv))
    except Exception:  # click's usage errors and its help's exit alike: no command would run
        return None
    return str(context.params["matrix"])


# Each a command line and the matrix click reads from it (None: click refuses it).
LINES: list[tuple[list[str], str | None]] = [
    ([], "matrix.yaml"),
    (["--matrix", "m.yaml", "--only", "x"], "m.yaml"),
    (["--matrix=m.yaml"], "m.yaml"),
    (["-m", "m.yaml"], "m.yaml"),
    (["-mm.yaml"], "m.yaml"),  # before: not read (None), the answer left to typer
    (["-m=m.yaml"], "=m.yaml"),  # a short option's value is the rest of its word, '=' and all
    (["-j2", "-mm.yaml"], "m.yaml"),
    (["-j", "2", "-m", "m.yaml", "--force"], "m.yaml"),
    (["--matrix", "a.yaml", "-mb.yaml"], "b.yaml"),  # the last counts
    (["--only", "-m"], "matrix.yaml"),  # before: -m read as the matrix flag (and given up on)
    (["--label", "-mx=y"], "matrix.yaml"),  # before: given up on
    (["--only", "--matrix", "-m", "m.yaml"], "m.yaml"),  # --only's value is "--matrix"
    (["--no-cache-from", "--json", "-m", "m.yaml"], "m.yaml"),
    (["--matrix", "-m"], "-m"),  # a value that starts with a dash is a value
    (["-j-m"], "matrix.yaml"),  # -j's value is "-m" (click refuses it later, as no int)
    (["--matrix"], None),
    (["-m"], None),
    (["--force=yes"], None),
    (["--help"], None),
    (["-h"], None),
    (["--no-such-option"], None),
    (["-x"], None),
    (["extra"], None),
    (["-"], None),
    (["--", "-m", "m.yaml"], None),
    (["-mm.yaml", "--", "x"], None),
]


@pytest.mark.parametrize(("argv", "matrix"), LINES, ids=[" ".join(a) or "(none)" for a, _ in LINES])
def test_the_matrix_read_before_typer_is_clicks(argv: list[str], matrix: str | None) -> None:
    clicks = _clicks_matrix(argv)
    # where click reads the line its matrix is this one; where this gives up, click refuses it too
    # (click may refuse a line this reads for another option's value: -j-m is no count)
    assert clicks == matrix if clicks is not None or matrix is None else argv == ["-j-m"]
    assert unchanged.matrix_of(["build", *argv]) == matrix


def test_an_empty_matrix_is_the_commands_to_refuse() -> None:
    assert unchanged.matrix_of(["build", "--matrix="]) is None
    assert unchanged.matrix_of(["build", "-m", ""]) is None


def test_parse_keeps_every_value_in_order() -> None:
    given = command_line.parse(["--only", "a", "--only=b", "--force", "-j3", "--no-cache-from"])
    assert given == {"only": ["a", "b"], "force": [None], "jobs": ["3"], "cache_from": [None]}
    assert command_line.last(given, "only") == "b" and command_line.last(given, "matrix") is None


@pytest.mark.parametrize("state_dir", [["--state-dir", "elsewhere"], ["--state-dir=elsewhere"]])
def test_a_line_naming_a_state_directory_is_the_commands(state_dir: list[str]) -> None:
    assert unchanged.answer_command_line(["build", *state_dir]) is False


def test_another_command_is_not_read() -> None:
    assert unchanged.matrix_of(["plan", "-m", "m.yaml"]) is None
    assert unchanged.answer_command_line(["plan"]) is False


def test_the_flag_a_message_names() -> None:
    assert command_line.flag("cache_from") == "--cache-from"
    assert command_line.flag("jobs") == "--jobs"
    assert command_line.spellings("matrix") == ("--matrix", "-m")
