"""tests/unit/probe/test_arch.py's slow tests: cuda_archs reads the arch list of the real torch CPU wheel."""

from __future__ import annotations

from imagekit.probe import protocol
from tests.unit.probe_runs import by_name, run_script


def test_the_real_cpu_wheel_skips(torch_python: str) -> None:
    code, report, _ = run_script(
        torch_python, "--only", protocol.CUDA_ARCHS, protocol.EXPECT_OPTIONS["cuda-archs"], "8.0;9.0"
    )
    check = by_name(report)[protocol.CUDA_ARCHS]
    assert code == 0 and check["status"] == "skip" and "CPU build" in check["reason"]
    assert report["expected"]["cuda_archs"] == "8.0;9.0"
