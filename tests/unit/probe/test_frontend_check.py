"""The front-end check script's pure parts, outside an image (its real runs are in
tests/integration/test_frontends.py): arguments, and a missing server counted as a failure."""

from __future__ import annotations

import json

import pytest

from imagekit.probe import frontend as check


def test_arguments_come_from_the_labels_or_the_environment() -> None:
    expect = check.parse_args(["--frontend", "ssh", "--expect-uid", "1000", "--expect-user", "dev"], {})
    assert (expect.frontend, expect.uid, expect.user, expect.jupyterlab) == ("ssh", 1000, "dev", None)
    from_env = check.parse_args([], {"IMAGEKIT_FRONTEND": "jupyter", "IMAGEKIT_EXPECT_JUPYTERLAB": "4.6.6"})
    assert (from_env.frontend, from_env.jupyterlab) == ("jupyter", "4.6.6")


@pytest.mark.parametrize("argv", [[], ["--frontend", "vnc"], ["--frontend", "ssh", "--expect-uid", "x"]])
def test_bad_arguments_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(argv, env={}) == 2
    assert "bad arguments" in capsys.readouterr().err


def test_outside_a_front_end_image_every_check_reports_and_the_run_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No entrypoint, no user, no server here: the checks fail with causes, none passes by accident."""
    code = check.main(
        ["--frontend", "ssh", "--expect-user", "nobody-here", "--entrypoint", "/nonexistent/entrypoint.sh"],
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["kind"] == "frontend" and not document["summary"]["ok"]
    by_name = {c["name"]: c for c in document["checks"]}
    assert by_name["user"]["status"] == "fail" and by_name["user"]["cause"]
    assert by_name["ssh_login"]["status"] != "pass"
    assert all(c["status"] != "fail" or c["cause"] for c in document["checks"])
