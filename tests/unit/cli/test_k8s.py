"""k8s: its flags are checked before the matrix or the lock is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.cli.samples import assert_one_error


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--command", ""), "--command is empty"),
        (("--command", "echo 'x"), "--command: No closing quotation"),
    ],
)
def test_a_wrong_flag_is_one_line_exit_2(args: tuple[str, ...], line: str, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    lock = tmp_path / "images.lock.json"
    result = run_cli("k8s", *args, "--out", str(out), "--lock", str(lock))
    assert_one_error(result, line)
    assert not out.exists()


@pytest.mark.parametrize(
    ("value", "count"), [("0", 0), ("none", 0), ("1", 1), ("8", 8), ("064", 64), (" 4 ", 4)]
)
def test_k8s_reads_gpus_as_verify_does_and_asks_for_a_count(value: str, count: int) -> None:
    """--gpus is one type on every command (its text, read by GpuRequest.parse): k8s takes the
    counts it took as an int, 0 to 64, and none, verify's spelling of 0."""
    from imagekit.cli.k8s import _gpus_per_job

    assert _gpus_per_job(value) == count


@pytest.mark.parametrize("value", ["many", "65", "-1", "all", "device=0,1", "cdi:nvidia.com/gpu=all", "1.5"])
def test_k8s_refuses_gpus_that_are_no_count_in_one_line(value: str) -> None:
    """Before: click's int ("'many' is not a valid integer"); now the same reading as verify's, and
    what a Job's extended resource cannot ask for (all GPUs, named devices) said as the fix."""
    result = run_cli("k8s", "--gpus", value, "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2
    assert result.stderr == (
        f"imagekit: error: --gpus {value!r}: a Job asks for a count of GPUs, 0 to 64 (like --gpus 8)\n"
    )
