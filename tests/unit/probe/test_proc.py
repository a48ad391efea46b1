"""Processes and files the probe's checks share (imagekit/probe/proc.py): commands bounded in time,
result files written whole, the temporary directory, and the command that runs the probe again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from imagekit.probe import proc, protocol
from tests.unit.probe_runs import clean_env


def test_a_command_is_bounded_and_a_missing_one_is_127() -> None:
    assert proc.run_command([sys.executable, "-c", "print('out'); import sys; sys.exit(3)"]) == (3, "out\n")
    rc, said = proc.run_command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert rc == 124 and said.startswith("timed out after")
    rc, _ = proc.run_command(["/nonexistent/imagekit-probe-tool"])
    assert rc == 127


def test_a_result_file_is_read_only_when_written_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "result.json")
    assert proc.read_result(path) is None  # never written: the child died first
    proc.write_result(path, {"ok": True, "rank": 0})
    assert proc.read_result(path) == {"ok": True, "rank": 0}
    assert not Path(f"{path}.partial").exists()  # the temporary name is gone
    Path(path).write_text("{not json", encoding="utf-8")
    assert proc.read_result(path) is None
    Path(path).write_text("[1, 2]", encoding="utf-8")
    assert proc.read_result(path) is None  # a result is an object, never anything else


def test_the_temporary_directory_is_tmpdir_when_writable(tmp_path: Path) -> None:
    assert proc.temp_root({"TMPDIR": str(tmp_path)}) == str(tmp_path)
    assert proc.temp_root({"TMPDIR": str(tmp_path / "missing")}) == "/tmp"


def test_the_probe_runs_itself_again_from_the_source_tree(tmp_path: Path) -> None:
    """A bounded task or a collective rank is this probe run again: from the source tree (the
    host's tests) that is the package's check run, whatever its module is called."""
    command = proc.self_command()
    assert command[0] == sys.executable and command[1] == "-c"
    done = subprocess.run(
        [*command, protocol.ONLY_OPTION, protocol.PYTHON],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode in (protocol.EXIT_OK, protocol.EXIT_FAILED), done.stderr
    document = json.loads(done.stdout)
    assert [c["name"] for c in document["checks"]][:2] == [protocol.ENVIRONMENT, protocol.PYTHON]
