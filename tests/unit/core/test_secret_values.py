"""imagekit.core.secret_values: every form of a registered value masked, on whole lines, at every sink."""

from __future__ import annotations

import base64
import itertools
import json
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.builds.jobs import JobFailed
from imagekit.core import secret_values
from imagekit.core.atomic import atomic_write
from imagekit.core.errors import ImagekitError, one_line
from imagekit.core.secret_values import Lines, mask, register
from imagekit.core.text import redact, shown

VALUE = 'tok3n/Zq9+x!"K\\w'  # '/', '+', '!', '"' and '\\' each have an encoding of their own
LOGIN = "ci-bot"
NETRC = f"machine index.example.org login {LOGIN} password {VALUE}\n"


def b64(data: str, urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(data.encode()).decode()


FORMS = {
    "the value": VALUE,
    "percent-encoded": urllib.parse.quote(VALUE, safe=""),
    "percent-encoded, lower-case hex": urllib.parse.quote(VALUE, safe="").replace("%2F", "%2f"),
    "percent-encoded as a URL path keeps '/'": urllib.parse.quote(VALUE),
    "JSON-escaped": json.dumps(VALUE)[1:-1],
    "JSON-escaped with '\\/'": json.dumps(VALUE)[1:-1].replace("/", "\\/"),
    "hex": VALUE.encode().hex(),
    "HEX": VALUE.encode().hex().upper(),
    "base64": b64(VALUE),
    "base64, URL-safe": b64(VALUE, urlsafe=True),
    "HTTP Basic": b64(f"{LOGIN}:{VALUE}"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_a_value_is_masked_wherever_it_stands(form: str) -> None:
    text = f"before {FORMS[form]} after"
    assert mask(text) == text, "nothing is masked before the value is registered"
    register(VALUE, login=LOGIN)
    assert mask(text) == "before *** after"
    assert mask(f"x{FORMS[form]}y") == "x***y"  # inside a word too


@pytest.mark.parametrize("prefix", ["", "A", "AB"], ids=["aligned", "shifted 1", "shifted 2"])
@pytest.mark.parametrize("urlsafe", [False, True], ids=["standard", "URL-safe"])
def test_a_value_inside_longer_base64_text_is_masked_at_any_alignment(prefix: str, urlsafe: bool) -> None:
    """`base64 /root/.netrc`: the value is somewhere in the middle, at any of three alignments."""
    register(VALUE, login=LOGIN)
    encoded = b64(prefix + NETRC + "more after it", urlsafe)
    masked = mask(encoded)
    assert masked.count("***") == 1
    # every character that holds only the value's bits is gone: at most one on each side holds
    # a few of them, beside its neighbours'
    assert len(encoded) - len(masked) + 3 >= 8 * len(VALUE) // 6 - 1


def test_a_short_value_is_masked_only_where_it_stands_alone() -> None:
    """A registry password imagekit did not choose: masked as a word, never inside other words."""
    register("hunt3r", login="robot")
    assert mask("password hunt3r, hunt3rs and hunt3r") == "password ***, hunt3rs and ***"
    assert mask(f"Basic {b64('robot:hunt3r')}") == "Basic ***"
    assert mask(b64("hunt3r")) == b64("hunt3r")  # 8 characters of base64 could be anything


def test_masking_reaches_every_error_line_and_every_file(tmp_path: Path) -> None:
    register(VALUE, login=LOGIN)
    assert redact(f"pip said {VALUE}") == "pip said ***"  # no '@' needed
    assert ImagekitError(f"the index refused {VALUE}").message == "the index refused ***"
    assert shown(VALUE) == "'***'"
    # cut after it is masked: a value cut in two by the limit would pass as halves
    long = "x" * 490 + VALUE
    assert one_line(RuntimeError(long)) == "x" * 490 + "***"
    atomic_write(tmp_path / "report.json", json.dumps({"error": f"echo {VALUE}"}))
    assert (tmp_path / "report.json").read_text() == '{"error": "echo ***"}'


def test_forgotten_values_are_shown_again() -> None:
    register(VALUE)
    secret_values.forget_all()
    assert mask(VALUE) == VALUE


def fed(chunks: list[str], limit: int = 1 << 16) -> list[str]:
    lines = Lines(limit)
    out = [line for chunk in chunks for line in lines.feed(chunk)]
    return out + lines.flush()


def test_streamed_output_is_handed_on_as_whole_lines() -> None:
    assert fed(["one\ntw", "o\r", "\nthree\rfour", "\n", "last"]) == ["one", "two", "three", "four", "last"]


@settings(max_examples=200)
@given(st.lists(st.integers(0, len(NETRC) * 2), max_size=6))
def test_a_value_split_across_chunks_is_masked_whole(cuts: list[int]) -> None:
    register(VALUE, login=LOGIN)
    text = NETRC + f"percent {urllib.parse.quote(VALUE, safe='')}\nno newline {VALUE}"
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in itertools.pairwise(points)]
    lines = [mask(line) for line in fed(chunks)]
    assert lines == ["machine index.example.org login ci-bot password ***", "percent ***", "no newline ***"]


@given(st.integers(0, 40))
def test_a_line_past_the_bound_is_cut_where_no_value_spans_the_cut(offset: int) -> None:
    """Bounded: a line that never ends is handed on in pieces of about ``limit`` characters, and a
    value across the place a piece would end goes whole into that piece."""
    secret_values.forget_all()
    register(VALUE)
    text = "a" * (100 - offset) + VALUE + "b" * 300
    pieces = fed([text[i : i + 7] for i in range(0, len(text), 7)], limit=100)
    assert "".join(pieces) == text
    assert all(len(piece) < 100 + 3 * len(VALUE) for piece in pieces)
    assert sum(mask(piece).count("***") for piece in pieces) == 1


def test_a_value_holding_a_control_character_is_masked_before_the_line_is_cleaned() -> None:
    """An error line is masked first, then made printable: a password holding a tab or an escape
    was rewritten by ``printable`` and then matched by nothing (review of issue 45)."""
    secret_values.forget_all()
    value = "pa\tss\x1bword-123"
    register(value)
    try:
        message = ImagekitError(f"token {value} refused").message
        assert message == "token *** refused"
        failed = JobFailed(f"step said {value}", (f"log {value}", "x" * 70_000))
        assert failed.message == "step said ***" and failed.tail[0] == "log ***"
        assert len(failed.tail[1]) <= 2_000  # a report's error_tail line stays one it reads back
    finally:
        secret_values.forget_all()
