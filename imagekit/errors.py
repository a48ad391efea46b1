"""The errors imagekit reports to a person: one line each, with a distinct exit code.

Every stage raises one of these; the CLI prints ``imagekit: error: <message>`` and exits
with ``exit_code``. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    CELL_FAILED = 1  # a cell failed (build, verify) or `render --check` found drift
    INVALID_INPUT = 2  # malformed matrix, impossible request, bad usage
    ENVIRONMENT = 3  # Docker engine or registry unreachable, no GPU runtime


class ImagekitError(Exception):
    exit_code: ExitCode = ExitCode.CELL_FAILED

    def __init__(self, message: str) -> None:
        # One line, always: a newline in a message would let input forge extra output lines.
        super().__init__(" ".join(message.splitlines()))

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
