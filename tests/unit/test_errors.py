"""Error lines: one line, no control or invisible character, bounded."""

from __future__ import annotations

import pytest

from imagekit.errors import EnvironmentProblem, InputError, printable, redact, shown


def test_error_and_warning_lines_hold_no_control_character() -> None:
    error = InputError("bad \x1b[31mred\x1b[0m \u202e\u200b value\nimagekit: error: forged")
    assert "\n" not in error.message and "\x1b" not in error.message and "\u202e" not in error.message
    assert error.message.count("imagekit: error:") == 1  # the forged one is part of this line


def test_an_error_line_is_bounded_keeping_its_place_and_fix() -> None:
    error = InputError("m.yaml:3:1: " + "x" * 100_000 + "; fix it like this")
    assert len(error.message) <= 2_010
    assert error.message.startswith("m.yaml:3:1: xxx") and error.message.endswith("; fix it like this")


def test_printable_replaces_what_a_terminal_would_act_on() -> None:
    assert printable("a\x1b[2Jb\u202ec\u200bd\te") == "a\ufffd[2Jb\ufffdc\ufffdd\ufffde"
    assert printable("one\ntwo\r\nthree") == "one two three"
    assert printable("plain: 2.1.2 <b> ünïcode") == "plain: 2.1.2 <b> ünïcode"


def test_redact_hides_the_user_part_of_every_url() -> None:
    assert redact("a https://u:p@h/x and git+ssh://me@h/y") == "a https://***@h/x and git+ssh://***@h/y"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ci:s3cret@ghcr.io", "***@ghcr.io"),  # a registry written with its login
        ("nvidia/cuda=ci:s3cret@mirror.example/x", "nvidia/cuda=***@mirror.example/x"),  # SRC=DST
        ("--registry ci:s3cret@h", "--registry ***@h"),
        # what only looks alike stays as written
        ("busybox:1.36@sha256:" + "0" * 64, "busybox:1.36@sha256:" + "0" * 64),
        ("reg:5000/x:tag@sha256:00", "reg:5000/x:tag@sha256:00"),
        ("pkg @ https://x.example/p.whl", "pkg @ https://x.example/p.whl"),
        ("git@github.com:org/repo", "git@github.com:org/repo"),
    ],
)
def test_redact_hides_a_login_without_a_scheme(value: str, expected: str) -> None:
    assert redact(value) == expected
    assert shown("x" * 500).endswith("...'") and len(shown("x" * 500)) == 80


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
