"""tests/unit/test_device_check.py's slow tests: bench/device_check.sh runs for real, with the torch CPU
wheel as python3, and once past its bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from imagekit.probe import protocol
from imagekit.render.probe_bundle import build_zipapp
from tests.unit.probe_runs import by_name, clean_env
from tests.unit.test_device_check import _bash, _running


def test_it_runs_the_shipped_probe_and_a_missing_gpu_fails(torch_python: str, tmp_path: Path) -> None:
    prepared = tmp_path / "prepared" / "check.py"
    here = clean_env(IMAGEKIT_PYTHON=sys.executable, DEVICE_CHECK_PROBE=str(prepared))
    made = _bash("prepare", env=here, timeout=120)
    assert made.returncode == 0, made.stderr
    assert prepared.read_bytes() == build_zipapp("check")  # the artifact every image carries

    out = tmp_path / "out"
    # As on the lent machine: python3 is the interpreter that holds torch; no nvcc, no nvidia-smi.
    # compile (inductor's C++ build, ~2 minutes on CPU here) is left out through the probe options
    # the script passes on; its GPU half fails like the others on a real run (see the log).
    there = clean_env(
        PATH=f"{Path(torch_python).parent}:/usr/bin:/bin", OUT=str(out), DEVICE_CHECK_PROBE=str(prepared)
    )
    done = _bash("--skip", protocol.COMPILE, env=there)
    assert done.returncode == protocol.EXIT_FAILED, done.stderr
    assert (out / "check.py").read_bytes() == build_zipapp("check")
    document = json.loads((out / "device-check.json").read_text(encoding="utf-8"))
    assert document["schema"] == protocol.SCHEMA
    assert tuple(document) == protocol.DOCUMENT_FIELDS
    assert tuple(document["summary"]) == protocol.SUMMARY_FIELDS
    assert [c["name"] for c in document["checks"]] == list(protocol.CHECK_NAMES)
    assert all(tuple(c) == protocol.RESULT_FIELDS for c in document["checks"])
    checks = by_name(document)

    # the expectations were read from that python3, so its own checks pass
    seen = subprocess.run(
        [
            torch_python,
            "-c",
            "import sys, torch; print(torch.__version__.split('+')[0], *sys.version_info[:2])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert document["expected"]["torch"] == seen[0]
    assert document["expected"]["python"] == f"{seen[1]}.{seen[2]}"
    assert document["expected"]["cuda"] == "cpu"
    assert document["expected"]["require_gpu"] is True
    for name in (protocol.PYTHON, protocol.TORCH, protocol.TORCH_CUDA):
        assert checks[name]["status"] == protocol.PASS, checks[name]
    # --require-gpu and no GPU: the GPU checks fail, never skip
    for name in (protocol.NVIDIA_SMI, *protocol.VALIDATING_GPU_CHECKS):
        assert checks[name]["status"] == protocol.FAIL, checks[name]
    assert not document["summary"]["ok"] and document["gpu_requested"] is True
    assert checks[protocol.COMPILE]["status"] == protocol.SKIP

    log = (out / "device-check.log").read_text(encoding="utf-8")
    assert "--require-gpu" in log and "--skip compile" in log
    # the summary printout: one line per check, then the summary
    assert f"fail  {protocol.CUDA_AVAILABLE}" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("summary: ")


def test_past_its_bound_it_stops_and_leaves_no_task_running(torch_python: str, tmp_path: Path) -> None:
    prepared = tmp_path / "check.py"
    prepared.write_bytes(build_zipapp("check"))
    out = tmp_path / "out"
    there = clean_env(
        PATH=f"{Path(torch_python).parent}:/usr/bin:/bin",
        OUT=str(out),
        DEVICE_CHECK_PROBE=str(prepared),
        DEVICE_CHECK_TIMEOUT_S="10",  # the compile task (~2 minutes on CPU here) is under way by then
    )
    done = _bash("--only", protocol.COMPILE, env=there, timeout=120)
    assert done.returncode == 124
    assert "ran past 10s" in done.stderr and "no check document" in done.stderr
    assert "Traceback" not in done.stderr
    assert _running(out / "check.py") == []
