"""Verify per platform: an emulated run is never validated (on every read too), its GEMM figures carry
no floor, and the check container runs for the image's own platform, refusing a GPU request for an
emulated one (the probe's own record of where it ran: tests/unit/probe/test_emulation.py). The GPU
families on Grace hosts (GH200, GB200, GB300) are data."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.facts import emulation, probe_tables
from imagekit.probe import arch, perf, protocol
from imagekit.report.html import render_html
from imagekit.report.junit import junit_xml
from imagekit.report.state import REPORT_NAME
from imagekit.report.store import read_report
from imagekit.report.text import rows
from imagekit.report.verification import CheckRecord, RunPlatform, Verification, derive_verdict, gemm_figures
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.harness import Harness, Target
from imagekit.verify.invocation import verdict_of
from tests.unit.report_samples import build_report, sample_report

PASSING_GPU = tuple(CheckRecord(name, "pass", True) for name in protocol.VALIDATING_GPU_CHECKS)
EMULATED = RunPlatform("aarch64", "x86_64", True)


# -- the verdict, derived on every read ----------------------------------------------------------------


def test_an_emulated_run_is_never_validated() -> None:
    assert derive_verdict(PASSING_GPU, True, True) == "validated"
    assert derive_verdict(PASSING_GPU, True, True, emulated=True) == "failed"
    assert derive_verdict(PASSING_GPU, False, False, emulated=True) == "checked"
    document = {
        "gpu_visible": True,
        "checks": [{"name": n, "status": "pass"} for n in protocol.VALIDATING_GPU_CHECKS],
    }
    assert verdict_of(document, GpuRequest.parse("all"))[0] == "validated"
    assert verdict_of(document, GpuRequest.parse("all"), emulated=True)[0] == "failed"
    said = {**document, "platform": {"machine": "aarch64", "host_machine": "x86_64", "emulated": True}}
    assert verdict_of(said, GpuRequest.parse("all"))[0] == "failed"  # the probe's word suffices


def test_a_record_that_says_emulated_and_validated_is_refused_on_read(tmp_path: Path) -> None:
    data = build_report().as_json()
    record = sample_report().cells[0].verification
    assert record is not None and record.verdict == "validated"
    data["cells"][0]["verification"] = {**record.as_json(), "target": data["cells"][0]["id"]}
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    assert read_report(tmp_path).cells[0].verification.verdict == "validated"  # type: ignore[union-attr]
    for said in (
        {"machine": "aarch64", "host_machine": "x86_64", "emulated": True},
        {"machine": "arm64", "host_machine": "x86_64", "emulated": False},  # contradicts itself
    ):
        data["cells"][0]["verification"]["platform"] = said
        (tmp_path / REPORT_NAME).write_text(json.dumps(data))
        with pytest.raises(
            InputError, match=r"says 'validated', but its run was emulated \(.*never validated"
        ):
            read_report(tmp_path)
    data["cells"][0]["verification"]["platform"] = {
        "machine": "x86_64",
        "host_machine": "amd64",
        "emulated": False,
    }
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    assert read_report(tmp_path).cells[0].verification.verdict == "validated"  # type: ignore[union-attr]


def test_an_emulated_runs_gemm_figures_carry_no_floor() -> None:
    detail = {
        "device": "NVIDIA GH200 480GB",
        "floor_tflops": 400.0,
        "devices": [
            {
                "index": 0,
                "device": "NVIDIA GH200 480GB",
                "tflops": 3.5,
                "floor_tflops": 400.0,
                "status": "fail",
            }
        ],
    }
    checks = (CheckRecord(protocol.GEMM_PERF, "fail", False, actual="3.5", detail=json.dumps(detail)),)
    metrics, gpus = gemm_figures(checks, emulated=True)
    assert (
        metrics[f"{protocol.GEMM_PERF}.emulated"] is True
        and metrics[f"{protocol.GEMM_PERF}.floor_tflops"] is None
    )
    assert (gpus[0].tflops, gpus[0].floor_tflops, gpus[0].status) == (3.5, None, protocol.SKIP)
    native, native_gpus = gemm_figures(checks)
    assert native[f"{protocol.GEMM_PERF}.floor_tflops"] == 400.0 and native_gpus[0].status == "fail"


# -- the check container: the image's platform, GPUs refused when emulated ------------------------------


class RecordingApi:
    """An engine of ``machine`` holding one image of ``arch``; records the containers created."""

    def __init__(self, machine: str, arch_name: str | None, document: dict[str, Any]) -> None:
        self.machine = machine
        self.arch = arch_name
        self.document = document
        self.created: list[dict[str, Any]] = []

    def info(self) -> dict[str, str]:
        return {"Architecture": self.machine}

    def inspect_image(self, ref: str) -> dict[str, Any]:
        image: dict[str, Any] = {"Id": "sha256:" + "1" * 64, "Os": "linux", "Config": {"Labels": {}}}
        return {**image, "Architecture": self.arch} if self.arch else image

    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return dict(options)

    def create_container(self, image: str, **options: Any) -> dict[str, str]:
        self.created.append({"image": image, **options})
        return {"Id": f"c{len(self.created)}"}

    def put_archive(self, container: str, path: str, data: bytes) -> None:
        pass

    def start(self, container: str) -> None:
        pass

    def wait(self, container: str, timeout: int) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, container: str, stdout: bool, stderr: bool) -> bytes:
        return json.dumps(self.document).encode() if stdout else b""

    def remove_container(self, container: str, force: bool, v: bool) -> None:
        pass

    def containers(self, **options: Any) -> list[dict[str, str]]:
        return []


CHECKED = {
    "gpu_visible": False,
    "checks": [{"name": protocol.PYTHON, "status": "pass", "required": True}],
    "platform": {"machine": "aarch64", "host_machine": "x86_64", "emulated": True},
}


def test_an_arm64_image_runs_as_arm64_and_is_recorded_emulated_on_an_x86_engine() -> None:
    api = RecordingApi("x86_64", "arm64", CHECKED)
    result = Harness(api, GpuRequest.parse("none")).verify(
        Target("cell-arm64", "img", platform="linux/arm64")
    )  # type: ignore[arg-type]
    (created,) = api.created
    assert created["platform"] == "linux/arm64"
    # told in the environment: the image's own probe may predate the option (it would exit 2)
    assert protocol.HOST_MACHINE_OPTION not in created["command"]
    assert created["environment"][protocol.HOST_MACHINE_ENV] == "x86_64"
    assert result.verdict == "checked" and result.platform == RunPlatform("aarch64", "x86_64", True)
    shown = rows(build_report_with(result))[0][2]
    assert result.emulated and "checked without GPU (aarch64 (emulated on x86_64))" in shown


def test_the_host_knows_emulation_whatever_the_image_says() -> None:
    lying = {**CHECKED, "platform": {"machine": "x86_64", "host_machine": "x86_64", "emulated": False}}
    result = Harness(RecordingApi("x86_64", "arm64", lying), GpuRequest.parse("none")).verify(
        Target("t", "img")
    )  # type: ignore[arg-type]
    assert result.platform is not None and result.platform.emulated is True


def test_a_gpu_request_for_an_emulated_image_fails_before_any_container() -> None:
    api = RecordingApi("x86_64", "arm64", CHECKED)
    result = Harness(api, GpuRequest.parse("all")).verify(Target("t", "img"))  # type: ignore[arg-type]
    assert api.created == []
    assert result.verdict == "failed" and result.emulated
    assert result.error is not None and "runs emulated" in result.error and "cannot use a GPU" in result.error
    xml = junit_xml([result])
    assert (
        '<property name="emulated" value="true"' in xml and '<property name="machine" value="aarch64"' in xml
    )


def test_a_native_image_runs_natively_and_an_image_of_another_platform_than_its_cell_is_refused() -> None:
    native = {**CHECKED, "platform": {"machine": "x86_64", "host_machine": "x86_64", "emulated": False}}
    api = RecordingApi("x86_64", "amd64", native)
    result = Harness(api, GpuRequest.parse("none")).verify(Target("t", "img"))  # type: ignore[arg-type]
    assert api.created[0]["platform"] == "linux/amd64" and not result.emulated and result.verdict == "checked"
    refused = Harness(api, GpuRequest.parse("none")).verify(Target("t", "img", platform="linux/arm64"))  # type: ignore[arg-type]
    assert refused.verdict == "failed" and "is for 'linux/amd64', not 'linux/arm64'" in (refused.error or "")
    assert len(api.created) == 1


def test_placement_of_images() -> None:
    arm = emulation.place({"Architecture": "arm64", "Os": "linux"}, "x86_64")
    assert arm == emulation.Placement("linux/arm64", "aarch64", "x86_64", True)
    assert emulation.place({"Architecture": "amd64"}, "x86_64") == emulation.Placement(
        "linux/amd64", "x86_64", "x86_64", False
    )
    assert emulation.place({"Architecture": "arm64"}, "aarch64").emulated is False  # type: ignore[union-attr]
    assert emulation.place({}, "x86_64") == emulation.Placement(None, None, "x86_64", False)
    assert emulation.place({}, "x86_64", "linux/arm64") == emulation.Placement(
        "linux/arm64", "aarch64", "x86_64", True
    )
    assert emulation.engine_machine({"Architecture": "arm64"}) == "aarch64"


def build_report_with(result: Verification) -> Any:
    report = build_report()
    cell = replace(report.cells[0], verification=replace(result, target=report.cells[0].id))
    return replace(report, cells=(cell,), bases=())


def test_the_html_report_shows_the_machine() -> None:
    result = replace(
        sample_report().cells[0].verification, verdict="checked", gpu_requested=False, platform=EMULATED
    )  # type: ignore[arg-type]
    html = render_html(build_report_with(result))
    assert "aarch64 (emulated on x86_64)" in html
    assert "emulated: not compared with a floor" in html and "(floor 400" not in html


# -- the GPU families of Grace hosts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "floor"),
    [("NVIDIA GH200 480GB", 400.0), ("NVIDIA GB200", 1000.0), ("NVIDIA GB300", 1000.0)],
)
def test_grace_products_have_floors_and_an_aarch64_host(product: str, floor: float) -> None:
    assert perf.gemm_floor(product)[0] == floor
    data = yaml.safe_load(
        Path(probe_tables.__file__).parent.with_name("data").joinpath("gpus.yaml").read_text()
    )
    entry = data["gemm_floors"]["products"][product]
    assert entry["machine"] == probe_tables.machines()["arm64"]
    assert probe_tables.probe_tables()["gemm_floors"]["products"][product]["machine"] == "aarch64"


@pytest.mark.parametrize(
    ("arch_list", "capability", "runs"),
    [
        (["sm_80", "sm_90"], (9, 0), True),  # GH200 on a cu126 aarch64 wheel (sm_80/sm_90 only)
        (["sm_80", "sm_90"], (10, 0), False),  # GB200 on it: no kernel image
        (["sm_90", "sm_100", "sm_120"], (10, 0), True),  # GB200 on a cu128+ wheel
        (["sm_90", "sm_100", "sm_120"], (10, 3), True),  # GB300: sm_100 SASS runs on 10.3
        (["sm_90", "sm_100a"], (10, 3), False),  # arch-specific SASS runs on 10.0 only
        (["sm_90", "sm_100f"], (10, 3), True),  # family SASS runs across 10.x
        (["sm_103"], (10, 0), False),
        (["sm_90", "compute_90"], (10, 3), True),  # PTX, JIT-compiled
    ],
)
def test_the_arch_check_knows_the_grace_families(
    arch_list: list[str], capability: tuple[int, int], runs: bool
) -> None:
    assert arch.arch_supported(arch_list, capability)[0] is runs
