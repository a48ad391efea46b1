"""`imagekit k8s-results`: validate-on Jobs' outputs (recorded probe outputs on an H100 SXM and an
L40S node, tests/fixtures/validate-on) read back into the report per cell and digest; every file
untrusted: bounded, one line per problem, exit 2 and nothing written."""

from __future__ import annotations

import json
import os
import types
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.core.errors import ExitCode
from imagekit.core.limits import JOB_OUTPUT_BYTES
from imagekit.k8s.results import MAX_ATTEMPTS, OUTPUT_WHAT, _expectations_problem, probe_documents
from imagekit.k8s.validate_on import PLAN_NAME, parse_plan
from imagekit.report.lockfile import merge_lock
from imagekit.report.store import BuildReport, read_report, write_report
from imagekit.report.text import rows
from tests.conftest import REPO, run_cli
from tests.unit.report_samples import lock_entry, result

FIXTURES = REPO / "tests" / "fixtures" / "validate-on"
CELL = "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"
H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"
IMAGE_ID = "sha256:" + "cd" * 32  # report_samples.lock_entry's
DIGEST = "sha256:" + "ab" * 32
EXPECT = {"torch": "2.5.1", "cuda": "12.1", "cudnn": "9", "python": "3.10", "flavour": "runtime"}


@dataclass
class Setup:
    root: Path
    plan: Path
    state: Path
    jobs: dict[str, str]  # product -> Job name

    def log(self, product: str, text: str | None = None, fixture: str | None = None) -> Path:
        """The product's Job output, named after its Job: a fixture's or ``text``."""
        path = self.root / "logs" / f"{self.jobs[product]}.log"
        path.parent.mkdir(exist_ok=True)
        name = fixture or {H100: "h100-sxm.log", L40S: "l40s.log"}[product]
        path.write_text(text if text is not None else (FIXTURES / name).read_text(encoding="utf-8"))
        return path

    def results(self, *paths: Path, cluster: str = "prod-east", status: Any = None) -> Any:
        """``k8s-results`` of ``paths``; ``status``: the objects ``kubectl get jobs,pods -o json`` lists."""
        if status is not None:
            file = self.root / "status.json"
            file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": status}))
            status = ("--status", str(file))
        status = status or ()
        return run_cli(
            "k8s-results", "--cluster", cluster, "--plan", str(self.plan), "--state-dir", str(self.state),
            *status, *map(str, paths),
        )  # fmt: skip

    def report_bytes(self) -> bytes:
        return (self.state / "report.json").read_bytes()


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """The shipped cell published, its validate-on Jobs written for two products, and the report of
    the build that made its image."""
    lock = tmp_path / "images.lock.json"
    entry = replace(lock_entry(CELL), repository="ghcr.io/imagekit/pytorch", expect=EXPECT)
    merge_lock(lock, {CELL: entry})
    out = tmp_path / "validate"
    done = run_cli(
        "k8s", "-m", str(REPO / "matrix.yaml"), "--only", CELL, "--lock", str(lock), "--out", str(out),
        "--validate-on", H100, "--validate-on", L40S,
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    plan = out / PLAN_NAME
    jobs = {j.product: j.job for j in parse_plan(plan.read_bytes(), "plan").jobs}
    state = tmp_path / ".imagekit"
    state.mkdir()
    report = BuildReport(
        "matrix.yaml", "2026-12-01T10:00:00+00:00", 1.0, "Docker", (result(CELL, image_id=IMAGE_ID),), ()
    )
    write_report(state, report)
    return Setup(tmp_path, plan, state, jobs)


def edited(fixture: str, change: Any) -> str:
    """A fixture with its document changed by ``change`` (the banner and warnings kept)."""
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    head, brace, body = text.partition("\n{\n")
    document = json.loads(brace.lstrip("\n") + body)
    change(document)
    return f"{head}\n{json.dumps(document, indent=2)}\n"


def test_both_products_are_recorded_per_digest_and_read_back(setup: Setup) -> None:
    done = setup.results(setup.log(H100), setup.log(L40S))
    assert done.exit_code == 0, done.stderr
    assert "recorded 2 runs on prod-east, 0 failed" in done.stderr
    (cell,) = read_report(setup.state).cells  # read back: every field checked, each verdict derived
    assert {(c.cluster, c.product, c.digest, c.verification.verdict) for c in cell.clusters} == {
        ("prod-east", H100, DIGEST, "validated"),
        ("prod-east", L40S, DIGEST, "validated"),
    }
    h100 = next(c for c in cell.clusters if c.product == H100)
    assert h100.job == setup.jobs[H100] and h100.index_digest is None
    run = h100.verification
    assert (
        run.target == CELL
        and run.image == f"ghcr.io/imagekit/pytorch@{DIGEST}"
        and run.image_digest == DIGEST
    )
    assert run.gpu_requested and run.gpu_visible and run.runner == "prod-east"
    assert (
        run.metrics["gemm_perf.device"] == "NVIDIA H100 80GB HBM3"
        and run.metrics["gemm_perf.tflops"] == 612.4
    )
    assert run.gpu_figures[0].power_w is not None and run.gpu_figures[0].power_w.max == 699.1
    assert run.platform is not None and (run.platform.machine, run.platform.host_machine) == (
        "x86_64",
        "x86_64",
    )
    assert run.inventory is not None and run.inventory.python == "3.10.12"
    assert cell.verification is None  # a cluster's run is its own record, never the cell's verify
    (row,) = rows(read_report(setup.state))
    assert f"prod-east: validated on {H100}, {L40S}" in row[2]


def test_a_rerun_replaces_its_record_and_another_cluster_adds_its_own(setup: Setup) -> None:
    assert setup.results(setup.log(H100), setup.log(L40S)).exit_code == 0
    # the L40S Job did not report this time: H100's run is recorded all the same (exit 6 says so)
    assert setup.results(setup.log(H100), cluster="lab").exit_code == ExitCode.INCOMPLETE
    assert setup.results(setup.log(H100)).exit_code == ExitCode.INCOMPLETE
    (cell,) = read_report(setup.state).cells
    assert sorted((c.cluster, c.product) for c in cell.clusters) == [
        ("lab", H100),
        ("prod-east", H100),
        ("prod-east", L40S),
    ]


def fail_gemm(document: dict[str, Any]) -> None:
    gemm = next(c for c in document["checks"] if c["name"] == "gemm_gpu")
    gemm.update(status="fail", cause="GPU matmul disagrees with the float64 reference: GPU 0 bfloat16",
                fix="check the device (ECC errors and row remapping)")  # fmt: skip


def test_a_failed_run_is_recorded_as_failed_and_exits_1(setup: Setup) -> None:
    done = setup.results(setup.log(H100), setup.log(L40S, edited("l40s.log", fail_gemm)))
    assert done.exit_code == 1, done.stderr
    assert "recorded 2 runs on prod-east, 1 failed" in done.stderr
    (cell,) = read_report(setup.state).cells
    verdicts = {c.product: c.verification.verdict for c in cell.clusters}
    assert verdicts == {H100: "validated", L40S: "failed"}
    (row,) = rows(read_report(setup.state))
    assert f"validated on {H100}" in row[2] and f"failed on {L40S}" in row[2]


def test_an_emulated_run_is_never_validated(setup: Setup) -> None:
    def emulated(document: dict[str, Any]) -> None:
        document["platform"] = {"machine": "aarch64", "host_machine": "x86_64", "emulated": True}

    done = setup.results(setup.log(H100, edited("h100-sxm.log", emulated)))
    assert done.exit_code == 1
    (cell,) = read_report(setup.state).cells
    assert cell.clusters[0].verification.verdict == "failed"


def test_an_edited_verdict_in_the_report_is_refused_on_read(setup: Setup) -> None:
    assert setup.results(setup.log(L40S, edited("l40s.log", fail_gemm))).exit_code == 1
    data = json.loads(setup.report_bytes())
    data["cells"][0]["clusters"][0]["verification"]["verdict"] = "validated"
    (setup.state / "report.json").write_text(json.dumps(data))
    done = run_cli("report", "--state-dir", str(setup.state))
    assert done.exit_code == 2
    assert (
        f"clusters: prod-east {L40S}: its verification says 'validated', but its own checks say 'failed'"
        in (done.stderr)
    )


def test_every_bad_file_is_one_line_and_nothing_is_recorded(setup: Setup) -> None:
    before = setup.report_bytes()
    stranger = setup.root / "logs" / "imagekit-validate-someone-else.log"
    stranger.parent.mkdir()
    stranger.write_text("{}")
    fifo = setup.root / "logs" / f"{setup.jobs[L40S]}.log"
    os.mkfifo(fifo)  # opened without waiting for a writer, and refused
    big = setup.root / "logs" / f"{setup.jobs[H100]}.log"
    with big.open("wb") as handle:
        handle.truncate(JOB_OUTPUT_BYTES + 1)
    done = setup.results(stranger, fifo, big)
    assert done.exit_code == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"imagekit: error: {stranger}: 'imagekit-validate-someone-else' is no Job of the plan; name each"
        " file <job>.log",
        f"imagekit: error: {fifo}: is a FIFO, not a regular file; pass {OUTPUT_WHAT}",
        f"imagekit: error: {big}: larger than {JOB_OUTPUT_BYTES} bytes; {OUTPUT_WHAT} is far smaller",
        "imagekit: error: 3 problems; nothing recorded",
    ]
    assert setup.report_bytes() == before


