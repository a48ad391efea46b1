"""environment, nvcc, cuda_installs, nvidia_smi and python (imagekit/probe/system.py): the
environment check's NVIDIA variables and NVIDIA_DRIVER_CAPABILITIES for CUDA builds."""

from __future__ import annotations

import sys

import pytest

from imagekit.probe import arguments, context, system
from tests.unit.probe_runs import (
    REQ_121,
    by_name,
    clean_env,
    run_script,
)


def test_environment_check_reports_nvidia_variables() -> None:
    env = clean_env(
        NVIDIA_VISIBLE_DEVICES="all",
        NVIDIA_REQUIRE_CUDA=REQ_121,
        NVIDIA_DISABLE_REQUIRE="true",
        NVIDIA_CPU_ONLY="1",
    )
    _, report, _ = run_script(sys.executable, env=env)
    detail = by_name(report)["environment"]["detail"]
    assert detail["NVIDIA_REQUIRE"] == {"NVIDIA_REQUIRE_CUDA": REQ_121}
    assert detail["require_disabled"] is True
    assert detail["require_parsed"]["NVIDIA_REQUIRE_CUDA"][0] == ["cuda>=12.1"]
    assert by_name(report)["require"]["status"] == "skip"


@pytest.mark.parametrize(
    ("value", "expect_cuda", "status"),
    [
        (None, "12.1", "pass"),  # unset: a warning (current toolkits default to utility,compute)
        ("", "12.1", "pass"),
        ("utility", "12.1", "fail"),
        ("compute,utility", "12.1", "pass"),
        ("all", "12.1", "pass"),
        (" Compute ", "12.1", "pass"),
        (None, "cpu", "pass"),  # a CPU build needs none
    ],
)
def test_environment_needs_compute_for_cuda_builds(value: str | None, expect_cuda: str, status: str) -> None:
    extra = {} if value is None else {"NVIDIA_DRIVER_CAPABILITIES": value}
    ctx = context.Context(arguments.Expect(cuda=expect_cuda), clean_env(**extra))
    result = system.check_environment(ctx)
    assert result.status == status
    if status == "fail":
        assert result.cause is not None and "compute" in result.cause
        assert result.fix is not None and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in result.fix
        assert "NVIDIA_VISIBLE_DEVICES" in result.fix


def test_unset_driver_capabilities_is_a_warning_with_its_explanation() -> None:
    ctx = context.Context(arguments.Expect(cuda="12.1"), clean_env())
    result = system.check_environment(ctx)
    assert result.status == "pass"
    (warning,) = result.detail["warnings"]
    assert "utility,compute" in warning and "nvidia-docker2" in warning and "nerdctl" in warning
    explicit = system.check_environment(
        context.Context(
            arguments.Expect(cuda="12.1"), clean_env(NVIDIA_DRIVER_CAPABILITIES="compute,utility")
        )
    )
    assert "warnings" not in explicit.detail
