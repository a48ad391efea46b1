"""Text that reaches a person: values from files, flags and servers made safe to show.

The one owner of text cleaning: ``redact`` masks logins (a URL's user part, ``user:password@``
before a host) and every secret value the run knows (``imagekit.core.secret_values``),
``printable`` keeps a value on one line with no control or invisible character, ``shown`` is how
an error line repeats a bad value. Every error line, warning, report view, build log line and
progress line passes through these.
"""

from __future__ import annotations

import re

from imagekit.core.secret_values import mask

# C0 and C1 controls, DEL, and the format characters that reorder or hide text (bidi overrides
# and isolates, zero-width spaces and joiners, the BOM): none may reach a terminal from a value.
_NOT_PRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]"
)


SHOWN_CHARS = 80  # characters of a bad value an error line repeats
# The longest line of an error imagekit prints or writes, its "imagekit: error: " included
# (RELIABILITY.md's bound): a page of terminal, yet room for a path, the engine's reason and the fix.
LINE_CHARS = 2_000
_ELISION = " ... "

# A URL's user part. The look-behind lets a match start only where a scheme can begin, so that a
# long run of letters is scanned once, not once per letter (300,000 of them took minutes).
URL_WITH_USER = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@")
_TOKEN = re.compile(r"[^\s,]+")
_SLASH_OR_AT = re.compile(r"[/@]")
_DIGEST_AFTER_AT = re.compile(r"sha\d+:")  # name:tag@sha256:...: a digest, not a login


def _login_start(token: str, region: int, at: int, region_may_start: bool) -> int | None:
    """Where the ``user:password`` before ``token[at]`` (an '@') begins, if one does.

    ``token[region:at]`` holds no '/' or '@'. A login begins there (when ``region_may_start``:
    the token's start, or after a '/') or after an '='; its user holds no ':' or '='. The
    leftmost such start is found in one pass over the region."""
    if region_may_start:
        start: int | None = region
    else:
        equals = token.find("=", region, at)
        start = equals + 1 if equals >= 0 else None
    while start is not None:
        colon = token.find(":", start, at)
        if colon < 0:
            return None
        equals = token.rfind("=", start, colon)
        if equals >= 0:
            start = equals + 1  # the user would hold '=': the login can only begin after it
        elif colon > start:
            return start
        else:  # an empty user: the next candidate follows an '=' past this colon
            equals = token.find("=", colon, at)
            start = equals + 1 if equals >= 0 else None
    return None


def _mask_logins(token: str) -> str:
    """``user:password@host`` without a scheme, as people write a registry (alone, after '=' in a
    SRC=DST pair, after a '/' where a path swallowed a URL's '//'), masked as ``***@host``."""
    out: list[str] = []
    emitted = region = 0
    for mark in _SLASH_OR_AT.finditer(token):
        at = mark.start()
        if mark.group() == "@" and not _DIGEST_AFTER_AT.match(token, at + 1):
            start = _login_start(token, region, at, region == 0 or token[region - 1] == "/")
            if start is not None and start >= emitted:
                out += [token[emitted:start], "***@"]
                emitted = at + 1
        region = at + 1
    return "".join(out) + token[emitted:] if out else token


def redact(value: str) -> str:
    """``value`` with every login in it (a URL's user part, ``user:password@`` before a host) and
    every form of every secret value registered masked: safe to print or log. Linear in the length
    of ``value``: it runs on every error line and every line of a build's output."""
    value = mask(value)
    if "@" not in value:
        return value
    value = _TOKEN.sub(lambda m: _mask_logins(m.group()) if "@" in m.group() else m.group(), value)
    return URL_WITH_USER.sub(lambda m: m.group(0).replace(m.group(1), "***"), value)


def safe_line(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` as one line a person may read, from whatever printed it: secrets masked first (a
    password holding a tab or an escape is matched before ``printable`` rewrites it), then one line
    of printable characters, then at most ``limit`` of them (a secret is never cut in two first)."""
    return elided(printable(redact(text)), limit)


def shown(value: str) -> str:
    """A bad value as an error line repeats it: redacted, escaped, and cut short."""
    text = repr(redact(value))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 4] + "...'"


def printable(text: str) -> str:
    """``text`` as it may be shown on a terminal or in a log: one line, each control or invisible
    format character replaced by U+FFFD, so that a value read from a file (a cell id, a target
    name, an error) can neither forge a line nor hide or reorder what follows it."""
    return _NOT_PRINTABLE.sub("\ufffd", " ".join(text.splitlines()))


def elided(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` in at most ``limit`` characters: the middle of an over-long one (a value repeated
    from a file, a runaway line of a build) left out, keeping its start (the place) and its end
    (the fix)."""
    if len(text) <= limit:
        return text
    keep = limit - len(_ELISION)
    return text[: keep - keep // 2] + _ELISION + text[len(text) - keep // 2 :]


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 problem``, ``2 problems``, ``0 cells``: every count a person reads, in one place."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
