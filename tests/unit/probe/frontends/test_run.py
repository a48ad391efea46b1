"""The front-end check's run (imagekit/probe/frontends/run.py), outside an image (its real runs
are in tests/integration/test_frontends.py): bad arguments exit 2, and a missing server counts
as a failure."""

from __future__ import annotations

import json

import pytest

from imagekit.probe.frontends import run


@pytest.mark.parametrize("argv", [[], ["--frontend", "vnc"], ["--frontend", "ssh", "--expect-uid", "x"]])
def test_bad_arguments_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(argv, env={}) == 2
    assert "bad arguments" in capsys.readouterr().err


def test_outside_a_front_end_image_every_check_reports_and_the_run_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No entrypoint, no user, no server here: the checks fail with causes, none passes by accident."""
    code = run.main(
        ["--frontend", "ssh", "--expect-user", "nobody-here", "--entrypoint", "/nonexistent/entrypoint.sh"],
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["kind"] == "frontend" and not document["summary"]["ok"]
    by_name = {c["name"]: c for c in document["checks"]}
    assert by_name["user"]["status"] == "fail" and by_name["user"]["cause"]
    assert by_name["ssh_login"]["status"] != "pass"
    assert all(c["status"] != "fail" or c["cause"] for c in document["checks"])