def other_torch(document: dict[str, Any]) -> None:
    document["expected"]["torch"] = "2.4.1"


def no_gpu(document: dict[str, Any]) -> None:
    document["expected"]["require_gpu"] = False


def timestamps(text: str) -> str:
    return "".join(f"2026-12-01T10:00:00.1Z {line}\n" for line in text.splitlines())


BAD_OUTPUTS = {
    "the H100 node's output": (
        (FIXTURES / "h100-sxm.log").read_text,
        "the probe ran on 'NVIDIA H100 80GB HBM3', not on NVIDIA-L40S",
    ),
    "another cell's Job": (lambda: edited("l40s.log", other_torch), "the probe expected torch '2.4.1', "),
    "no GPU required": (lambda: edited("l40s.log", no_gpu), "the probe ran without --require-gpu"),
}


@pytest.mark.parametrize("bad", BAD_OUTPUTS, ids=list(BAD_OUTPUTS))
def test_an_output_that_is_not_its_jobs_is_refused(setup: Setup, bad: str) -> None:
    before = setup.report_bytes()
    make, message = BAD_OUTPUTS[bad]
    path = setup.log(L40S, make())
    done = setup.results(setup.log(H100), path)
    assert done.exit_code == 2, done.stderr
    first, last = done.stderr.splitlines()
    assert first.startswith(f"imagekit: error: {path}: ") and message in first, first
    assert last == "imagekit: error: 1 problem; nothing recorded"
    assert setup.report_bytes() == before  # not even the good output was recorded


