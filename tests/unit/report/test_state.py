"""The state directory's lock: one holder at a time (its pid written, a second refused), released when
the body raises, and never a way to truncate or block on another file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.report.state import state_lock
from tests.conftest import REPO

# -- the state lock ----------------------------------------------------------------------------------------


def test_state_lock_writes_the_holders_pid_and_refuses_a_second_holder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "lock").write_text("4194303 left over by a crashed build\n")
    with state_lock(state):
        assert (state / "lock").read_text() == f"{os.getpid()}\n"
        for _ in range(2):  # the refused attempt must not release the first holder's lock
            with pytest.raises(EnvironmentProblem) as caught, state_lock(state):
                pytest.fail("a second holder got the lock")
            assert f"(pid {os.getpid()})" in caught.value.message
            assert str(state / "lock") in caught.value.message
    with state_lock(state):  # released on exit
        pass


def test_state_lock_is_released_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(KeyError), state_lock(tmp_path):
        raise KeyError("x")
    with state_lock(tmp_path):
        pass


def test_state_lock_held_by_another_process(tmp_path: Path) -> None:
    holder = (
        "import sys\nfrom pathlib import Path\nfrom imagekit.report.state import state_lock\n"
        "with state_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    sys.stdin.readline()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline() == "held\n"
        with (
            pytest.raises(EnvironmentProblem, match=rf"another `imagekit build` \(pid {process.pid}\) holds"),
            state_lock(tmp_path),
        ):
            pass
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with state_lock(tmp_path):
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"


def test_the_state_lock_never_truncates_another_file_through_a_hard_link(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    os.link(precious, state / "lock")
    with pytest.raises(InputError, match="hard link"), state_lock(state):
        pytest.fail("the lock was taken through a hard link")
    assert precious.read_text() == "keep me\n"


def test_the_state_lock_is_no_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "lock")
    with pytest.raises(InputError, match="no regular file"), state_lock(tmp_path):
        pytest.fail("a FIFO was taken for the lock")
