"""Error lines: one line, no control or invisible character, bounded."""

from __future__ import annotations

import pytest

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.text import LINE_CHARS


def test_error_and_warning_lines_hold_no_control_character() -> None:
    error = InputError("bad \x1b[31mred\x1b[0m \u202e\u200b value\nimagekit: error: forged")
    assert "\n" not in error.message and "\x1b" not in error.message and "\u202e" not in error.message
    assert error.message.count("imagekit: error:") == 1  # the forged one is part of this line


def test_an_error_line_is_bounded_keeping_its_place_and_fix() -> None:
    error = InputError("m.yaml:3:1: " + "x" * 100_000 + "; fix it like this")
    assert len(error.message) == LINE_CHARS == 2_000  # RELIABILITY.md's bound (it was 2,005)
    assert error.message.startswith("m.yaml:3:1: xxx") and error.message.endswith("; fix it like this")


@pytest.mark.parametrize(
    "message",
    [
        "--toleration 'gpu=https://ci:s3cret@h.example:NoSchedule': use key=value:Effect",  # a flag's !r
        "bases.ci:s3cret@mirror.example: unknown key",  # a matrix key in a field path
        "registry said: 401 for https://ci:s3cret@ghcr.io/v2/",  # an engine's or registry's answer
    ],
)
def test_no_error_line_holds_a_credential_whatever_put_it_there(message: str) -> None:
    for error in (InputError(message), EnvironmentProblem(message)):
        assert "s3cret" not in error.message and "***@" in error.message