def test_a_second_output_of_one_job_is_refused(setup: Setup) -> None:
    first = setup.log(L40S)
    second = setup.root / "again" / first.name
    second.parent.mkdir()
    second.write_text(first.read_text())
    done = setup.results(first, second)
    assert done.exit_code == 2 and f"{second}: a second output of {setup.jobs[L40S]}" in done.stderr


def test_an_output_of_another_image_than_the_reports_is_refused(setup: Setup) -> None:
    rebuilt = BuildReport(
        "matrix.yaml",
        "2026-12-02T10:00:00+00:00",
        1.0,
        "Docker",
        (result(CELL, image_id="sha256:" + "9" * 64),),
        (),
    )
    write_report(setup.state, rebuilt)
    done = setup.results(setup.log(H100))
    assert done.exit_code == 2
    assert (
        f"{CELL} is image sha256:{'9' * 64} in {setup.state / 'report.json'}, the Job ran image {IMAGE_ID}"
        in (done.stderr)
    )
    write_report(setup.state, replace(rebuilt, cells=()))
    done = setup.results(setup.log(H100))
    assert done.exit_code == 2 and f"holds no record of {CELL}" in done.stderr


def test_a_bad_plan_or_cluster_is_one_line(setup: Setup) -> None:
    data = json.loads(setup.plan.read_text())
    data["jobs"][0]["image_id"] = "sha256:nothex"
    setup.plan.write_text(json.dumps(data))
    done = setup.results(setup.log(H100))
    assert done.exit_code == 2 and "jobs[0].image_id" in done.stderr and len(done.stderr.splitlines()) == 1
    done = setup.results(setup.log(H100), cluster="prod east")
    assert done.exit_code == 2 and "--cluster" in done.stderr


