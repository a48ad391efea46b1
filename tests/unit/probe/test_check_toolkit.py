"""The in-image check against the NVIDIA container toolkit's own rules: brand names (NVML brand type
-> libnvidia-container's strings, nvidia-smi -q's "Product Brand" -> the same), NVIDIA_REQUIRE_*
as nvidia-container-cli evaluates it, NVIDIA_DRIVER_CAPABILITIES, and the forward-compatibility
libraries. Sources and fixture provenance: tests/fixtures/check/NOTES.md."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from imagekit.probe import arguments, context, require, system
from imagekit.probe import driver as probe_driver
from imagekit.probe import smi as probe_smi
from tests.unit.probe_runs import FIXTURES, by_name, clean_env, fixture, run_script

REQ_1211 = fixture("nvidia-require-cuda-12.1.1.txt").strip()


def satisfied(expression: str, props: dict[str, str | None]) -> bool | None:
    """Three-valued: True, False (also: an expression the toolkit refuses), None (undetermined)."""
    return require.evaluate_require_verdict(expression, props).satisfied


def props(**kw: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {"cuda": None, "driver": None, "arch": None, "brand": None}
    base.update(kw)
    return base


# -- brands -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "product_brand", "toolkit"),
    [
        ("nvidia-smi-q-rtx-a6000-550.txt", "NVIDIA RTX", "NvidiaRTX"),
        ("nvidia-smi-q-v100-tesla-550.txt", "Tesla", "Tesla"),
        ("nvidia-smi-q-v100-tesla-470.txt", "Tesla", "Tesla"),
        ("nvidia-smi-q-h100-nvidia-560.txt", "NVIDIA", "Nvidia"),
        ("nvidia-smi-q-t4-nvidia-530.txt", "NVIDIA", "Nvidia"),
        ("nvidia-smi-q-vgpu-vws-535.txt", "NVIDIA RTX Virtual Workstation", "VWS"),
    ],
)
def test_product_brand_maps_to_the_toolkit_name(name: str, product_brand: str, toolkit: str) -> None:
    (brand,) = probe_smi.parse_nvidia_smi_brands(fixture(name))
    assert brand == product_brand
    assert probe_smi.toolkit_brand(brand) == toolkit


def test_every_nvml_brand_has_a_toolkit_name_and_an_smi_spelling() -> None:
    # nvml.h: NVML_BRAND_UNKNOWN = 0 ... NVML_BRAND_TITAN_RTX = 16 (NVML_BRAND_COUNT = 18 skips 17)
    assert sorted(probe_smi.NVML_BRAND_TOOLKIT_NAMES) == list(range(17))
    assert set(probe_smi.SMI_BRAND_TO_NVML.values()) == set(range(17))
    # the spellings the cuda images' NVIDIA_REQUIRE_CUDA use are among the toolkit's names
    names = {n.lower() for n in probe_smi.NVML_BRAND_TOOLKIT_NAMES.values()}
    used = {term.split("=")[1] for term in REQ_1211.replace(" ", ",").split(",") if term.startswith("brand=")}
    assert used == {
        *("tesla", "unknown", "nvidia", "nvidiartx", "geforce", "geforcertx"),
        *("quadro", "quadrortx", "titan", "titanrtx"),
    }
    assert used <= names
    assert probe_smi.toolkit_brand("Quadro RTX") == "QuadroRTX"
    assert probe_smi.toolkit_brand("GeForce") == "GeForce"
    assert probe_smi.toolkit_brand("  nvidia   rtx ") == "NvidiaRTX"
    assert probe_smi.toolkit_brand("Some Brand Of Tomorrow") is None
    assert probe_smi.toolkit_brand(None) is None


class FakeNvml:
    """Stands in for libnvidia-ml.so.1 as ctypes sees it: functions filling their out-arguments."""

    def __init__(self, brands: list[int], fail: str | None = None) -> None:
        self.brands = brands
        self.fail = fail
        self.shutdown = False

    def _rc(self, name: str) -> int:
        return 999 if self.fail == name else 0

    def nvmlInit_v2(self) -> int:
        return self._rc("init")

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        count._obj.value = len(self.brands)
        return self._rc("count")

    def nvmlDeviceGetHandleByIndex_v2(self, index: ctypes.c_uint, handle: Any) -> int:
        handle._obj.value = 1000 + index.value
        return self._rc("handle")

    def nvmlDeviceGetBrand(self, handle: ctypes.c_void_p, brand: Any) -> int:
        brand._obj.value = self.brands[int(handle.value or 0) - 1000]
        return self._rc("brand")

    def nvmlShutdown(self) -> int:
        self.shutdown = True
        return 0


def test_nvml_brands_read_as_the_toolkit_reads_them() -> None:
    lib = FakeNvml([13, 2, 14, 99])
    # an unknown enum reads as the default
    assert probe_smi.nvml_brands_from(lib) == ["NvidiaRTX", "Tesla", "Nvidia", "Unknown"]
    assert lib.shutdown
    for step in ("init", "count", "handle", "brand"):
        assert probe_smi.nvml_brands_from(FakeNvml([13], fail=step)) is None, step


# -- NVIDIA_REQUIRE_CUDA of the 12.1.1 images ---------------------------------------------------------


def test_rtx_a6000_on_driver_525_is_accepted_like_the_toolkit_does() -> None:
    """An RTX A6000 (NVML brand NVIDIA_RTX -> "NvidiaRTX") on the 525 branch (CUDA 12.0): cuda>=12.1
    fails, and brand=nvidiartx,driver>=525,driver<526 holds. The old lower-cased "nvidia rtx"
    matched no term, so the check refused what the toolkit starts."""
    (smi_brand,) = probe_smi.parse_nvidia_smi_brands(fixture("nvidia-smi-q-rtx-a6000-550.txt"))
    brand = probe_smi.toolkit_brand(smi_brand)
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
    (smi_brand,) = probe_smi.parse_nvidia_smi_brands(fixture(fixture_name))
    brand = probe_smi.toolkit_brand(smi_brand)
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


# -- NVIDIA_DRIVER_CAPABILITIES -------------------------------------------------------------------


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


def test_driver_capabilities_parsing() -> None:
    assert context.driver_capabilities(None) == {"utility"}
    assert "compute" in context.driver_capabilities("all")
    assert context.driver_capabilities("compute, video") == {"compute", "video"}


# -- forward compatibility -------------------------------------------------------------------------


def test_forward_compat_libraries_in_both_layouts(tmp_path: Path) -> None:
    ngc = tmp_path / "cuda" / "compat" / "lib.real"
    ngc.mkdir(parents=True)
    (ngc / "libcuda.so.545.23.08").write_bytes(b"")
    (ngc / "libcuda.so.1").symlink_to("libcuda.so.545.23.08")
    plain = tmp_path / "cuda-12.1" / "compat"
    plain.mkdir(parents=True)
    (plain / "libcuda.so.530.30.02").write_bytes(b"")
    found = probe_driver.find_forward_compat((str(ngc), str(plain), str(tmp_path / "missing")))
    assert found["versions"] == ["530.30.02", "545.23.08"]
    assert found["dirs"] == [str(ngc), str(plain)]
    assert {Path(lib).name for lib in found["libs"]} >= {"libcuda.so.545.23.08", "libcuda.so.530.30.02"}
    # the symlink resolves to the file already listed: each library once
    assert len(found["libs"]) == len(set(found["libs"]))
