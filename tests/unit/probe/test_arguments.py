"""The probe's arguments (imagekit/probe/arguments.py): options over the environment, check names
checked, the internal child roles hidden from --help and needing their result file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from imagekit.probe import (
    arguments,
    protocol,
)
from tests.unit.probe_runs import (
    SCRIPT,
    clean_env,
)


def test_arguments_win_over_environment() -> None:
    expect, _ = arguments.parse_args(
        ["--expect-torch", "2.1.2"], {"IMAGEKIT_EXPECT_TORCH": "2.0.0", "IMAGEKIT_EXPECT_CUDA": "12.1"}
    )
    assert expect.torch == "2.1.2"
    assert expect.cuda == "12.1"
    assert arguments.parse_args([], {"IMAGEKIT_REQUIRE_GPU": "1"})[0].require_gpu is True


def test_worker_invocation_needs_its_result_file() -> None:
    with pytest.raises(arguments.ArgumentError, match="--result-file"):
        arguments.parse_args(["--collective-worker", "0", "2", "1234", "gloo"], {})
    _, invocation = arguments.parse_args(
        ["--collective-worker", "0", "2", "1234", "gloo", "--result-file", "/tmp/r.json"], {}
    )
    assert invocation.worker == ("0", "2", "1234", "gloo") and invocation.result_file == "/tmp/r.json"


def test_help_works_and_hides_the_internal_roles() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, env=clean_env(), check=False
    )
    assert done.returncode == 0
    assert "--only" in done.stdout and "--skip" in done.stdout
    assert "--task" not in done.stdout and "--collective-worker" not in done.stdout


def test_parse_args_check_names() -> None:
    _, invocation = arguments.parse_args(["--only", "gemm_gpu, gemm_perf", "--only", "nccl"], {})
    assert invocation.only == ("gemm_gpu", "gemm_perf", "nccl")
    with pytest.raises(arguments.ArgumentError, match="unknown check gemm"):
        arguments.parse_args(["--skip", "gemm"], {})
    assert set(protocol.CHECK_NAMES) >= {"compile", "extension", "train_step", "gemm_perf"}
