"""bake-import: without bake's metadata file, one line naming the flag; nothing recorded."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.unit.cli.samples import M


def test_a_missing_metadata_file_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    metadata, state = tmp_path / "bake-metadata.json", tmp_path / "state"
    paths = ("--metadata-file", str(metadata), "--state-dir", str(state))
    result = run_cli("bake-import", *paths, "--matrix", M)
    assert result.exit_code == 2, result
    assert result.stderr == (
        f"imagekit: error: no bake metadata file at {metadata}; pass bake's --metadata-file\n"
    )
    assert not state.exists()
