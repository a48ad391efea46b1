"""What a full run read (imagekit.builds.read_recorder): the files it opened for reading, the
directories it listed, whether it started a process; writes and the state directory left out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from imagekit.builds.read_recorder import ReadRecorder, ignored_dirs, unrecorded
from imagekit.core.paths import depends_on


def test_the_recorder_sees_reads_listings_and_processes_not_writes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "read.txt").write_text("x")
    (state / "report.json").write_text("{}")
    with ReadRecorder(ignored_dirs(state)) as reads:
        (tmp_path / "read.txt").read_bytes()
        fd = os.open(tmp_path / "read.txt", os.O_RDONLY)
        os.close(fd)
        (tmp_path / "written.txt").write_text("y")
        fd = os.open(tmp_path / "flags.txt", os.O_WRONLY | os.O_CREAT)
        os.close(fd)
        (state / "report.json").read_text()  # the state directory is the run's output, not its input
        (tmp_path / "listed").mkdir()
        list((tmp_path / "listed").iterdir())
        depends_on(tmp_path / "stat-only.whl")
    assert reads.files == {str(tmp_path / "read.txt"), str(tmp_path / "stat-only.whl")}
    assert reads.directories == {str(tmp_path / "listed")}
    assert not reads.started_process
    (tmp_path / "read.txt").read_bytes()  # after the run: not recorded
    assert str(tmp_path / "read.txt") in reads.files and len(reads.files) == 2
    with ReadRecorder(()) as reads:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert reads.started_process
    # how a build would run (buildx's discovery) is kept out; what is read after it counts again
    with ReadRecorder(()) as reads:
        with unrecorded():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            (tmp_path / "read.txt").read_bytes()
        (tmp_path / "listed" / "after.txt").write_text("z")
        (tmp_path / "listed" / "after.txt").read_bytes()
    assert not reads.started_process and reads.files == {str(tmp_path / "listed" / "after.txt")}
    keys = {k[0]: k[1:] for k in ReadRecorder((), files={str(tmp_path / "gone")}).inputs(set())}
    assert keys[str(tmp_path / "gone")] == (-1, 0, 0, 0)  # absent is an answer too
