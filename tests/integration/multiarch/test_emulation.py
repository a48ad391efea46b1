"""Verify per platform against the real engine: the probe in an arm64 image on this engine runs
under QEMU user emulation, records machine aarch64 and emulated, and the run is never validated;
a GPU request for it fails before any container starts."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import junitparser
import pytest

from imagekit.core import platforms
from imagekit.probe import protocol
from testbed.imagekit_process import imagekit
from tests.integration.conftest import REPO_ROOT

ARM64 = platforms.get("linux/arm64")


def verified(stdout: str) -> dict[str, object]:
    """The one verification `imagekit verify --json` printed (after its one-line verdicts)."""
    (result,) = json.loads(stdout[stdout.index("[") :])
    assert isinstance(result, dict)
    return result


def test_the_probe_in_an_arm64_image_runs_emulated_and_is_never_validated(
    api: docker.APIClient, debian_python_arm64: str, tmp_path: Path
) -> None:
    host = platforms.of_machine(str(api.info()["Architecture"]))
    if host == ARM64:
        pytest.skip("this engine is arm64: the image runs natively (tests/unit/facts/test_emulation.py)")
    assert api.inspect_image(debian_python_arm64)["Architecture"] == ARM64.arch
    junit = tmp_path / "verify.xml"
    done = imagekit(
        "verify", debian_python_arm64, "--gpus", "none", "--json", "--junit", str(junit), cwd=tmp_path
    )
    result = verified(done.stdout)
    assert result["platform"] == {"machine": ARM64.machine, "host_machine": host.machine, "emulated": True}, (
        f"{done.stderr}\n(is QEMU registered? {REPO_ROOT}/scripts/engine.sh emulation)"
    )
    # a base without torch: its torch check fails; whatever the checks say, never validated
    assert result["verdict"] != "validated" and result["gpu_requested"] is False
    checks = {c["name"]: c for c in result["checks"]}  # type: ignore[attr-defined]
    assert checks[protocol.TORCH]["status"] == protocol.FAIL  # the base has Python, no torch
    for name in protocol.VALIDATING_GPU_CHECKS:
        assert (checks[name]["status"], checks[name]["reason"]) == (protocol.SKIP, "no GPU requested")
    assert json.loads(checks[protocol.GEMM_PERF]["detail"]) == {"emulated": True}
    properties = {p.name: p.value for p in next(iter(junitparser.JUnitXml.fromfile(str(junit)))).properties()}
    assert (properties["machine"], properties["emulated"]) == (ARM64.machine, "true")
    # asked for GPUs, the emulated image fails with the reason, and no container is started for it
    refused = imagekit("verify", debian_python_arm64, "--gpus", "all", "--json", cwd=tmp_path)
    assert refused.returncode == 1
    result = verified(refused.stdout)
    assert result["verdict"] == "failed" and result["checks"] == []
    assert "runs emulated" in str(result["error"]) and "cannot use a GPU" in str(result["error"])
