"""The driver check (imagekit/probe/driver.py): NVIDIA's driver table as generated from
compat.yaml, full and minor-version compatibility, the forward-compatibility libraries, and real
runs of the script against a stand-in nvidia-smi replaying published outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from imagekit.probe.driver import CUDA_DRIVER_TABLE, driver_satisfies, find_forward_compat
from tests.unit.probe_runs import (
    FIXTURES,
    REPO,
    REQ_121,
    by_name,
    clean_env,
    run_script,
)

FAKE_SMI = """#!/bin/sh
# A stand-in nvidia-smi replaying published outputs (see tests/fixtures/check/NOTES.md).
case "$*" in
  *compute_cap*) cat "{fixtures}/nvidia-smi-compute-cap-rejected.txt"; exit 2 ;;
  *--query-gpu*) echo "0, NVIDIA A100-SXM4-40GB, 580.126.09, 40960"
                 echo "1, NVIDIA A100-SXM4-40GB, 580.126.09, 40960" ;;
  -q) echo "    Product Brand                   : NVIDIA" ;;
  "") cat "{fixtures}/nvidia-smi-header-580-a100.txt" ;;
esac
"""


def test_embedded_driver_table_equals_compat_yaml() -> None:
    data = yaml.safe_load((REPO / "imagekit" / "data" / "compat.yaml").read_text(encoding="utf-8"))
    releases = data["cuda"]["releases"]
    from_yaml = {minor: row["minor_floor"] for minor, row in releases.items()}
    assert from_yaml == {minor: row[1] for minor, row in CUDA_DRIVER_TABLE.items()}


def test_driver_satisfies() -> None:
    assert driver_satisfies("520.61.05", "11.8") == "full"
    assert driver_satisfies("470.57.02", "11.8") == "minor"
    assert driver_satisfies("440.64", "11.8") == "too_old"
    assert driver_satisfies("530.30.02", "12.1.1") == "full"
    assert driver_satisfies("525.60.13", "12.1") == "minor"
    assert driver_satisfies("525.60.12", "12.1") == "too_old"
    assert driver_satisfies("470.5", "12.1") == "too_old"
    assert driver_satisfies("575.57.08", "13.0") == "too_old"  # 13.x floor is 580.65.06
    assert driver_satisfies("999", "10.2") == "unknown_cuda"


def test_fake_nvidia_smi_drives_the_driver_and_require_checks(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(fixtures=FIXTURES), encoding="utf-8")
    smi.chmod(0o755)
    env = clean_env(PATH=f"{tmp_path}:/usr/bin:/bin", NVIDIA_REQUIRE_CUDA=REQ_121)
    rc, report, _ = run_script(sys.executable, "--expect-cuda", "12.1", env=env)
    checks = by_name(report)
    assert report["gpu_visible"] is True
    assert checks["nvidia_smi"]["status"] == "pass"
    assert [q["rc"] for q in checks["nvidia_smi"]["detail"]["queries"]] == [2, 0]  # compute_cap fallback
    assert checks["driver"]["status"] == "pass"
    assert checks["driver"]["actual"] == "580.126.09"
    assert checks["require"]["status"] == "pass"
    assert checks["require"]["actual"]["cuda"] == "13.0"
    # torch is missing, so the torch GPU checks did not run and say so
    assert checks["cuda_available"]["status"] == "skip"
    assert checks["gemm_gpu"]["status"] == "skip"
    assert rc == 1


def test_fake_old_driver_fails_with_driver_cause(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(fixtures=FIXTURES).replace("580.126.09", "470.57.02"), encoding="utf-8")
    smi.chmod(0o755)
    env = clean_env(PATH=f"{tmp_path}:/usr/bin:/bin", NVIDIA_REQUIRE_CUDA=REQ_121)
    _, report, _ = run_script(sys.executable, "--expect-cuda", "12.1", env=env)
    driver = by_name(report)["driver"]
    assert driver["status"] == "fail"
    assert "too old for CUDA 12.1" in driver["cause"]


def test_cuda_13_5_is_held_to_its_r580_floor(tmp_path: Path) -> None:
    """CUDA 13.5's own driver is not in the table: R580+ passes on minor-version compatibility, an
    R575 driver fails with the floor as the fix, and nothing says 'None'."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(fixtures=FIXTURES), encoding="utf-8")
    smi.chmod(0o755)
    env = clean_env(PATH=f"{tmp_path}:/usr/bin:/bin", NVIDIA_REQUIRE_CUDA="cuda>=13.0")
    _, report, _ = run_script(sys.executable, "--expect-cuda", "13.5", env=env)
    driver = by_name(report)["driver"]
    assert (driver["status"], driver["actual"], driver["detail"]["verdict"]) == (
        "pass",
        "580.126.09",
        "minor",
    )
    assert driver["expected"] == ">= 580.65.06"
    smi.write_text(FAKE_SMI.format(fixtures=FIXTURES).replace("580.126.09", "575.57.08"), encoding="utf-8")
    _, report, _ = run_script(sys.executable, "--expect-cuda", "13.5", env=env)
    driver = by_name(report)["driver"]
    assert driver["status"] == "fail" and "None" not in driver["cause"] + driver["fix"]
    assert "needs >= 580.65.06 for minor-version compatibility" in driver["cause"]
    assert "upgrade the host NVIDIA driver to >= 580.65.06" in driver["fix"]


def test_forward_compat_libraries_in_both_layouts(tmp_path: Path) -> None:
    ngc = tmp_path / "cuda" / "compat" / "lib.real"
    ngc.mkdir(parents=True)
    (ngc / "libcuda.so.545.23.08").write_bytes(b"")
    (ngc / "libcuda.so.1").symlink_to("libcuda.so.545.23.08")
    plain = tmp_path / "cuda-12.1" / "compat"
    plain.mkdir(parents=True)
    (plain / "libcuda.so.530.30.02").write_bytes(b"")
    found = find_forward_compat((str(ngc), str(plain), str(tmp_path / "missing")))
    assert found["versions"] == ["530.30.02", "545.23.08"]
    assert found["dirs"] == [str(ngc), str(plain)]
    assert {Path(lib).name for lib in found["libs"]} >= {"libcuda.so.545.23.08", "libcuda.so.530.30.02"}
    # the symlink resolves to the file already listed: each library once
    assert len(found["libs"]) == len(set(found["libs"]))