def test_the_document_is_found_after_the_banner_and_bounded() -> None:
    text = (FIXTURES / "h100-sxm.log").read_text()
    (document,) = probe_documents(text)
    assert document["schema"] == 2 and len(document["checks"]) == 22
    assert probe_documents(text.replace("\n{\n", "\n {\n", 1)) == []  # not opened on a line of its own
    decoys = "{\n" * MAX_ATTEMPTS  # lines that open no document use up the attempts
    assert probe_documents(decoys + text) == []
    assert probe_documents("{\n" * (MAX_ATTEMPTS - 1) + text) != []
    assert probe_documents("{\n" + "[" * 100_000) == []  # nesting past the parser's depth


def test_a_skipped_rebuild_keeps_the_runs_and_a_new_image_drops_them(setup: Setup) -> None:
    assert setup.results(setup.log(H100), setup.log(L40S)).exit_code == 0
    previous = read_report(setup.state)
    (recorded,) = previous.cells
    same = replace(recorded, status="skipped", clusters=())
    assert previous.cells[0].clusters
    kept = replace(previous, cells=(same,)).keeping_verifications(previous)
    assert kept.cells[0].clusters == recorded.clusters  # the same image: its runs on clusters hold
    rebuilt = replace(recorded, status="built", image_id="sha256:" + "9" * 64, clusters=())
    assert replace(previous, cells=(rebuilt,)).keeping_verifications(previous).cells[0].clusters == ()


def test_the_arch_list_expectation_is_matched_under_the_probes_own_key() -> None:
    # a Job asks cuda-archs (the label's name); the probe's document says cuda_archs (its field)
    job = types.SimpleNamespace(job="imagekit-validate-x", expect={"cuda-archs": "8.0;9.0+PTX"})
    document = {"expected": {"require_gpu": True, "cuda_archs": "8.0;9.0+PTX"}}
    assert _expectations_problem(document, job) is None  # type: ignore[arg-type]
    document["expected"]["cuda_archs"] = "8.0"
    assert "cuda-archs" in str(_expectations_problem(document, job))  # type: ignore[arg-type]


# -- evidence that proves itself (issue 33) ----------------------------------------------------------


@pytest.mark.parametrize("order", ["validated first", "failed first"])
def test_a_log_holding_two_probe_documents_is_refused(setup: Setup, order: str) -> None:
    """Two runs in one file: the first (validated) was taken and the second (failed) ignored."""
    good = (FIXTURES / "h100-sxm.log").read_text(encoding="utf-8")
    bad = edited("h100-sxm.log", fail_gemm)
    text = good + bad if order == "validated first" else bad + good
    before = setup.report_bytes()
    done = setup.results(setup.log(H100, text))
    assert done.exit_code == 2, done.stderr
    line, last = done.stderr.splitlines()
    assert "2 probe documents in it" in line and setup.jobs[H100] in line
    assert last == "imagekit: error: 1 problem; nothing recorded"
    assert setup.report_bytes() == before  # nothing recorded, never validated


