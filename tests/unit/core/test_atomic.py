"""Whole-file writes: a reader sees the old file or the new one, never half; nothing is written
through a symbolic link or over what is not a regular file; a set of files is checked whole before
the first is written; a secret the run knows is written masked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagekit.core import secret_values
from imagekit.core.atomic import atomic_write, atomic_write_all, open_new
from imagekit.core.errors import InputError


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "report.json"
    atomic_write(path, "old\n")  # its directories made as needed
    assert path.read_text() == "old\n"
    inode = path.stat().st_ino
    atomic_write(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_ino != inode  # renamed over, not rewritten
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.json"
    atomic_write(path, "old\n")

    def interrupted(self: Path, target: Path) -> Path:
        raise KeyboardInterrupt  # Ctrl-C between writing the temporary and renaming it

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_leftover_temporary_of_a_killed_writer_is_replaced(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "out.txt"
    leftover = tmp_path / f".out.txt.{os.getpid()}.{threading.get_ident()}.tmp"
    leftover.write_text("half of an old write")
    atomic_write(path, "whole\n")
    assert path.read_text() == "whole\n" and not leftover.exists()


def test_nothing_is_written_through_a_link_or_over_what_is_no_regular_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "link.json").symlink_to(elsewhere)
    os.mkfifo(out / "fifo.json")
    (out / "dir.json").mkdir()
    for name in ("link.json", "fifo.json", "dir.json"):
        with pytest.raises(InputError) as caught:
            atomic_write(out / name, "x", inside=out)
        assert str(out / name) in caught.value.message and "\n" not in caught.value.message
        with pytest.raises(InputError):
            open_new(out / name, inside=out)
    assert elsewhere.read_text() == "keep\n"
    # a linked directory between the one asked for and the file
    (out / "sub").symlink_to(tmp_path)
    with pytest.raises(InputError):
        atomic_write(out / "sub" / "x.json", "x", inside=out)
    assert not (tmp_path / "x.json").exists()


def test_a_set_of_files_is_checked_whole_before_the_first_is_written(tmp_path: Path) -> None:
    first, last = tmp_path / "a" / "Dockerfile", tmp_path / "b" / "Dockerfile"
    first.parent.mkdir()
    last.mkdir(parents=True)  # a directory where the last file goes
    with pytest.raises(InputError):
        atomic_write_all({first: "FROM a\n", last: "FROM b\n"}, inside=tmp_path)
    assert not first.exists()
    last.rmdir()
    atomic_write_all({first: "FROM a\n", last: "FROM b\n"}, inside=tmp_path)
    assert first.read_text() == "FROM a\n" and last.read_text() == "FROM b\n"


def test_open_new_replaces_a_file_and_makes_its_directories(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "cell.log"
    with open_new(path, inside=tmp_path) as handle:
        handle.write("first\n")
    with open_new(path, inside=tmp_path) as handle:
        handle.write("second\n")
    assert path.read_text() == "second\n"


def test_a_secret_the_run_knows_is_written_masked(tmp_path: Path) -> None:
    secret_values.register("s3cret-Write-Value")
    try:
        atomic_write(tmp_path / "log.txt", "the engine said: s3cret-Write-Value is wrong\n")
    finally:
        secret_values.forget_all()
    written = (tmp_path / "log.txt").read_text()
    assert "s3cret-Write-Value" not in written and "is wrong" in written
