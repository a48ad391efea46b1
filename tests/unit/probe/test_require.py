"""NVIDIA_REQUIRE_* evaluated as nvidia-container-cli does it (imagekit/probe/require.py): the
grammar, its short cuts, brands per device, the legacy CUDA_VERSION rule, and the require check in
real runs of the script against a stand-in nvidia-smi. Sources: tests/fixtures/check/NOTES.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.probe import require
from imagekit.probe.smi import parse_nvidia_smi_brands, toolkit_brand
from tests.unit.probe_runs import (
    FIXTURES,
    REQ_121,
    REQ_1211,
    by_name,
    clean_env,
    fixture,
    run_script,
)


def satisfied(expression: str, props: dict[str, str | None]) -> bool | None:
    """Three-valued: True, False (also: an expression the toolkit refuses), None (undetermined)."""
    return require.evaluate_require_verdict(expression, props).satisfied


REQ_118 = "cuda>=11.8 brand=tesla,driver>=470,driver<471"


def props(**kw: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {"cuda": None, "driver": None, "arch": None, "brand": None}
    base.update(kw)
    return base


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu*) echo "0, NVIDIA RTX A6000, 525.60.13, 49140, 8.6" ;;
  -q) cat "{fixtures}/nvidia-smi-q-rtx-a6000-550.txt" ;;
  -L) echo "GPU 0: NVIDIA RTX A6000 (UUID: GPU-880b8a57-8586-fe40-bec5-fb703f80ffe6)" ;;
  "") echo "| NVIDIA-SMI 525.60.13    Driver Version: 525.60.13    CUDA Version: 12.0     |" ;;
esac
"""


def _fake_smi(tmp_path: Path) -> dict[str, str]:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(fixtures=FIXTURES), encoding="utf-8")
    smi.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def test_parse_require_groups() -> None:
    groups = require.parse_require(REQ_118)
    assert [[f"{t.prop}{t.op}{t.value}" for t in g] for g in groups] == [
        ["cuda>=11.8"],
        ["brand=tesla", "driver>=470", "driver<471"],
    ]
    with pytest.raises(ValueError):
        require.parse_require("cuda>=12.1 brand")


def test_require_or_branch_tesla_470_passes() -> None:
    # driver 470 carries CUDA 11.4: the cuda>= term fails, the forward-compat branch holds
    assert satisfied(REQ_118, props(cuda="11.4", driver="470.57.02", brand="tesla")) is True
    assert satisfied(REQ_121, props(cuda="11.4", driver="470.5", brand="tesla")) is True
    assert satisfied(REQ_118, props(cuda="11.4", driver="470.57.02", brand="geforce")) is False


def test_require_new_driver_passes_old_fails() -> None:
    assert satisfied(REQ_121, props(cuda="12.2", driver="535.104.05", brand="geforce")) is True
    assert satisfied(REQ_121, props(cuda="12.0", driver="525.60.13", brand="geforce")) is False
    assert satisfied(REQ_121, props(cuda="12.0", driver="525.60.13", brand="tesla")) is True
    # brand unknown: undetermined, never a pass
    assert satisfied(REQ_121, props(cuda="12.0", driver="525.60.13")) is None


def test_require_numeric_comparison_and_operators() -> None:
    assert satisfied("cuda>=12.10", props(cuda="12.9")) is False  # not string order
    assert satisfied("cuda>=9.0", props(cuda="12.2")) is True  # NGC 23.10's requirement
    assert satisfied("driver=535.104.05", props(driver="535.104.05")) is True
    assert satisfied("driver!=535", props(driver="535.0")) is False
    assert satisfied("arch>=8.0", props(arch="9.0")) is True
    assert satisfied("arch<8.0", props(arch="9.0")) is False
    assert satisfied("CUDA>=12.1", props(cuda="12.2")) is True  # dsl.c: str_case_equal


def test_require_double_equals_is_an_invalid_expression() -> None:
    # dsl.c's operator table is = != < <= > >=, matched on the whole run of <>=! characters
    verdict = require.evaluate_require_verdict("driver==535.104.05", props(driver="535.104.05"))
    assert verdict.satisfied is False
    assert verdict.invalid is not None and "'=='" in verdict.invalid
    for bad in ("cuda=>12.1", "cuda>12.1x", "cuda>=", ">=12.1", "brand>=tesla", "cuda>=12.1a"):
        result = require.evaluate_require_verdict(bad, props(cuda="12.2", brand="Tesla"))
        assert result.satisfied is False and result.invalid, bad


