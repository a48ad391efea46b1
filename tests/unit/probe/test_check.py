"""The in-image check (imagekit/probe, shipped as the zipapp at /opt/imagekit/check.py): parsers on
real captured outputs, the NVIDIA_REQUIRE_* evaluator, the GPU policy, and real runs of the script
(host Python without torch; a venv with the real PyTorch CPU wheel). Fixture provenance:
tests/fixtures/check/NOTES.md."""

from __future__ import annotations

import ast
import platform
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.probe import arch, arguments, context, perf, require, results, versions
from imagekit.probe import driver as probe_driver
from imagekit.probe import smi as probe_smi
from tests.unit.probe_runs import (
    FIELDS_440,
    FIXTURES,
    PROBE,
    REPO,
    SCRIPT,
    by_name,
    clean_env,
    fixture,
    python_3_8,
    run_script,
)

GPU_CHECKS = (
    "nvidia_smi",
    "driver",
    "require",
    "cuda_available",
    "arch",
    "gemm_gpu",
    "cudnn_conv",
    "gemm_perf",
    "nccl",
    "nccl_bandwidth",
)
TORCH_CHECKS = ("torch_cuda", "cudnn", "gemm_cpu", "compile", "extension", "train_step")


def satisfied(expression: str, props: dict[str, str | None]) -> bool | None:
    """Three-valued: True, False (also: an expression the toolkit refuses), None (undetermined)."""
    return require.evaluate_require_verdict(expression, props).satisfied


def assert_no_gpu_pass(report: dict[str, Any]) -> None:
    """The rule the whole script exists for: without a GPU no GPU check may read pass."""
    assert report["gpu_visible"] is False
    for name in GPU_CHECKS:
        assert by_name(report)[name]["status"] != "pass", name


# -- parsers on real outputs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "release", "version"),
    [
        ("ptxas-version-11.8.89.txt", "11.8", "11.8.89"),
        ("ptxas-version-12.1.105.txt", "12.1", "12.1.105"),
        ("nvcc-version-13.0.88.txt", "13.0", "13.0.88"),
    ],
)
def test_parse_nvcc_version_on_captured_outputs(name: str, release: str, version: str) -> None:
    assert versions.parse_nvcc_version(fixture(name)) == {"release": release, "version": version}


def test_parse_nvcc_version_published_12_1_and_garbage() -> None:
    published = (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\n"
        "Built on Tue_Feb__7_19:32:13_PST_2023\nCuda compilation tools, release 12.1, V12.1.66\n"
        "Build cuda_12.1.r12.1/compiler.32415258_0\n"
    )
    assert versions.parse_nvcc_version(published) == {"release": "12.1", "version": "12.1.66"}
    assert versions.parse_nvcc_version("bash: nvcc: command not found") is None


def test_parse_version_json() -> None:
    assert versions.parse_version_json(fixture("version-json-11.8-excerpt.json")) == "11.8.20220929"
    assert versions.parse_version_json(fixture("version-json-13.3.1-excerpt.json")) == "13.3.1"
    assert versions.cuda_minor("11.8.20220929") == "11.8"
    assert versions.parse_version_json("not json") is None
    assert versions.parse_version_json("[]") is None


def test_parse_nvidia_smi_csv_with_header() -> None:
    fields = ["compute_cap", "compute_mode", "driver_version", "name", "index"]
    rows = probe_smi.parse_nvidia_smi_csv(fixture("nvidia-smi-csv-compute-cap-header.txt"), fields)
    assert rows == [
        {
            "compute_cap": "7.0",
            "compute_mode": "Default",
            "driver_version": "570.86.15",
            "name": "NVIDIA TITAN V",
            "index": "0",
        },
        {
            "compute_cap": "8.9",
            "compute_mode": "Default",
            "driver_version": "570.86.15",
            "name": "NVIDIA RTX 5880 Ada Generation",
            "index": "1",
        },
    ]
    b300 = probe_smi.parse_nvidia_smi_csv(
        fixture("nvidia-smi-csv-b300-header.txt"), ["driver_version", "name", "compute_cap"]
    )
    assert len(b300) == 7
    assert {r["compute_cap"] for r in b300} == {"10.3"}


