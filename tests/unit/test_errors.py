"""Error lines: one line, no control or invisible character, bounded."""

from __future__ import annotations

from imagekit.errors import InputError, printable


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
