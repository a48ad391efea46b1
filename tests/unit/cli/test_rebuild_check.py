"""rebuild-check: what it takes is refused in one line before any engine or registry is asked."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.unit.cli.samples import M, assert_one_error

BY_DIGEST = "127.0.0.1:5000/team/torch@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("127.0.0.1:5000/team/torch:1",),
            "'127.0.0.1:5000/team/torch:1': rebuild-check takes an image by digest",
        ),
        (
            (BY_DIGEST, "--platform", "linux/s390x"),
            "--platform 'linux/s390x': not one of linux/amd64, linux/arm64",
        ),
    ],
)
def test_a_wrong_target_is_one_line_exit_2(
    args: tuple[str, ...], line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    result = run_cli("rebuild-check", *args, "--matrix", M)
    assert_one_error(result, line)
