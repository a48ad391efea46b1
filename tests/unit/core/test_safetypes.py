"""The checked values every file goes through: bounded, printable ASCII, free of credentials."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from imagekit.core.safetypes import (
    CellId,
    FreeText,
    ImageReference,
    Registry,
    SafeString,
    Url,
    character_name,
)

PLAIN = SafeString(r"[A-Za-z0-9._-]+", "plain text", "abc", max_length=64)


@settings(max_examples=300, deadline=1000, derandomize=True)
@given(st.text(min_size=1, max_size=300))
def test_a_safe_string_is_printable_ascii_of_bounded_length(value: str) -> None:
    problem = PLAIN.problem(value)
    ok = len(value) <= 64 and all(c.isascii() and (c.isalnum() or c in "._-") for c in value)
    assert (problem is None) == ok, (value, problem)
    if problem is not None:
        assert "\n" not in problem and len(problem) < 500  # one short line, whatever the value


@settings(max_examples=200, deadline=1000, derandomize=True)
@given(st.characters(blacklist_categories=("Cs",)).filter(lambda c: not " " < c < "\x7f"))
def test_every_invisible_or_non_ascii_character_is_named(char: str) -> None:
    problem = PLAIN.problem(f"ab{char}c")
    assert problem is not None
    if char not in "\n\r\t ":
        assert f"U+{ord(char):04X}" in problem


def test_characters_are_named_by_code_point() -> None:
    assert character_name("\u202e") == "U+202E RIGHT-TO-LEFT OVERRIDE"
    assert character_name("\x07") == "U+0007 a control character"


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cret@pypi.example.org/simple",
        "https://alice@pypi.example.org/simple",
        "http://:s3cret@deb.example.org/debian",
        "https://pypi.example.org/simple?token=s3cret",
        "https://pypi.example.org/simple?x=1&Api_Key=s3cret",
    ],
)
def test_credentials_in_a_url_are_refused_and_never_repeated(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(Url).validate_python(url)
    message = caught.value.errors()[0]["msg"]
    assert "credential" in message and "s3cret" not in message and "alice" not in message
    assert "wheelhouse" in message


@pytest.mark.parametrize(
    ("adapter_type", "value", "ok"),
    [
        (Registry, "ghcr.io", True),
        (Registry, "localhost:65535", True),
        (Registry, "localhost:65536", False),
        (Registry, "localhost:99999999", False),
        (ImageReference, "127.0.0.1:5000/a/b:tag", True),
        (ImageReference, "127.0.0.1:70000/a/b:tag", False),
        (ImageReference, "a/" + "b" * 500, False),
        (ImageReference, "sha256:" + "a" * 64, True),
        (CellId, "cuda-ubuntu22.04-torch2.1.2-cuda12.1-py3.10-devel", True),
        (CellId, "../../etc", False),
        (CellId, "<img src=x>", False),
        (CellId, "a" * 241, False),
        (Url, "https://pypi.example.org:8443/simple", True),
        (Url, "https://pypi.example.org:99999/simple", False),
    ],
)
def test_bounds_and_ports(adapter_type: object, value: str, ok: bool) -> None:
    adapter: TypeAdapter[str] = TypeAdapter(adapter_type)
    if ok:
        assert adapter.validate_python(value) == value
    else:
        with pytest.raises(ValidationError):
            adapter.validate_python(value)


def test_free_text_is_bounded_but_free() -> None:
    assert FreeText(10).problem("<b>'$(x)'</b>"[:10]) is None
    assert FreeText(10).problem("x" * 11) == "is 11 characters long; at most 10"