def test_parse_nvidia_smi_csv_noheader_nounits() -> None:
    text = fixture("nvidia-smi-csv-noheader-nounits-440.txt")
    (row,) = probe_smi.parse_nvidia_smi_csv(text, list(FIELDS_440))
    assert row["name"] == "GeForce RTX 2080"
    assert row["driver_version"] == "440.64"
    assert row["memory.total"] == "7979"


def test_parse_nvidia_smi_csv_ignores_the_old_driver_rejection() -> None:
    text = fixture("nvidia-smi-compute-cap-rejected.txt")
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    assert probe_smi.parse_nvidia_smi_csv(text, fields) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvidia-smi-header-580-a100.txt", {"smi": "580.126.09", "driver": "580.126.09", "cuda": "13.0"}),
        ("nvidia-smi-header-r610-kmd.txt", {"smi": "610.43.02", "driver": "610.43.02", "cuda": "13.3"}),
        (
            "nvidia-smi-header-snap-470-tool-580-driver.txt",
            {"smi": "470.256.02", "driver": "580.95.05", "cuda": "13.0"},
        ),
        ("nvidia-smi-header-331-no-cuda.txt", {"smi": "331.62", "driver": "331.62"}),
    ],
)
def test_parse_nvidia_smi_header(name: str, expected: dict[str, str]) -> None:
    assert probe_smi.parse_nvidia_smi_header(fixture(name)) == expected


def test_parse_nvidia_smi_list_and_brands() -> None:
    gpus = probe_smi.parse_nvidia_smi_list(fixture("nvidia-smi-L.txt"))
    assert [g["name"] for g in gpus] == ["NVIDIA TITAN V", "NVIDIA RTX 5880 Ada Generation"]
    assert gpus[0]["uuid"] == "GPU-b5169cef-2205-c30e-f2b3-220cfa14bafd"
    # `nvidia-smi -q` line layout as in https://github.com/anderskm/gputil/issues/38
    assert probe_smi.parse_nvidia_smi_brands("    Product Brand                   : GeForce\n") == ["GeForce"]


def test_parse_cudnn_header_and_torch_ints() -> None:
    assert versions.parse_cudnn_header(fixture("cudnn-version-h-9.5.0.txt")) == "9.5.0"
    header_8 = "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 2\n"
    assert versions.parse_cudnn_header(header_8) == "8.9.2"
    assert versions.parse_cudnn_header("#define CUDNN_MAJOR 8\n") is None
    assert versions.cudnn_int_to_version(8902) == "8.9.2"
    assert versions.cudnn_int_to_version(8700) == "8.7.0"
    assert versions.cudnn_int_to_version(90100) == "9.1.0"
    assert versions.cudnn_int_to_version(91200) == "9.12.0"


def test_parse_os_release() -> None:
    found = versions.parse_os_release('NAME="Ubuntu"\nVERSION_ID="22.04"\n# comment\n')
    assert found == {"NAME": "Ubuntu", "VERSION_ID": "22.04"}


# -- NVIDIA_REQUIRE_* --------------------------------------------------------------------------

REQ_118 = "cuda>=11.8 brand=tesla,driver>=470,driver<471"
REQ_121 = "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=525,driver<526"


