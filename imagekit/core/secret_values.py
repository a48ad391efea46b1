"""The secret values this run knows, masked in everything imagekit prints or writes.

A value imagekit reads to hand on (an index token for a BuildKit secret, a registry password) is
registered here where it is read; from then on ``mask`` replaces it with ``***`` wherever it shows,
whoever printed it first: a build step that prints the netrc, pip echoing a URL, a server repeating
a login, an engine's error. ``imagekit.core.text.redact`` (every error line, warning, report value)
and ``imagekit.core.atomic`` (every file imagekit writes whole) apply it; the build log and the
progress lines apply ``redact``.

Not the value alone: the forms a tool prints it in are masked too. URL percent-encoding (of any of
its characters, in either case of hex) and JSON escaping, in any mix; its hex; its base64, standard
and URL-safe, alone or as HTTP Basic's ``login:value``, and inside any longer base64 text (``base64
/root/.netrc``: the value at each of the three alignments, less the characters it shares with its
neighbours). A form split across lines (``base64`` wraps at 76 characters), or made by any other
transformation, is not masked: a step that means to print a secret can.

A value shorter than ``SECRET_MIN_CHARS`` (a registry password imagekit did not choose; an index
secret that short is refused where it is read) is masked only where it stands alone, not inside a
longer word, and in none of its encodings but HTTP Basic's.

The registry lives as long as the process: each command is one process and one run, and a report
is written after the builds that printed into it. Streamed output is masked on whole lines
(``Lines``): a value split across two chunks is never two halves that each pass.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass

from imagekit.core.limits import SECRET_MIN_CHARS, STREAM_LINE_CHARS

MASK = "***"
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]")  # never percent-encoded (RFC 3986)
_ALONE_BEFORE, _ALONE_AFTER = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class _Known:
    """What is masked now: one pattern of every form of every value, and its longest match."""

    pattern: re.Pattern[str] | None = None
    longest: int = 0


class _Registry:
    """The values registered, in order, and what masks them (replaced whole, read without a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[tuple[str, str | None], None] = {}  # (value, login)
        self.known = _Known()


_registry = _Registry()


def _character(char: str) -> tuple[str, int]:
    """A pattern of one character of a value as tools print it, and its longest match."""
    forms = {re.escape(char): len(char)}
    if not _UNRESERVED.fullmatch(char):
        encoded = "".join(f"%{byte:02X}" for byte in char.encode())
        forms[f"(?i:{re.escape(encoded)})"] = len(encoded)
    escaped = json.dumps(char)[1:-1]
    if escaped != char:
        forms[re.escape(escaped)] = len(escaped)
    if char == "/":
        forms[re.escape("\\/")] = 2  # JSON may escape a slash
    pattern = next(iter(forms)) if len(forms) == 1 else f"(?:{'|'.join(forms)})"
    return pattern, max(forms.values())


def _base64(data: bytes, standalone: bool) -> set[str]:
    """``data``'s base64, standard and URL-safe: the whole encoding with and without its padding and, unless
    ``standalone``, the characters that hold only its bits at each of the three alignments it
    may have inside a longer encoding."""
    encoded: set[str] = set()
    for shift in (0,) if standalone else (0, 1, 2):
        text = base64.b64encode(b"\0" * shift + data).decode()
        if standalone:
            encoded |= {text, text.rstrip("=")}
        else:  # character i holds bits 6i..6i+5: keep those wholly inside the value's bits
            first = (8 * shift + 5) // 6
            encoded.add(text[first : 8 * (shift + len(data)) // 6])
    return encoded | {text.replace("+", "-").replace("/", "_") for text in encoded}


def _forms(value: str, login: str | None) -> dict[str, int]:
    """Each pattern that masks ``value`` and its longest match."""
    basic = f"{login}:{value}".encode() if login else b""
    forms = {re.escape(t): len(t) for t in _base64(basic, standalone=True)} if basic else {}
    if len(value) < SECRET_MIN_CHARS:  # where it stands alone; HTTP Basic's form if long enough
        forms = {form: size for form, size in forms.items() if size >= SECRET_MIN_CHARS}
        forms[_ALONE_BEFORE + re.escape(value) + _ALONE_AFTER] = len(value)
        return forms
    characters = [_character(char) for char in value]
    forms["".join(p for p, _ in characters)] = sum(size for _, size in characters)
    data = value.encode()
    forms[f"(?i:{data.hex()})"] = 2 * len(data)
    forms |= {re.escape(t): len(t) for t in _base64(data, True) | _base64(data, False)}
    return forms


def register(value: str, login: str | None = None) -> None:
    """Mask ``value`` (and ``login:value`` as HTTP Basic sends it) in everything imagekit prints or
    writes from now on, for the rest of the process."""
    if not value:
        return
    with _registry.lock:
        if (value, login) in _registry.values:
            return
        _registry.values[value, login] = None
        forms: dict[str, int] = {}
        for known_value, known_login in _registry.values:
            forms |= _forms(known_value, known_login)
        # The longest form first: at one place, a whole encoding wins over the part of it that
        # another form is (a standalone base64 over its aligned core).
        ordered = sorted(forms, key=lambda form: -forms[form])
        _registry.known = _Known(re.compile("|".join(ordered)), max(forms.values()))


def forget_all() -> None:
    """Forget every value: for a process that runs several commands one after another (the tests)."""
    with _registry.lock:
        _registry.values.clear()
        _registry.known = _Known()


def mask(text: str) -> str:
    """``text`` with every form of every registered value replaced by ``***``."""
    pattern = _registry.known.pattern
    return text if pattern is None else pattern.sub(MASK, text)


def _safe_cut(text: str, at: int) -> int:
    """``at``, or past it where a form of a value spans it: a cut there would split the value."""
    known = _registry.known
    if known.pattern is None:
        return at
    for found in known.pattern.finditer(text, max(0, at - known.longest), at + known.longest):
        if found.start() >= at:
            break
        if found.end() > at:
            return found.end()
    return at


class Lines:
    """Streamed text (an engine's chunks) as whole lines, without their line ends, to be masked.

    A chunk's unfinished last line is kept until its end comes. Bounded: a line that grows past
    ``limit`` characters (and the longest form of a value past that) is handed on in pieces, each
    cut where no form of a value spans the cut."""

    def __init__(self, limit: int = STREAM_LINE_CHARS) -> None:
        self._limit = limit
        self._pending = ""

    def feed(self, text: str) -> list[str]:
        buffer = self._pending + text
        lines: list[str] = []
        start = 0
        for end in _LINE_END.finditer(buffer):
            if end.group() == "\r" and end.end() == len(buffer):
                break  # perhaps the first half of a "\r\n"
            lines.append(buffer[start : end.start()])
            start = end.end()
        self._pending = buffer[start:]
        while len(self._pending) >= self._limit + _registry.known.longest:
            cut = _safe_cut(self._pending, self._limit)
            lines.append(self._pending[:cut])
            self._pending = self._pending[cut:]
        return lines

    def flush(self) -> list[str]:
        """The unfinished last line, if any (the stream, or the step printing it, has ended)."""
        rest, self._pending = self._pending.rstrip("\r"), ""
        return [rest] if rest else []
