"""The harness's decisions without a Docker engine: GPU requests, verdicts, JUnit."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import junitparser
import pytest

from imagekit.core.errors import InputError
from imagekit.report.junit import write_junit
from imagekit.report.verification import CheckRecord, GpuFigures, Span, Verification
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import check_arguments, check_invocation, verdict_of


@pytest.mark.parametrize(
    ("text", "count", "ids", "requested"),
    [("all", -1, (), True), ("none", 0, (), False), ("2", 2, (), True), ("device=0,1", 2, ("0", "1"), True)],
)
def test_gpu_request_parsing(text: str, count: int, ids: tuple[str, ...], requested: bool) -> None:
    request = GpuRequest.parse(text)
    assert (request.count, request.device_ids, request.requested) == (count, ids, requested)
    requests = request.device_requests()
    if requested:
        (device_request,) = requests
        assert device_request["Capabilities"] == [["gpu"]]
        assert device_request["Count"] == (0 if ids else count) and device_request["DeviceIDs"] == list(ids)
    else:
        assert requests == []


@pytest.mark.parametrize(
    "text",
    [
        "everything",
        "device=",
        "device=0;rm",
        "-2",
        "1" * 5_000,
        "\u0661\u0662",
        "12345",
        "device=" + "0," * 200,
    ],
)
def test_bad_gpu_request(text: str) -> None:
    with pytest.raises(InputError, match="--gpus") as caught:
        GpuRequest.parse(text)
    assert len(caught.value.message) < 200  # a 5,000-digit count is neither converted nor repeated


def test_check_arguments_come_from_labels() -> None:
    labels = {
        "imagekit.torch": "2.1.2",
        "imagekit.cuda": "12.1",
        "imagekit.cudnn": "8",
        "imagekit.python": "3.10",
        "imagekit.flavour": "devel",
    }
    assert check_arguments(labels, GpuRequest.parse("all")) == [
        "--expect-torch", "2.1.2", "--expect-cuda", "12.1", "--expect-cudnn", "8",
        "--expect-python", "3.10", "--flavour", "devel", "--require-gpu",
    ]  # fmt: skip
    assert "--require-gpu" not in check_arguments(labels, GpuRequest.parse("none"))


def test_verify_tells_a_probe_what_it_may_not_know_in_its_environment() -> None:
    """An image published by an earlier release runs its own probe, whose parser exits 2 on an
    option it does not know (--expect-cuda-archs, --host-machine) but ignores a variable."""
    labels = {"imagekit.torch": "2.11.0", "imagekit.cuda-archs": "8.0;9.0"}
    args, environment = check_invocation(labels, GpuRequest.parse("none"), "x86_64")
    assert args == ["--expect-torch", "2.11.0"]
    assert environment == {"IMAGEKIT_EXPECT_CUDA_ARCHS": "8.0;9.0", "IMAGEKIT_HOST_MACHINE": "x86_64"}
    # a Job (k8s) runs an image this release published: everything as options
    assert check_arguments(labels, GpuRequest.parse("none"), "x86_64") == [
        "--expect-torch", "2.11.0", "--expect-cuda-archs", "8.0;9.0", "--host-machine", "x86_64",
    ]  # fmt: skip


def doc(
    *statuses: str,
    gpu_visible: bool,
    required: bool = True,
    gpu: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Generic checks c0, c1... plus the GPU checks (cuda_available, gemm_gpu: pass unless given)."""
    gpu_checks = {"cuda_available": "pass", "gemm_gpu": "pass"} if gpu is None else gpu
    checks = [{"name": f"c{i}", "status": s, "required": required} for i, s in enumerate(statuses)]
    checks += [{"name": name, "status": s, "required": True} for name, s in gpu_checks.items()]
    return {"gpu_visible": gpu_visible, "checks": checks}


