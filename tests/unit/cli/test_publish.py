"""publish: a dry run reads and writes nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import run_cli
from tests.unit.cli.samples import V1_STATE, M


def test_a_publish_dry_run_only_reads_the_state(tmp_path: Path) -> None:
    # no lock file, no state directory made: a read-only checkout can preview a publication
    state = tmp_path / "state"
    shutil.copytree(V1_STATE, state)
    preview = ("publish", "--matrix", M, "--registry", "127.0.0.1:9", "--dry-run")
    result = run_cli(*preview, "--state-dir", str(state))
    assert result.exit_code == 1 and "would publish 0, refused 29" in result.stderr, result.stderr
    assert [p.name for p in state.iterdir()] == ["report.json"]
    missing = tmp_path / "nothing-here"
    result = run_cli(*preview, "--state-dir", str(missing))
    assert result.exit_code == 2 and "no build report at" in result.stderr, result.stderr
    assert not missing.exists()