def test_a_plan_entry_whose_digest_is_not_its_jobs_is_refused(setup: Setup) -> None:
    """The Job's name carries the digest it was made for; an entry edited to another digest
    credited that image with the Job's run (before: recorded as validated on it)."""
    other = "sha256:" + "cd" * 32
    data = json.loads(setup.plan.read_text())
    entry = next(j for j in data["jobs"] if j["product"] == H100)
    entry["digest"] = other
    entry["image"] = entry["image"].replace(DIGEST, other)
    setup.plan.write_text(json.dumps(data))
    done = setup.results(setup.log(H100))
    assert done.exit_code == 2, done.stderr
    (line,) = done.stderr.splitlines()  # the plan is refused whole, before any output is read
    assert setup.jobs[H100] in line and other in line and "carries another digest" in line
    entry["digest"] = DIGEST  # the digest put back, the image left pulling another
    setup.plan.write_text(json.dumps(data))
    done = setup.results(setup.log(H100))
    assert done.exit_code == 2 and f"is not its digest {DIGEST}" in done.stderr, done.stderr


# -- Jobs that did not report: named with why, the others recorded ----------------------------------


def job_object(name: str, *conditions: tuple[str, str], active: int = 0) -> dict[str, Any]:
    """A Job as the API server lists it: its conditions (type, reason) True."""
    listed = [{"type": kind, "status": "True", "reason": reason, "message": f"{reason} happened"}
              for kind, reason in conditions]  # fmt: skip
    return {"kind": "Job", "metadata": {"name": name}, "status": {"active": active, "conditions": listed}}


def pod_object(job: str, created: str, phase: str, **status: Any) -> dict[str, Any]:
    labels = {"job": job, "batch.kubernetes.io/job-name": job}
    metadata = {"name": f"{job}-{created[-2:]}", "labels": labels, "creationTimestamp": created}
    return {"kind": "Pod", "metadata": metadata, "status": {"phase": phase, **status}}


SCHEDULER_SAYS = "0/12 nodes are available: 12 Insufficient nvidia.com/gpu."
OOM_KILLED = {"name": "check", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
EVICTED = {
    "conditions": [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    ],
    "containerStatuses": [{"name": "check", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}],
}
UNSCHEDULABLE = {
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.",
        }
    ],
}


def test_an_evicted_job_is_named_and_every_job_that_reported_is_recorded(setup: Setup) -> None:
    """One eviction no longer blocks the round: H100's run is recorded, L40S's Job is named as
    evicted with its replacement's state, exit 6 (some Jobs did not report)."""
    l40s = setup.jobs[L40S]
    status = [
        job_object(setup.jobs[H100], ("Complete", "CompletionsReached")),
        job_object(l40s, active=1),
        pod_object(l40s, "2026-12-01T10:00:01Z", "Failed", **EVICTED),
        pod_object(l40s, "2026-12-01T10:05:02Z", "Pending", **UNSCHEDULABLE),
    ]
    empty = setup.log(L40S, "")  # `kubectl logs` of the evicted pod printed nothing
    done = setup.results(setup.log(H100), empty, status=status)
    assert done.exit_code == ExitCode.INCOMPLETE, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"imagekit: not reported: {l40s}: evicted: EvictionByEvictionAPI: Eviction API: evicting; replaced;"
        " its last pod: Pending, Unschedulable: 0/12 nodes are available: 12 Insufficient nvidia.com/gpu."
    )
    assert "recorded 1 run on prod-east, 0 failed, 1 not reported" in done.stderr
    (cell,) = read_report(setup.state).cells
    assert [(c.product, c.verification.verdict) for c in cell.clusters] == [(H100, "validated")]


