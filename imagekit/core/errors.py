"""The errors imagekit reports to a person: one line each, with a distinct exit code.

What a line may hold (no control character, no login) is ``imagekit.core.text``'s.

Every stage raises one of these; the CLI prints ``imagekit: error: <message>`` and exits
with ``exit_code``. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import IntEnum

from imagekit.core.text import LINE_CHARS, redact, safe_line

# A message is a line; where a line puts more before it ("imagekit: error: ", a cell's name and
# state) it is cut to LINE_CHARS again as it is printed.
MESSAGE_CHARS = LINE_CHARS


class ExitCode(IntEnum):
    OK = 0
    CELL_FAILED = 1  # a cell failed (build, verify) or `render --check` found drift
    INVALID_INPUT = 2  # malformed matrix, impossible request, bad usage
    ENVIRONMENT = 3  # Docker engine or registry unreachable, no GPU runtime
    # `rebuild-check`'s two answers that are no error: a script tells them from a failure to check.
    DIFFERS = 4  # the rebuilt image is not the published one (a layer, the config or the manifest)
    INPUTS_CHANGED = 5  # the matrix renders other inputs than the image was built from; nothing built
    # `k8s-results`: some Jobs of the plan reported nothing (each named, with why); the others are
    # recorded. None reporting at all is ENVIRONMENT: the cluster ran no Job to an output.
    INCOMPLETE = 6


class ImagekitError(Exception):
    exit_code: ExitCode = ExitCode.CELL_FAILED

    def __init__(self, message: str) -> None:
        # One line, always: a newline in a message would let input forge extra output lines. And a
        # bounded one: the middle of an over-long line (a value repeated from a file) is left out,
        # keeping the place at its start and the fix at its end.
        # And never a credential: a URL's or a registry's user:password is masked in every message,
        # whatever value put it there (a flag, a matrix key, an engine's or a registry's answer).
        super().__init__(safe_line(message, MESSAGE_CHARS))

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
    # masked before it is cut: a secret cut in two would pass as two halves
    text = " ".join(redact(str(explanation or exc)).split())
    return (text[: limit - 3] + "...") if len(text) > limit else text or type(exc).__name__


class DriftError(ImagekitError):
    """Committed generated files differ from what would be rendered now."""

    exit_code = ExitCode.CELL_FAILED


class RegistryError(ImagekitError):
    """The registry refused one request (4xx other than auth retries; not transient) or answered
    what cannot be used. One line, like every ImagekitError; exit 1 where it is not handled."""


class InputsChanged(ImagekitError):
    """``rebuild-check``: the cell renders another input digest than the image's label (templates,
    wheelhouse, imagekit's version): a rebuild could not be the same image, so none was made."""

    exit_code = ExitCode.INPUTS_CHANGED