def test_require_unknown_property_fails_when_reached_only() -> None:
    # dsl.c: an unknown property is "invalid expression" (the container does not start) ...
    assert require.evaluate_require_verdict("gpu_mem>=80", props(cuda="13.0")).invalid
    assert satisfied("gpu_mem>=80 cuda>=12.0", props(cuda="13.0")) is False
    # ... but evaluation stops at the first group that holds, and an AND group at its first false term
    assert satisfied("cuda>=12.0 gpu_mem>=80", props(cuda="13.0")) is True
    assert satisfied("cuda>=14.0,gpu_mem>=80 cuda>=12.0", props(cuda="13.0")) is True


@pytest.mark.parametrize(
    ("left", "op", "right", "expected"),
    [
        ("12.1", "=", "12.1.0", True),
        ("12.10", ">", "12.9", True),
        ("470.57.02", "<", "471", True),
        ("525.60.13", ">=", "525", True),
        ("525", "<", "525.60", True),
        ("525.60.13", "<", "526", True),
        ("12.01", "=", "12.1", True),
        ("13.0", "!=", "13", False),
        ("9.0", "<=", "8.9", False),
    ],
)
def test_dsl_compare_version(left: str, op: str, right: str, expected: bool) -> None:
    assert require.dsl_compare_version(left, op, right) is expected


def test_dsl_compare_version_rejects_non_numeric() -> None:
    with pytest.raises(require.InvalidRequirement):
        require.dsl_compare_version("12.1", ">=", "12.1a")
    with pytest.raises(require.InvalidRequirement):
        require.dsl_compare_version("", ">=", "12")


def test_require_variables_all_and_legacy_cuda_version() -> None:
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.1", "NVIDIA_REQUIRE_ARCH": "arch>=8.0", "PATH": "/bin"}
    found = require.require_variables(env)
    assert found == {"NVIDIA_REQUIRE_ARCH": "arch>=8.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.1"}
    devices: list[dict[str, str | None]] = [{"arch": "9.0"}, {"arch": "7.5"}]
    verdicts = require.evaluate_all_requirements(found, "12.2", "535.104.05", devices)
    assert verdicts == {"NVIDIA_REQUIRE_ARCH": False, "NVIDIA_REQUIRE_CUDA": True}  # one device fails
    assert require.require_variables({"CUDA_VERSION": "11.8.0"}) == {"NVIDIA_REQUIRE_CUDA": "cuda>=11.8"}
    assert require.go_parse_bool("true") and require.go_parse_bool("1") and not require.go_parse_bool("yes")


def test_rtx_a6000_on_driver_525_is_accepted_like_the_toolkit_does() -> None:
    """An RTX A6000 (NVML brand NVIDIA_RTX -> "NvidiaRTX") on the 525 branch (CUDA 12.0): cuda>=12.1
    fails, and brand=nvidiartx,driver>=525,driver<526 holds. The old lower-cased "nvidia rtx"
    matched no term, so the check refused what the toolkit starts."""
    (smi_brand,) = parse_nvidia_smi_brands(fixture("nvidia-smi-q-rtx-a6000-550.txt"))
    brand = toolkit_brand(smi_brand)
    verdict = require.evaluate_require_verdict(REQ_1211, props(cuda="12.0", driver="525.60.13", brand=brand))
    assert verdict.satisfied is True
    assert verdict.by == "brand=nvidiartx,driver>=525,driver<526"
    assert satisfied(REQ_1211, props(cuda="12.0", driver="525.60.13", brand="nvidia rtx")) is False
    # the toolkit refuses the same card on 520 (CUDA 11.8) and accepts it on 530 (CUDA 12.1)
    assert satisfied(REQ_1211, props(cuda="11.8", driver="520.61.05", brand=brand)) is False
    assert satisfied(REQ_1211, props(cuda="12.1", driver="530.30.02", brand=brand)) is True
    # 526 is outside the 525 branch
    assert satisfied(REQ_1211, props(cuda="12.0", driver="526.1", brand=brand)) is False