@pytest.mark.parametrize(
    ("objects", "line"),
    [
        (
            lambda job: [job_object(job, ("Failed", "DeadlineExceeded")),
                         pod_object(job, "2026-12-01T10:00:01Z", "Pending", **UNSCHEDULABLE)],
            "deadline: activeDeadlineSeconds passed; its last pod: Pending, Unschedulable: 0/12 nodes",
        ),
        (
            lambda job: [job_object(job, ("Failed", "BackoffLimitExceeded")),
                         pod_object(job, "2026-12-01T10:00:01Z", "Failed", containerStatuses=[
                             OOM_KILLED])],
            "failed: failed without a probe document (BackoffLimitExceeded: BackoffLimitExceeded happened);"
            " its last pod: Failed, exit 137, OOMKilled",
        ),
        (lambda job: [], "not-found: no Job {job} in {status}: never applied, or removed since"),
        (
            lambda job: [job_object(job, ("Suspended", "JobSuspended"))],
            "pending: suspended: a queue holds it until it admits the Job",
        ),
        (
            lambda job: [job_object(job, active=1), pod_object(job, "2026-12-01T10:00:01Z", "Running")],
            "running: Running",
        ),
        (
            lambda job: [job_object(job, ("Complete", "CompletionsReached"))],
            "no-output: the Job completed, but no output of it given: collect its output again",
        ),
    ],
    ids=["deadline", "failed", "not-found", "suspended", "running", "completed"],
)  # fmt: skip
def test_why_a_job_did_not_report_is_said_from_its_status(setup: Setup, objects: Any, line: str) -> None:
    l40s = setup.jobs[L40S]
    done = setup.results(setup.log(H100), status=[job_object(setup.jobs[H100]), *objects(l40s)])
    assert done.exit_code == ExitCode.INCOMPLETE, done.stderr
    expected = line.format(job=l40s, status=setup.root / "status.json")
    assert done.stderr.splitlines()[0].startswith(f"imagekit: not reported: {l40s}: {expected}"), done.stderr


def test_no_job_reporting_is_exit_3_and_records_nothing(setup: Setup) -> None:
    before = setup.report_bytes()
    timestamped = setup.log(L40S, timestamps((FIXTURES / "l40s.log").read_text()))
    done = setup.results(timestamped)
    assert done.exit_code == ExitCode.ENVIRONMENT, done.stderr
    assert done.stderr.splitlines() == [
        f"imagekit: not reported: {setup.jobs[H100]}: no-output: no output of it given; --status FILE says"
        " why",
        f"imagekit: not reported: {setup.jobs[L40S]}: no-output: {timestamped}: no probe document in it (the"
        " JSON object check.py prints; not `kubectl logs --timestamps`); --status FILE says why",
        f"imagekit: error: none of the 2 Jobs of {setup.plan} reported; nothing recorded",
    ]
    assert setup.report_bytes() == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('"text"', "not a list of Kubernetes objects"),
        ('{"items": [1]}', "not a list of Kubernetes objects"),
        ('{"items": [{"kind": "Service"}]}', "no Job and no pod of a Job in it"),
        ("[" * 100_000, "not JSON"),
        # a key given twice: which one kubectl meant is unknown (json.loads took the last)
        ('{"items": [], "items": [{"kind": "Job", "metadata": {"name": "j"}}]}', "not JSON"),
    ],
)
def test_a_bad_status_file_is_one_line_and_exit_2(setup: Setup, text: str, message: str) -> None:
    before = setup.report_bytes()
    status = setup.root / "status.json"
    status.write_text(text)
    done = run_cli(
        "k8s-results", "--cluster", "prod-east", "--plan", str(setup.plan), "--state-dir", str(setup.state),
        "--status", str(status), str(setup.log(H100)),
    )  # fmt: skip
    assert done.exit_code == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"imagekit: error: {status}: {message}"), line
    assert setup.report_bytes() == before
