"""arch and cuda_archs (imagekit/probe/arch.py): compute capabilities a wheel supports, and torch's
own arch list (read without a GPU) against the image's cuda-archs label.

The lists below are what torch._C._cuda_getArchFlags() printed in real images of PyPI's torch
2.11.0+cu130 (x86_64 and aarch64; imagekit/data/gpus.yaml records them with their source)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from imagekit.probe import arch, arguments, context, protocol
from imagekit.probe.arch import arch_flags, check_cuda_archs, compare_archs
from tests.unit.probe_runs import (
    clean_env,
)

X86_211 = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"  # no compute_*: no PTX


ARM_211 = "sm_80 sm_90 sm_100 sm_110 sm_120"  # sm_110: Jetson Thor


def fake_torch(flags: str | None, cuda: str | None = "13.0", has_reader: bool = True) -> Any:
    c = types.SimpleNamespace()
    if has_reader:
        c._cuda_getArchFlags = lambda: flags
    return types.SimpleNamespace(__version__="2.11.0", version=types.SimpleNamespace(cuda=cuda), _C=c)


def run(torch: Any, label: str | None) -> dict[str, Any]:
    ctx = context.Context(arguments.Expect(cuda_archs=label), clean_env())
    ctx._torch, ctx._torch_tried = torch, True
    result = check_cuda_archs(ctx)
    assert result.name == protocol.CUDA_ARCHS and result.required is False  # never fails an image
    return vars(result)


def test_arch_supported() -> None:
    cu121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert arch.arch_supported(cu121, (9, 0)) == (True, "SASS sm_90")
    assert arch.arch_supported(cu121, (8, 9))[0] is True  # sm_86 SASS runs on 8.9
    assert arch.arch_supported(cu121, (10, 0)) == (False, "no SASS or PTX for this device")
    ok, how = arch.arch_supported([*cu121, "compute_90"], (10, 0))
    assert ok and "PTX compute_90" in how
    assert arch.arch_supported(["sm_90a"], (9, 0))[0] is True
    assert arch.arch_supported(["sm_90a"], (10, 0))[0] is False
    assert arch.arch_supported(["sm_37", "sm_50"], (12, 0))[0] is False


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        ("8.0;9.0", ["sm_80", "sm_90"]),
        ("8.0;9.0+PTX", ["sm_80", "sm_90", "compute_90"]),  # X.Y+PTX: SASS and PTX of X.Y
        ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", [*X86_211.split(), "compute_120"]),
        ("8.0;9.0;10.0;11.0;12.0", ARM_211.split()),
        ("9.0a 10.0f", ["sm_90a", "sm_100f"]),  # blanks separate too; arch-specific suffixes kept
        (X86_211, X86_211.split()),  # torch's own spelling as it is
        ("sm_80 compute_80", ["sm_80", "compute_80"]),
        ("", []),
        ("Ampere", None),  # cpp_extension's names: not a list the label writes
        ("8.0;sm80", None),
    ],
)
def test_arch_flags_reads_both_spellings(text: str, flags: list[str] | None) -> None:
    assert arch_flags(text) == flags


def test_compare_is_order_free_and_names_both_sides() -> None:
    expected = arch_flags("7.5;8.0;8.6;9.0;10.0;12.0+PTX")
    assert expected is not None
    assert compare_archs(expected, X86_211.split()) == (["compute_120"], [])
    assert compare_archs(list(reversed(X86_211.split())), X86_211.split()) == ([], [])
    assert compare_archs(["sm_80"], ["sm_90", "compute_90", "sm_100"]) == (
        ["sm_80"],
        ["sm_90", "compute_90", "sm_100"],  # by architecture, SASS before PTX
    )


def test_the_wheel_matching_its_label_passes() -> None:
    got = run(fake_torch(ARM_211), "8.0;9.0;10.0;11.0;12.0")
    assert got["status"] == "pass" and got["actual"] == ARM_211.split()


def test_a_label_promising_ptx_the_wheel_lacks_warns_with_both_lists() -> None:
    got = run(fake_torch(X86_211), "7.5;8.0;8.6;9.0;10.0;12.0+PTX")
    assert got["status"] == "fail" and got["required"] is False
    assert got["detail"]["missing"] == ["compute_120"] and got["detail"]["extra"] == []
    assert got["detail"]["expected"][-1] == "compute_120" and got["detail"]["actual"] == X86_211.split()
    assert "compute_120" in got["cause"] and "gpus.yaml" in got["fix"]


def test_kernels_beyond_the_label_warn_too() -> None:
    got = run(fake_torch(ARM_211), "8.0;9.0;10.0;12.0")
    assert got["status"] == "fail" and got["detail"]["extra"] == ["sm_110"]


def test_an_odd_label_warns_and_no_label_just_reports() -> None:
    assert run(fake_torch(X86_211), "Ampere")["status"] == "fail"
    got = run(fake_torch(X86_211), None)
    assert got["status"] == "pass" and got["actual"] == X86_211.split()


@pytest.mark.parametrize(
    ("torch", "reason"),
    [
        (fake_torch(None, cuda=None, has_reader=False), "CPU build"),
        (fake_torch(None, has_reader=False), "no torch._C._cuda_getArchFlags"),  # an old torch
        (fake_torch(None), "without CUDA arch flags"),
        (None, "not importable"),
    ],
)
def test_what_has_no_list_to_read_skips_with_its_reason(torch: Any, reason: str) -> None:
    got = run(torch, "8.0")
    assert got["status"] == "skip" and reason in got["reason"]


def test_the_expectation_comes_as_an_option_or_from_the_environment() -> None:
    option = protocol.EXPECT_OPTIONS["cuda-archs"]
    expect, _ = arguments.parse_args([option, "8.0;9.0+PTX"], {})
    assert expect.cuda_archs == "8.0;9.0+PTX"
    expect, _ = arguments.parse_args([], {protocol.EXPECT_ENV["cuda-archs"]: "8.0"})
    assert expect.cuda_archs == "8.0"


def test_a_lock_keeps_the_arch_list_label() -> None:
    # publish keeps only the labels the lock's reader accepts; an arch list's ';' is one of them
    from imagekit.core.safetypes import EXPECTATION

    assert EXPECTATION.problem("7.5;8.0;8.6;9.0;10.0;12.0+PTX") is None