@pytest.mark.parametrize(
    ("document", "gpus", "verdict"),
    [
        (doc("pass", "pass", gpu_visible=True), "all", "validated"),
        (doc("pass", "skip", gpu_visible=False), "none", "checked"),
        # a GPU was asked for and none was visible: never a pass, even if nothing failed
        (doc("pass", "skip", gpu_visible=False), "all", "failed"),
        (doc("pass", "fail", gpu_visible=True), "all", "failed"),
        (doc("pass", "fail", gpu_visible=True, required=False), "all", "validated"),
        # a GPU visible with --gpus none still cannot validate: nothing GPU-side was asked for
        (doc("pass", gpu_visible=True), "none", "checked"),
        ({"checks": []}, "all", "failed"),
        ({}, "none", "failed"),
        # validated needs the GPU checks themselves, present and passed
        (doc("pass", gpu_visible=True, gpu={}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"gemm_gpu": "pass"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass", "gemm_gpu": "skip"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "skip", "gemm_gpu": "pass"}), "all", "failed"),
        # without a GPU asked for, skipped GPU checks are what is expected
        (
            doc("pass", gpu_visible=False, gpu={"cuda_available": "skip", "gemm_gpu": "skip"}),
            "none",
            "checked",
        ),
        # any status but pass or skip counts as a failure
        (doc("pass", "error", gpu_visible=True), "all", "failed"),
        (doc("pass", "timeout", gpu_visible=False), "none", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass", "gemm_gpu": "error"}), "all", "failed"),
    ],
)
def test_verdicts(document: dict[str, Any], gpus: str, verdict: str) -> None:
    assert verdict_of(document, GpuRequest.parse(gpus))[0] == verdict


def test_junit_reads_back_with_the_right_counts(tmp_path: Path) -> None:
    checks = (
        CheckRecord("torch", "pass", True, duration_s=0.5),
        CheckRecord("gemm-gpu", "skip", True, reason="no GPU requested"),
        CheckRecord("nvcc", "fail", True, cause="nvcc missing", fix="use a devel base", expected="12.1"),
    )
    results = [
        Verification("cell-a", "img:a", "none", "failed", False, False, checks, 1.5),
        Verification(
            "cell-b", "img:b", "all", "failed", True, False, (), 900.0, error="timed out after 900s"
        ),
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.name for s in suites] == ["cell-a", "cell-b"]
    assert (suites[0].tests, suites[0].failures, suites[0].skipped) == (3, 1, 1)
    assert (suites[1].tests, suites[1].failures) == (1, 1)
    cases = {case.name: case for case in suites[0]}
    assert cases["nvcc"].result[0].message == "nvcc missing"
    assert isinstance(cases["gemm-gpu"].result[0], junitparser.Skipped)
    assert cases["torch"].is_passed


def test_verification_round_trips_through_json() -> None:
    result = Verification(
        "cell", "img", "all", "validated", True, True, (CheckRecord("torch", "pass", True),), 2.0,
        metrics={"gemm_perf.tflops": 712.5},
        gpu_figures=(GpuFigures(0, "H200", 712.5, power_w=Span(80.0, 699.1, 512.0), throttle={"a": 1}),),
    )  # fmt: skip
    assert Verification.from_json(result.as_json()) == result
    assert result.label == "validated"


def test_first_json_object_skips_banners_and_trailing_text() -> None:
    from imagekit.verify.harness import _first_json_object

    document = {"checks": [{"name": "torch", "status": "pass"}], "gpu_visible": False}

    text = 'banner {not json} and {"other": 1}\n' + json.dumps(document, indent=2) + "\nbye {\n"
    assert _first_json_object(text) == document
    assert _first_json_object('{"checks": []} trailing') == {"checks": []}
    assert _first_json_object('{"no": "checks"}') is None
    assert _first_json_object("no json at all") is None


def test_junit_fails_a_failed_verdict_without_a_failing_check(tmp_path: Path) -> None:
    checks = (CheckRecord("torch", "pass", True), CheckRecord("gemm_gpu", "skip", True, reason="no torch"))
    results = [Verification("cell-a", "img:a", "all", "failed", True, True, checks, 1.0)]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    (suite,) = list(junitparser.JUnitXml.fromfile(str(path)))
    assert (suite.tests, suite.failures) == (3, 1)
    cases = {case.name: case for case in suite}
    assert "gemm_gpu" in cases["verdict"].result[0].message


def test_junit_drops_characters_xml_forbids(tmp_path: Path) -> None:
    checks = (
        CheckRecord(
            "nvcc\x07",
            "fail",
            True,
            cause="\x1b[31mred\x1b[0m cause\x00",
            detail="a\x1bb\x0cc\x7f",
            fix="ok\ttab",
        ),
    )
    results = [
        Verification("cell\x01", "img\x1b[1m", "none", "failed", False, False, checks, 1.0, error="e\x02")
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    text = path.read_text(encoding="utf-8")
    assert not any(ord(c) < 0x20 and c not in "\t\n\r" for c in text)
    (suite,) = list(junitparser.JUnitXml.fromfile(str(path)))
    (case,) = list(suite)
    assert suite.name == "cell" and case.name == "nvcc"
    assert case.result[0].message == "red cause"


def test_the_injected_script_archive_creates_its_directory() -> None:
    import io
    import tarfile

    from imagekit.verify.harness import INJECTED_SCRIPT_DIR, _script_archive

    with tarfile.open(fileobj=io.BytesIO(_script_archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    directory = INJECTED_SCRIPT_DIR.strip("/")
    assert members[directory].isdir() and members["opt"].isdir()
    script = members[f"{directory}/check.py"]
    assert script.isfile() and script.mode & 0o111


def test_an_engine_gone_while_inspecting_the_image_is_an_environment_problem() -> None:
    import requests

    from imagekit.core.errors import EnvironmentProblem
    from imagekit.verify.harness import Harness, Target

    class GoneApi:
        def inspect_image(self, ref: str) -> None:
            raise requests.ConnectionError("connection refused")

    harness = Harness(GoneApi(), GpuRequest.parse("none"))  # type: ignore[arg-type]
    with pytest.raises(EnvironmentProblem, match="cannot reach the Docker engine"):
        harness.verify(Target("t", "img"))


def test_pull_targets_are_the_staged_digests() -> None:
    from dataclasses import replace

    from imagekit.verify.harness import Target
    from imagekit.verify.schedule import targets_for
    from tests.unit.report_samples import build_report

    report = build_report()
    built, skipped = report.cells[0], report.cells[1]
    assert built.staged is not None and built.image_id is not None
    cells = [SimpleNamespace(id=r.id, platform="linux/arm64") for r in report.cells]
    targets, missing = targets_for(cells, report, staged=True)  # type: ignore[arg-type]
    staged = built.staged.reference
    assert targets == [Target(built.id, staged, built.image_id, built.staged.digest, "linux/arm64")]
    assert dict(missing)[skipped.id].startswith("never staged; run `imagekit build --push`")
    assert "its build failed" in dict(missing)["cuda-failed"]
    # Without --pull the image id runs; its staged digest is still what it was pushed as.
    targets, _ = targets_for(cells, replace(report, cells=(built,)))  # type: ignore[arg-type]
    assert targets == [Target(built.id, built.image_id, built.image_id, built.staged.digest, "linux/arm64")]


def test_ctrl_c_during_the_create_call_still_removes_the_container() -> None:
    """The engine made the container but Ctrl-C cut the create response short: its id never reached
    the harness, so only this run's label can find it (a CI run left such a container behind)."""
    from imagekit.verify.harness import Harness, Target
    from imagekit.verify.schedule import verify_all

    class InterruptedApi:
        def __init__(self) -> None:
            self.containers_made: dict[str, dict[str, str]] = {}

        def inspect_image(self, ref: str) -> dict[str, object]:
            return {"Id": "sha256:" + "1" * 64, "Config": {"Labels": {}}}

        def info(self) -> dict[str, str]:
            return {"Architecture": "x86_64"}

        def create_host_config(self, **options: object) -> dict[str, object]:
            return dict(options)

        def create_container(self, image: str, labels: dict[str, str], **options: object) -> None:
            self.containers_made["c0ffee"] = labels
            raise KeyboardInterrupt  # the response never arrives

        def containers(self, all: bool, quiet: bool, filters: dict[str, str]) -> list[dict[str, str]]:
            key, _, value = filters["label"].partition("=")
            return [{"Id": cid} for cid, labels in self.containers_made.items() if labels.get(key) == value]

        def remove_container(self, container: str, force: bool, v: bool) -> None:
            del self.containers_made[container]

    api = InterruptedApi()
    harness = Harness(api, GpuRequest.parse("none"))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        verify_all(harness, [Target("t", "img")])
    assert api.containers_made == {}


def test_a_verification_records_the_inputs_its_image_names() -> None:
    """What publish compares with the cell's record: the image's input-digest label, when it is
    one; an image without it, or with a label that is no input digest, records none."""
    from imagekit.core import naming
    from imagekit.verify.harness import _built_from

    assert _built_from({naming.INPUT_DIGEST_LABEL: "f" * 64}) == "f" * 64
    assert _built_from({}) is None
    assert _built_from({naming.INPUT_DIGEST_LABEL: "$(reboot)"}) is None
