"""verify: its flags are refused before any engine is asked (the one in these tests is unreachable)."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.unit.cli.samples import M, assert_one_error


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("IMAGE", "--matrix", M), "give images or --matrix, not both"),
        (
            ("--gpus", "bogus", "IMAGE"),
            "--gpus 'bogus': use all, none, a count (2), device=0,1 (as docker takes it) or CDI device names",
        ),
    ],
)
def test_a_wrong_request_is_one_line_exit_2_before_the_engine(args: tuple[str, ...], line: str) -> None:
    result = run_cli("verify", *args)
    assert_one_error(result, line)


def test_without_an_engine_verify_says_so_exit_3() -> None:
    result = run_cli("verify", "IMAGE", "--gpus", "none")
    assert result.exit_code == 3, result
    assert result.stderr.startswith("imagekit: error: cannot reach the Docker engine at unix:///nonexistent/")


@pytest.mark.parametrize("command", [("verify", "img"), ("build", "--verify")])
def test_verify_and_build_refuse_a_bad_gpus_before_any_work(command: tuple[str, ...]) -> None:
    result = run_cli(*command, "--gpus", "many", "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2
    assert result.stderr.startswith("imagekit: error: --gpus 'many': use all, none, a count (2)"), (
        result.stderr
    )
