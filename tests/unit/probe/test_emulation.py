"""Where the probe runs (imagekit/probe/emulation.py): it records its machine, the engine host's and
whether the run is emulated; an emulated run's GPU checks never pass, and its timings are marked
emulated and never compared with floors. The host's side (verdicts, placement) is
tests/unit/facts/test_emulation.py's."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from typing import Any

import pytest

from imagekit.probe import arguments, emulation, protocol
from imagekit.probe.arguments import Expect
from imagekit.probe.context import Context
from imagekit.probe.results import CheckResult
from imagekit.render.probe_bundle import zipapp_path

SCRIPT = zipapp_path("check")
HERE = platform.machine()
# The other machine of the pair imagekit builds for: what an emulated run looks like from here.
OTHER = {"x86_64": "aarch64", "aarch64": "x86_64"}.get(HERE, "aarch64")
X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n"


def run_probe(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "python", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


# -- the probe's record ------------------------------------------------------------------------------


def test_the_probe_records_a_native_run() -> None:
    document = run_probe(protocol.HOST_MACHINE_OPTION, HERE)
    assert tuple(document["platform"]) == protocol.PLATFORM_FIELDS
    assert document["platform"] == {"machine": HERE, "host_machine": HERE, "emulated": False}
    # an engine's spelling of the same machine (docker info may say amd64 or arm64) is no emulation
    arch_name = {"x86_64": "amd64", "aarch64": "arm64"}.get(HERE, HERE)
    assert run_probe(protocol.HOST_MACHINE_OPTION, arch_name)["platform"]["emulated"] is False


def test_the_probe_records_an_emulated_run_and_its_gpu_checks_never_pass() -> None:
    """From here, a host of the other machine is what an emulated run sees (the real one under QEMU:
    tests/integration/multiarch/test_emulation.py). Asked for a GPU, the GPU checks fail saying why."""
    document = run_probe(
        protocol.HOST_MACHINE_OPTION, OTHER, protocol.REQUIRE_GPU_OPTION, "--only", "cuda_available"
    )
    assert document["platform"] == {"machine": HERE, "host_machine": OTHER, "emulated": True}
    check = {c["name"]: c for c in document["checks"]}[protocol.CUDA_AVAILABLE]
    assert check["status"] == protocol.FAIL
    assert "emulated" in check["cause"] and "cannot use a GPU" in check["cause"]


def test_without_a_host_machine_emulation_is_unknown_unless_cpuinfo_tells() -> None:
    assert run_probe()["platform"] == {"machine": HERE, "host_machine": None, "emulated": None}
    # QEMU passes the host's /proc/cpuinfo through: an aarch64 process reading x86's is emulated
    seen = emulation.run_platform(None, machine="aarch64", cpuinfo=X86_CPUINFO)
    assert seen == {"machine": "aarch64", "host_machine": None, "emulated": True}
    assert emulation.run_platform(None, "aarch64", ARM_CPUINFO)["emulated"] is None
    assert emulation.run_platform("x86_64", "aarch64", ARM_CPUINFO)["emulated"] is True
    assert emulation.run_platform("arm64", "aarch64", ARM_CPUINFO)["emulated"] is False


def test_a_bad_host_machine_is_a_bad_argument() -> None:
    with pytest.raises(arguments.ArgumentError, match="not a machine name"):
        arguments.parse_args([protocol.HOST_MACHINE_OPTION, "x86_64; rm -rf /"], {})
    _, invocation = arguments.parse_args([], {protocol.HOST_MACHINE_ENV: "aarch64"})
    assert invocation.host_machine == "aarch64"


def emulated_context(**env: str) -> Context:
    ctx = Context(Expect(), {"PATH": "/nonexistent", **env}, host_machine=OTHER)
    ctx._smi = {"path": None, "gpus": [], "error": "nvidia-smi not found"}  # nothing probed on this host
    return ctx


def test_an_emulated_run_without_a_gpu_request_skips_its_gpu_checks_as_any_run() -> None:
    ctx = emulated_context()
    assert ctx.emulated
    gate = ctx.gpu_gate(protocol.GEMM_GPU)
    assert gate is not None and (gate.status, gate.reason) == (protocol.SKIP, "no GPU requested")


def test_an_emulated_run_fails_its_gpu_checks_even_with_a_gpu_listed() -> None:
    """The host's nvidia-smi (its machine's binary) may list the GPU inside an emulated container:
    the GPU is still unusable, so the gate fails rather than let a GPU check run."""
    ctx = emulated_context(NVIDIA_VISIBLE_DEVICES="0")
    ctx._smi = {"path": "/usr/bin/nvidia-smi", "gpus": [{"name": "NVIDIA H200"}]}
    gate = ctx.gpu_gate(protocol.GEMM_GPU)
    assert gate is not None and gate.status == protocol.FAIL and "emulated" in (gate.cause or "")


@pytest.mark.parametrize("name", protocol.FLOOR_CHECKS)
def test_an_emulated_runs_timings_are_never_held_against_floors(name: str) -> None:
    where = emulation.run_platform(OTHER, machine=HERE, cpuinfo="")
    below = CheckResult(name, protocol.FAIL, False, cause="12 TFLOP/s < floor 400", detail={"devices": []})
    marked = emulation.mark_timed(below, where)
    assert (marked.status, marked.cause, marked.fix) == (protocol.SKIP, None, None)
    assert "not compared with floors" in (marked.reason or "") and marked.detail["emulated"] is True
    native = emulation.run_platform(HERE, machine=HERE, cpuinfo="")
    assert emulation.mark_timed(below, native) == below  # a native run's floors hold


def test_an_emulated_runs_other_timings_are_marked_and_keep_their_status() -> None:
    where = emulation.run_platform(OTHER, machine=HERE, cpuinfo="")
    compile_fail = CheckResult(
        protocol.COMPILE, protocol.FAIL, cause="timed out", detail={"cpu": {"seconds": 3}}
    )
    marked = emulation.mark_timed(compile_fail, where)
    assert marked.status == protocol.FAIL and marked.detail == {"cpu": {"seconds": 3}, "emulated": True}
    untimed = CheckResult(protocol.TORCH, protocol.PASS)
    assert emulation.mark_timed(untimed, where) is untimed