def props(**kw: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {"cuda": None, "driver": None, "arch": None, "brand": None}
    base.update(kw)
    return base


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


# -- driver table, arch, floors -------------------------------------------------------------------


def test_embedded_driver_table_equals_compat_yaml() -> None:
    data = yaml.safe_load((REPO / "imagekit" / "data" / "compat.yaml").read_text(encoding="utf-8"))
    releases = data["cuda"]["releases"]
    from_yaml = {minor: row["minor_floor"] for minor, row in releases.items()}
    assert from_yaml == {minor: row[1] for minor, row in probe_driver.CUDA_DRIVER_TABLE.items()}


def test_driver_satisfies() -> None:
    assert probe_driver.driver_satisfies("520.61.05", "11.8") == "full"
    assert probe_driver.driver_satisfies("470.57.02", "11.8") == "minor"
    assert probe_driver.driver_satisfies("440.64", "11.8") == "too_old"
    assert probe_driver.driver_satisfies("530.30.02", "12.1.1") == "full"
    assert probe_driver.driver_satisfies("525.60.13", "12.1") == "minor"
    assert probe_driver.driver_satisfies("525.60.12", "12.1") == "too_old"
    assert probe_driver.driver_satisfies("470.5", "12.1") == "too_old"
    assert probe_driver.driver_satisfies("575.57.08", "13.0") == "too_old"  # 13.x floor is 580.65.06
    assert probe_driver.driver_satisfies("999", "10.2") == "unknown_cuda"


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


def test_gemm_floor_exact_names() -> None:
    assert perf.gemm_floor("NVIDIA H200")[0] == 400.0
    assert perf.gemm_floor("NVIDIA H100 80GB HBM3")[0] == 350.0
    assert perf.gemm_floor("NVIDIA GeForce RTX 4090")[0] == 70.0
    assert perf.gemm_floor("NVIDIA A100-SXM4-80GB")[0] == 140.0
    assert perf.gemm_floor("NVIDIA TITAN V")[0] is None
    # the substring match of old gave this Ampere laptop-class card the A100 floor
    floor, how = perf.gemm_floor("NVIDIA RTX A1000")
    assert floor is None and "exact device name" in how
    assert perf.gemm_floor("NVIDIA A100")[0] is None
    assert perf.gemm_floor("Tesla T4")[0] == 20.0 and perf.GEMM_FLOORS["Tesla T4"].dtype == "float16"


def test_gemm_floor_mig_slices_scale_by_sms() -> None:
    # torch's name for a MIG slice: the board, " MIG ", the profile (published PyTorch output)
    floor, how = perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14)
    assert floor == round(140.0 * 14 / 108, 1) and "14/108" in how
    assert perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 98)[0] == round(140.0 * 98 / 108, 1)
    floor, how = perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    assert floor is None and "cannot be scaled" in how
    assert perf.gemm_floor("NVIDIA A30 MIG 1g.6gb", 14)[0] == round(70.0 * 14 / 56, 1)  # A30: data now
    floor, how = perf.gemm_floor("NVIDIA A800-SXM4-80GB MIG 1g.10gb", 14)
    assert floor is None and "no floor known for the board" in how


def test_perf_dtype() -> None:
    assert perf.perf_dtype("NVIDIA H200", (9, 0)) == "bfloat16"
    assert perf.perf_dtype("Tesla V100-SXM2-16GB", (7, 0)) == "float16"
    assert perf.perf_dtype("Some Future GPU", (7, 5)) == "float16"
    assert perf.perf_dtype("Some Future GPU", (10, 0)) == "bfloat16"


def test_exception_in_a_check_becomes_its_failure() -> None:
    def boom(ctx: context.Context) -> results.CheckResult:
        raise RuntimeError("kaboom")

    ctx = context.Context(arguments.Expect(), clean_env())
    result = results.run_check("boom", boom, ctx)
    assert result.status == "fail"
    assert result.cause is not None and "RuntimeError: kaboom" in result.cause


def test_arguments_win_over_environment() -> None:
    expect, _ = arguments.parse_args(
        ["--expect-torch", "2.1.2"], {"IMAGEKIT_EXPECT_TORCH": "2.0.0", "IMAGEKIT_EXPECT_CUDA": "12.1"}
    )
    assert expect.torch == "2.1.2"
    assert expect.cuda == "12.1"
    assert arguments.parse_args([], {"IMAGEKIT_REQUIRE_GPU": "1"})[0].require_gpu is True


def test_script_is_python_3_8_syntax() -> None:
    """Always runs (no 3.8 interpreter needed): the grammar check behind the real 3.8 run below."""
    with zipfile.ZipFile(SCRIPT) as archive:
        names = archive.namelist()
        sources = {name: archive.read(name).decode("utf-8") for name in names if name.endswith(".py")}
    assert "__main__.py" in sources and len(sources) == len(list(PROBE.glob("*.py"))) + 1
    assert len(names) == len(sources) + 1  # and the generated facts.json
    for name, text in sources.items():
        ast.parse(text, filename=name, feature_version=(3, 8))


# -- real runs on this host's Python (no torch here) -------------------------------------------


