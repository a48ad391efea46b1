"""images: the lock printed for other tools; without one, the command that writes it."""

from __future__ import annotations

from pathlib import Path

from imagekit.report.lockfile import merge_lock, read_lock, render_lock
from tests.conftest import run_cli
from tests.unit.report_samples import lock_entry


def test_without_a_lock_images_names_the_command_that_writes_one(tmp_path: Path) -> None:
    result = run_cli("images", "--lock", str(tmp_path / "images.lock.json"))
    assert result.exit_code == 2
    assert result.stderr == (
        f"imagekit: error: no lock file at {tmp_path / 'images.lock.json'}; run `imagekit publish` first\n"
    )


def test_images_prints_the_lock_in_the_format_asked(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, {"a": lock_entry("a"), "b": lock_entry("b")})
    for output_format in ("json", "yaml", "env"):
        result = run_cli("images", "--lock", str(lock), "--format", output_format)
        assert result.exit_code == 0, result
        assert result.stdout == render_lock(read_lock(lock), output_format)