@pytest.mark.parametrize(
    ("fixture_name", "driver", "cuda", "accepted"),
    [
        ("nvidia-smi-q-v100-tesla-470.txt", "470.129.06", "11.4", True),  # brand=tesla,driver>=470,<471
        ("nvidia-smi-q-h100-nvidia-560.txt", "560.35.03", "12.6", True),  # cuda>=12.1
        ("nvidia-smi-q-t4-nvidia-530.txt", "530.30.02", "12.1", True),
        ("nvidia-smi-q-vgpu-vws-535.txt", "525.85.05", "12.0", False),  # VWS is in no 525 term
        ("nvidia-smi-q-t4-nvidia-530.txt", "525.85.05", "12.0", True),  # brand=nvidia,driver>=525
    ],
)
def test_12_1_1_requirement_per_brand(fixture_name: str, driver: str, cuda: str, accepted: bool) -> None:
    (smi_brand,) = parse_nvidia_smi_brands(fixture(fixture_name))
    brand = toolkit_brand(smi_brand)
    assert satisfied(REQ_1211, props(cuda=cuda, driver=driver, brand=brand)) is accepted


def test_brand_comparison_is_case_insensitive_and_takes_equal_or_not_equal() -> None:
    assert satisfied("brand=TESLA", props(brand="Tesla")) is True
    assert satisfied("brand!=tesla", props(brand="NvidiaRTX")) is True
    assert require.evaluate_require_verdict("brand<tesla", props(brand="Tesla")).invalid
    # brand unknown here: undetermined, never a pass
    assert satisfied(REQ_1211, props(cuda="12.0", driver="525.60.13")) is None


def test_every_device_must_satisfy() -> None:
    variables = {"NVIDIA_REQUIRE_CUDA": REQ_1211}
    devices: list[dict[str, str | None]] = [
        {"arch": "8.6", "brand": "NvidiaRTX"},
        {"arch": "8.6", "brand": "VWS"},
    ]
    report = require.requirement_report(variables, "12.0", "525.60.13", devices)
    entry = report["NVIDIA_REQUIRE_CUDA"]
    assert entry["satisfied"] is False
    assert [d["satisfied"] for d in entry["devices"]] == [True, False]


def test_require_variables_skip_jetpack_and_keep_the_legacy_rule() -> None:
    env = {"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all", "NVIDIA_REQUIRE_ARCH": "arch>=8.0"}
    assert require.require_variables(env) == {"NVIDIA_REQUIRE_ARCH": "arch>=8.0"}
    assert require.require_variables({"CUDA_VERSION": "12.1.1", "NVIDIA_REQUIRE_CUDA": ""}) == {
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.1"
    }


def test_script_accepts_rtx_a6000_on_525_with_the_12_1_1_image(tmp_path: Path) -> None:
    env = clean_env(**_fake_smi(tmp_path), NVIDIA_REQUIRE_CUDA=REQ_1211)
    _, report, _ = run_script("python3", "--expect-cuda", "12.1", "--only", "require,driver", env=env)
    require = by_name(report)["require"]
    assert require["status"] == "pass", require
    (device,) = require["actual"]["devices"]
    assert device["brand"] == "NvidiaRTX" and device["product_brand"] == "NVIDIA RTX"
    assert device["brand_source"] == "nvidia-smi -q"  # no NVML on this host
    evaluation = require["detail"]["evaluation"]["NVIDIA_REQUIRE_CUDA"]
    assert evaluation["devices"][0]["by"] == "brand=nvidiartx,driver>=525,driver<526"
    # driver 525.60.13 is the 12.x minor-version floor itself
    assert by_name(report)["driver"]["detail"]["verdict"] == "minor"


def test_script_reports_an_expression_the_toolkit_refuses(tmp_path: Path) -> None:
    env = clean_env(**_fake_smi(tmp_path), NVIDIA_REQUIRE_CUDA="cuda==12.0")
    rc, report, _ = run_script("python3", "--only", "require", env=env)
    require = by_name(report)["require"]
    assert rc == 1
    assert require["status"] == "fail"
    assert "cannot be parsed" in require["cause"] and "'=='" in require["cause"]
    assert "operators = != < <= > >=" in require["fix"]
    # an unknown property parses, and is refused only when evaluation reaches it
    env = clean_env(**_fake_smi(tmp_path), NVIDIA_REQUIRE_CUDA="cuda>=12.1 gpu_mem>=80")
    _, report, _ = run_script("python3", "--only", "require", env=env)
    require = by_name(report)["require"]
    assert require["status"] == "fail" and "would refuse to start" in require["cause"]
    assert "unknown property 'gpu_mem'" in require["cause"]
    env = clean_env(**_fake_smi(tmp_path), NVIDIA_REQUIRE_CUDA="cuda>=12.0 gpu_mem>=80")
    _, report, _ = run_script("python3", "--only", "require", env=env)
    assert by_name(report)["require"]["status"] == "pass"
