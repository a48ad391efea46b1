"""The errors imagekit reports to a person: one line each, with a distinct exit code.

Every stage raises one of these; the CLI prints ``imagekit: error: <message>`` and exits
with ``exit_code``. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from enum import IntEnum

# C0 and C1 controls, DEL, and the format characters that reorder or hide text (bidi overrides
# and isolates, zero-width spaces and joiners, the BOM): none may reach a terminal from a value.
_NOT_PRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]"
)


MESSAGE_CHARS = 2_000
SHOWN_CHARS = 80  # characters of a bad value an error line repeats

URL_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@")
# ``user:password@host`` without a scheme, as people write a registry (alone, or after ``=`` in a
# SRC=DST pair, or after a space); not ``name:tag@sha256:...``
HOST_WITH_USER = re.compile(r"(?<![^\s=,])[^/@\s:=,]+:[^/@\s,]*@(?!sha\d+:)")


def redact(value: str) -> str:
    """``value`` with the user part of any URL in it replaced: safe to print or log."""
    value = HOST_WITH_USER.sub("***@", value)
    return URL_WITH_USER.sub(lambda m: m.group(0).replace(m.group(1), "***"), value)


def shown(value: str) -> str:
    """A bad value as an error line repeats it: redacted, escaped, and cut short."""
    text = repr(redact(value))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 4] + "...'"


def printable(text: str) -> str:
    """``text`` as it may be shown on a terminal or in a log: one line, each control or invisible
    format character replaced by U+FFFD, so that a value read from a file (a cell id, a target
    name, an error) can neither forge a line nor hide or reorder what follows it."""
    return _NOT_PRINTABLE.sub("\ufffd", " ".join(text.splitlines()))


class ExitCode(IntEnum):
    OK = 0
    CELL_FAILED = 1  # a cell failed (build, verify) or `render --check` found drift
    INVALID_INPUT = 2  # malformed matrix, impossible request, bad usage
    ENVIRONMENT = 3  # Docker engine or registry unreachable, no GPU runtime


class ImagekitError(Exception):
    exit_code: ExitCode = ExitCode.CELL_FAILED

    def __init__(self, message: str) -> None:
        # One line, always: a newline in a message would let input forge extra output lines. And a
        # bounded one: the middle of an over-long line (a value repeated from a file) is left out,
        # keeping the place at its start and the fix at its end.
        # And never a credential: a URL's or a registry's user:password is masked in every message,
        # whatever value put it there (a flag, a matrix key, an engine's or a registry's answer).
        line = redact(printable(message))
        if len(line) > MESSAGE_CHARS:
            line = f"{line[: MESSAGE_CHARS // 2]} ... {line[-MESSAGE_CHARS // 2 :]}"
        super().__init__(line)

    @property
    def message(self) -> str:
        return str(self.args[0])


class InputError(ImagekitError):
    """The matrix, a template or the command line is wrong; the message names where and the fix."""

    exit_code = ExitCode.INVALID_INPUT


class EnvironmentProblem(ImagekitError):
    """Something outside imagekit is missing or down (Docker engine, registry, GPU runtime)."""

    exit_code = ExitCode.ENVIRONMENT


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one bounded line: the engine's own explanation where it gives one."""
    explanation = getattr(exc, "explanation", None)  # docker's APIError: without the request URL
    text = " ".join(str(explanation or exc).split())
    return (text[: limit - 3] + "...") if len(text) > limit else text or type(exc).__name__


class DriftError(ImagekitError):
    """Committed generated files differ from what would be rendered now."""

    exit_code = ExitCode.CELL_FAILED
