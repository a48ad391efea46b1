"""tests/unit/test_repo_files.py's slow tests: shell completion is asked of the real command, in a process
each time."""

from __future__ import annotations

from tests.unit.test_repo_files import _complete


def test_shell_completion_offers_commands_and_paths() -> None:
    # whatever shell runs the suite: --show-completion detects the parent shell and fails without one
    assert _complete("imagekit ren") == ["render"] and "report" in _complete("imagekit re")
    assert _complete("imagekit render --matrix matr") == ["matrix.yaml"]
    assert _complete("imagekit render --out dockerfiles/gen") == ["dockerfiles/generated/"]
