"""What every command shares: the one line of an error (said, or a usage error's)."""

from __future__ import annotations

import pytest

from imagekit.cli.app import say
from imagekit.core.errors import InputError
from imagekit.core.text import LINE_CHARS
from testbed.imagekit_process import imagekit
from tests.conftest import run_cli


def test_a_line_said_is_bounded_with_its_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """A cell's error of the bound's length, with "imagekit: failed: <cell>: " and its log's path
    around it, was printed past the bound."""
    say("failed", "cell-a: " + InputError("step 3: " + "x" * 100_000 + " (fix)").message + " (log: l)")
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) == LINE_CHARS
    assert line.startswith("imagekit: failed: cell-a: step 3: xxx") and line.endswith("(fix) (log: l)")


# -- usage errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("plan", "--no-such-option"), "No such option: --no-such-option; see `imagekit plan --help`"),
        (("build", "--jobs", "0"), "Invalid value for '--jobs' / '-j': "),
        # bounded: a Job's int32 fields, and timeouts that would overflow a socket's
        (("k8s", "--deadline", "99999999999"), "Invalid value for '--deadline': "),
        (("k8s", "--backoff-limit", "3000000000"), "Invalid value for '--backoff-limit': "),
        (("verify", "--verify-timeout", "1e308"), "Invalid value for '--verify-timeout': "),
        (("build", "--timeout", "1e308"), "Invalid value for '--timeout': "),
        (
            ("report", "--state-dir", "/dev/null"),
            "Invalid value for '--state-dir': '/dev/null' exists and is not a",
        ),
        # an empty path is not the current directory: pathlib would make it '.', and files land there
        (("render", "--out", ""), "Invalid value for '--out': is empty"),
        (("render", "--cst", ""), "Invalid value for '--cst': is empty"),
        (("matrix", "--format", "bake", "--context-dir", ""), "Invalid value for '--context-dir': is empty"),
        (("k8s", "--out", ""), "Invalid value for '--out': is empty"),
        (("report", "--state-dir", ""), "Invalid value for '--state-dir': is empty"),
        (("no-such-command",), "No such command 'no-such-command'"),
        (("verify", "--gpus"), "Option '--gpus' requires an argument"),
    ],
)
def test_a_usage_error_is_one_line_exit_2(args: tuple[str, ...], line: str) -> None:
    """Outside a terminal (CI, pipes): one `imagekit: error:` line like every other error, no box."""
    result = run_cli(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"imagekit: error: {line}") and result.stderr.count("\n") == 1, (
        result.stderr
    )
    assert "╭" not in result.stderr and "Usage:" not in result.stderr


def test_usage_errors_in_a_real_process_are_one_line() -> None:
    done = imagekit("render", "--bogus", timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("imagekit: error: No such option: --bogus")
    assert done.stderr.endswith("; see `python -m imagekit render --help`\n") and done.stderr.count("\n") == 1
