"""k8s-results: the cluster's name and the plan are checked before the state is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--cluster", ""), "--cluster: (top level): must not be empty; name it like prod-east"),
        (("--cluster", "prod"), "--plan {plan}: no such file; `imagekit k8s --validate-on` writes it"),
    ],
)
def test_a_missing_name_or_plan_is_one_line_and_touches_no_state(
    args: tuple[str, ...], line: str, tmp_path: Path
) -> None:
    plan, state = tmp_path / "validate-on.plan", tmp_path / "state"
    result = run_cli("k8s-results", *args, "--plan", str(plan), "--state-dir", str(state))
    assert result.exit_code == 2, result
    assert result.stderr == f"imagekit: error: {line.format(plan=plan)}\n"
    assert not state.exists()
