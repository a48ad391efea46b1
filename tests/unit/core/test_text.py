"""Text that reaches a terminal or a file: cut to a bound keeping both ends, rid of what a terminal
would act on, and every login in it masked, in time linear in its length."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.core.errors import InputError
from imagekit.core.text import elided, printable, redact, shown


@pytest.mark.parametrize("length", [0, 1, 5, 6, 1_999, 2_000, 2_001, 2_006, 100_000])
@pytest.mark.parametrize("limit", [6, 7, 2_000])
def test_elided_is_never_longer_than_its_limit_and_keeps_both_ends(length: int, limit: int) -> None:
    text = "a" + "m" * max(length - 2, 0) + "z" if length >= 2 else "a" * length
    cut = elided(text, limit)
    assert cut == text if length <= limit else (len(cut) == limit and " ... " in cut)
    assert cut[:1] == text[:1] and (limit < 7 or cut[-1:] == text[-1:])


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


# What redact masks, written as the plain regular expressions it replaces (quadratic on long
# input, so only fit for short strings): a login after a space, ',', '=' or '/', and a URL's user.
_LOGIN = re.compile(r"(?<![^\s=,/])[^/@\s:=,]+:[^/@\s,]*@(?!sha\d+:)")
_URL_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@")


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.text(alphabet="ab:/@=, .s1ha2", max_size=40))
def test_redact_masks_what_the_plain_expressions_mask(value: str) -> None:
    expected = _URL_USER.sub(lambda m: m.group(0).replace(m.group(1), "***"), _LOGIN.sub("***@", value))
    assert redact(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "A" * 300_000 + "@",  # a run of letters: every letter could begin a scheme
        "=a:" * 100_000 + "/@",  # every '=' could begin a login, and none reaches the @
        "a://" + "b" * 300_000,
        "x:" + "=" * 300_000 + "/@h",
    ],
    ids=["letters", "equals-colon", "one long URL", "equals"],
)
def test_redact_is_linear_in_the_length_of_its_input(value: str) -> None:
    # bounded time, not a benchmark: the quadratic expressions took minutes on these
    started = time.monotonic()
    redact(value)
    InputError(f"m.yaml:1:1: version: {value}")
    assert time.monotonic() - started < 5


def test_a_url_a_path_flag_swallowed_the_double_slash_of_is_masked() -> None:
    # pathlib makes https://u:s3cret@h/l.json into https:/u:s3cret@h/l.json
    assert redact("no lock file at https:/u:s3cret@h/l.json") == "no lock file at https:/***@h/l.json"