def test_host_run_without_torch_fails_clearly() -> None:
    rc, report, stderr = run_script(sys.executable, "--expect-torch", "2.13.0", "--expect-cuda", "cpu")
    assert "Traceback" not in stderr
    assert rc == 1
    assert report["schema"] == 2
    assert report["platform"] == {"machine": platform.machine(), "host_machine": None, "emulated": None}
    torch_check = by_name(report)["torch"]
    assert torch_check["status"] == "fail"
    assert "cannot be imported" in torch_check["cause"] and torch_check["fix"]
    assert report["summary"]["required_failed"] == ["torch"]
    # nothing that needs torch pretends to have run
    for name in TORCH_CHECKS:
        assert by_name(report)[name]["status"] == "skip", name
    assert report["telemetry"] is None
    assert report["inventory"]["packages"]
    assert_no_gpu_pass(report)


def test_gpu_not_requested_means_skip() -> None:
    # NVIDIA_VISIBLE_DEVICES=all is the nvidia/cuda image default, not a request
    _, report, _ = run_script(sys.executable, env=clean_env(NVIDIA_VISIBLE_DEVICES="all"))
    assert report["gpu_requested"] is False
    for name in ("nvidia_smi", "cuda_available", "gemm_gpu", "nccl"):
        assert by_name(report)[name]["status"] == "skip"
        assert by_name(report)[name]["reason"] == "no GPU requested"
    assert_no_gpu_pass(report)


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


@pytest.mark.skipif(python_3_8() is None, reason="no Python 3.8 here (the syntax check above still runs)")
def test_script_runs_on_python_3_8() -> None:
    python = python_3_8()
    assert python is not None
    rc, report, stderr = run_script(python, "--expect-cuda", "cpu")
    assert "Traceback" not in stderr
    assert rc == 1  # no torch in that interpreter
    assert by_name(report)["torch"]["status"] == "fail"


# -- real runs against the real PyTorch CPU wheel -----------------------------------------------


# -- the all-reduce bandwidth check: topology and floors ---------------------------------------------

TOPO_8 = """\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tSYS\tPIX\t0-47\t0\t\tN/A
GPU1\tNV18\t X \tPXB\tSYS\t0-47\t0\t\tN/A
GPU2\tSYS\tPXB\t X \tSYS\t48-95\t1\t\tN/A
NIC0\tPIX\tSYS\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_parse_topo_and_floors_by_link() -> None:
    from imagekit.probe import bandwidth, facts

    links = bandwidth.parse_topo(TOPO_8)
    assert links[(0, 1)] == "NV18" and links[(1, 2)] == "PXB" and links[(0, 2)] == "SYS"
    assert links[(0, 0)] == "X" and (0, 3) not in links  # NIC columns are not GPUs
    table = facts.nccl_bandwidth()
    assert bandwidth.pair_floor("NV18", table)[0] == 180.0
    assert bandwidth.pair_floor("PXB", table)[0] == 6.0 and bandwidth.pair_floor("SYS", table)[0] == 2.0
    assert bandwidth.pair_floor("XYZ", table)[0] is None and bandwidth.pair_floor(None, table)[0] is None
    assert bandwidth.bus_bandwidth(2 * 10**9, 1.0, 2) == 2.0  # nccl-tests: algbw x 2(n-1)/n
    assert bandwidth.bus_bandwidth(8 * 10**9, 1.0, 8) == 14.0


def test_bandwidth_verdict_passes_skips_and_fails_by_pair() -> None:
    from imagekit.probe import bandwidth, facts

    table = facts.nccl_bandwidth()
    links = bandwidth.parse_topo(TOPO_8)
    measured = [
        {"pair": [0, 1], "seconds": 0.01, "busbw_gbps": 350.0},  # NV18: floor 180
        {"pair": [1, 2], "seconds": 0.02, "busbw_gbps": 18.0},  # PXB: floor 6
    ]
    pairs = bandwidth._judge_pairs(measured, links, table)
    assert [p["status"] for p in pairs] == ["pass", "pass"]
    assert bandwidth._verdict(pairs, {}).status == "pass"
    slow = bandwidth._judge_pairs([{**measured[0], "busbw_gbps": 20.0}], links, table)  # NVLink unused
    verdict = bandwidth._verdict(slow, {})
    assert (
        verdict.status == "fail"
        and verdict.required is False
        and "GPUs 0-1 (NV18) 20.0 GB/s" in verdict.cause
    )
    unknown = bandwidth._judge_pairs(measured, {}, table)  # no topology: no floors
    assert bandwidth._verdict(unknown, {}).status == "skip"
