"""Validate-on Jobs' outputs read back into the report: "validated on NVIDIA-H100-80GB-HBM3 and
NVIDIA-L40S in cluster prod-east", per cell and per manifest digest.

``imagekit k8s-results --cluster NAME LOG...`` takes each Job's output as ``kubectl logs`` printed
it, in a file named after the Job (``<job>.log``), and the plan ``imagekit k8s --validate-on``
wrote beside the Jobs. Every file is untrusted (a cluster's pod printed it, a person may have
edited it): each is read up to a bound, and each problem is one line naming the file. The report
is written once, after every file has been read and found to be what its Job printed; with any
problem nothing is written.

Not every Job reports: a Job whose file holds no probe document (or that has no file) is no
problem but a Job that did not report, named with why (``imagekit.k8s.job_status``, from the
Jobs' and pods' status where ``--status`` gives it: evicted, pending, deadline, failed without
output); the Jobs that did report are recorded all the same.

What makes an output a Job's own: its file is named after a Job of the plan; it holds the probe's
document (its first line a lone ``{``, as the probe prints it); the probe was asked for what the
Job asked (the cell's expectations, the GPU required); and every GPU it names is the product the
Job was pinned to. The record's verdict is ``derive_verdict``'s, here and on every later read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.core.clock import timestamp
from imagekit.core.errors import InputError
from imagekit.core.limits import JOB_OUTPUT_BYTES, SHORT_CHARS, STATE_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import validate_json
from imagekit.core.text import printable, redact, shown
from imagekit.k8s.job_status import JobState, why_missing
from imagekit.k8s.validate_on import PlannedJob, label_form, parse_plan, product_base
from imagekit.probe import protocol
from imagekit.report.store import BuildReport
from imagekit.report.verification import (
    CheckRecord,
    ClusterName,
    ClusterValidation,
    Inventory,
    RunPlatform,
    Verification,
    clipped,
    gemm_figures,
    json_or_text,
)
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import verdict_of

MAX_ATTEMPTS = 16  # lines that open a document tried before the output is refused: bounded work
OUTPUT_WHAT = "a validate-on Job's output (`kubectl logs job/NAME > NAME.log`)"


@dataclass(frozen=True)
class Recorded:
    job: PlannedJob
    record: ClusterValidation


def cluster_name(text: str) -> str:
    """``--cluster`` as a report holds it (letters, digits, '.', '_', '-')."""
    return validate_json(ClusterName, json.dumps(text), "--cluster", "name it like prod-east")


def read_plan(path: Path) -> dict[str, PlannedJob]:
    """The plan beside the Jobs, by Job name."""
    try:
        raw = read_regular_file(path, STATE_BYTES, "the validate-on.plan `imagekit k8s --validate-on` wrote")
    except FileNotFoundError:
        raise InputError(f"--plan {path}: no such file; `imagekit k8s --validate-on` writes it") from None
    return parse_plan(raw, str(path)).by_job()


def lines(recorded: Sequence[Recorded]) -> list[str]:
    """One line per run recorded: cell, product, verdict, digest."""
    return [
        f"{i.job.cell:<55} {i.record.product:<24} {i.record.verification.verdict:<10} {i.record.digest[:19]}"
        for i in recorded
    ]


def job_of(path: Path) -> str:
    """The Job a file holds the output of: its name up to the first dot (``<job>.log``)."""
    return path.name.split(".", 1)[0]


def probe_documents(text: str) -> list[dict[str, Any]]:
    """Every probe document in a Job's output: each object that opens on a line of its own (the
    probe prints it indented, after the entrypoint's banner and the libraries' warnings) and holds
    ``checks``. Lines that open something else are passed over, a bounded number of them."""
    found: list[dict[str, Any]] = []
    offset = 0
    end = 0  # where the last document found ends: a line inside it opens nothing
    attempts = 0
    decoder = json.JSONDecoder()
    for line in text.splitlines(keepends=True):
        if offset >= end and line.rstrip("\r\n") == "{" and attempts < MAX_ATTEMPTS:
            attempts += 1
            try:
                value, stop = decoder.raw_decode(text, offset)
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict) and isinstance(value.get("checks"), list):
                found.append(value)
                end = stop
        offset += len(line)
    return found


def _expectations_problem(document: Mapping[str, Any], job: PlannedJob) -> str | None:
    """Why the probe was not asked what this Job asks (another Job's output, or an edited one)."""
    found = document.get("expected")
    expected: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    if expected.get("require_gpu") is not True:
        return "the probe ran without --require-gpu: not a validate-on Job's output"
    for name, value in sorted(job.expect.items()):
        # the document's keys are the probe's Expect fields: the cuda-archs label is cuda_archs there
        found_value = expected.get(name.replace("-", "_"))
        if str(found_value).lower() != value.lower():
            return (
                f"the probe expected {name} {shown(str(found_value)[:40])}, {job.job} asks"
                f" for {value}: the output of another Job?"
            )
    return None


def device_names(checks: Sequence[CheckRecord]) -> list[str]:
    """The GPUs a run names: nvidia-smi's list and torch's devices (the ``actual`` of the
    nvidia_smi and cuda_available checks), whatever their checks' status."""
    names: list[str] = []
    for check in checks:
        found = (
            json_or_text(check.actual)
            if check.name in (protocol.NVIDIA_SMI, protocol.CUDA_AVAILABLE)
            else None
        )
        listed = found.get("gpus", found.get("devices")) if isinstance(found, Mapping) else None
        for item in listed if isinstance(listed, list) else ():
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                names.append(item["name"])
    return names


def _product_problem(checks: Sequence[CheckRecord], job: PlannedJob) -> str | None:
    wanted = product_base(job.product)
    for name in device_names(checks):
        if product_base(label_form(name)) != wanted:
            return (
                f"the probe ran on {shown(name[:80])}, not on {job.product} ({job.job} is pinned to"
                " it): the output of another Job, or a node whose label is wrong?"
            )
    return None


def _verification(document: Mapping[str, Any], job: PlannedJob, cluster: str, path: Path) -> Verification:
    """The run as a verification record: the verdict by the one rule; where it ran from the probe's
    word and the machine of the node the Job was pinned to."""
    found = document.get("platform")
    where: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    machine = where.get("machine")
    platform = RunPlatform(
        machine=clipped(redact(machine), SHORT_CHARS) if isinstance(machine, str) and machine else None,
        host_machine=job.host_machine,
        emulated=where.get("emulated") is True,
    )
    request = GpuRequest(str(job.gpus), job.gpus)
    verdict, checks, gpu_visible = verdict_of(document, request, platform.is_emulated)
    metrics, figures = gemm_figures(checks, platform.is_emulated)
    return Verification(
        target=job.cell,
        image=job.image,
        gpus=request.text,
        verdict=verdict,
        gpu_requested=True,
        gpu_visible=gpu_visible,
        checks=checks,
        duration_s=round(sum(c.duration_s for c in checks), 3),
        log=printable(str(path))[:SHORT_CHARS],
        metrics=metrics,
        gpu_figures=figures,
        image_digest=job.digest,
        inventory=Inventory.from_script(document.get("inventory")),
        runner=cluster,
        platform=platform,
    )


NO_DOCUMENT = "no probe document in it (the JSON object check.py prints; not `kubectl logs --timestamps`)"


def read_output(path: Path, job: PlannedJob, cluster: str, now: str) -> ClusterValidation | None:
    """One Job's output as its record; None where it holds no probe document (the Job did not
    report: ``imagekit.k8s.job_status`` says why); an InputError naming the file for any problem."""
    raw = read_regular_file(path, JOB_OUTPUT_BYTES, OUTPUT_WHAT)
    documents = probe_documents(raw.decode("utf-8", errors="replace"))
    if len(documents) > 1:
        # one pod prints one document: two are two runs (a retried pod's logs, or files joined),
        # and taking either would let a passing run hide a failing one
        raise InputError(
            f"{path}: {len(documents)} probe documents in it, one run each; a Job's output holds one"
            f" (`kubectl logs job/{job.job}` of its last pod): give that run's output alone"
        )
    if not documents:
        return None
    document = documents[0]
    problem = _expectations_problem(document, job)
    verification = _verification(document, job, cluster, path)
    problem = problem or _product_problem(verification.checks, job)
    if problem:
        raise InputError(f"{path}: {problem}")
    record = ClusterValidation(cluster, job.product, job.digest, job.job, now, verification, job.index_digest)
    # read back as the report's reader will: a record it would refuse is refused here instead
    return validate_json(ClusterValidation, json.dumps(record.as_json()), str(path), "record it again")


@dataclass
class Outputs:
    """What the files given held: a record per Job that reported, one line per problem, and for each
    Job whose file held no probe document, what it held instead."""

    recorded: list[Recorded] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    empty: dict[str, str] = field(default_factory=dict)  # Job -> what its file held


def read_outputs(jobs: Mapping[str, PlannedJob], paths: Sequence[Path], cluster: str) -> Outputs:
    """Every file read, whatever the others hold."""
    now = timestamp()
    found = Outputs()
    recorded, problems = found.recorded, found.problems
    seen: dict[str, Path] = {}
    for path in paths:
        name = job_of(path)
        job = jobs.get(name)
        if job is None:
            problems.append(f"{path}: {shown(name)} is no Job of the plan; name each file <job>.log")
            continue
        if name in seen:
            problems.append(f"{path}: a second output of {name} (the first: {seen[name]}); give one")
            continue
        seen[name] = path
        try:
            record = read_output(path, job, cluster, now)
        except FileNotFoundError:
            problems.append(f"{path}: no such file")
        except InputError as exc:
            problems.append(exc.message)
        else:
            if record is None:
                found.empty[name] = f"{path}: {NO_DOCUMENT}"
            else:
                recorded.append(Recorded(job, record))
    return found


def unreported(
    jobs: Mapping[str, PlannedJob], found: Outputs, status: Mapping[str, JobState] | None, source: str
) -> list[tuple[str, str, str]]:
    """(Job, kind, detail) for each Job of the plan that left no record, in the plan's order."""
    reported = {r.job.job for r in found.recorded}
    return [
        (name, *why_missing(name, status, source, found.empty.get(name, "no output of it given")))
        for name in jobs
        if name not in reported
    ]


def into_report(
    report: BuildReport, recorded: Sequence[Recorded], report_path: Path
) -> tuple[BuildReport, list[str]]:
    """``report`` with each record on its cell; one line per record whose cell the report does not
    hold as the image the Job ran (never built here, or built again since: another image)."""
    by_id = {r.id: r for r in report.cells}
    records: dict[str, list[ClusterValidation]] = {}
    problems: list[str] = []
    for item in recorded:
        job = item.job
        cell = by_id.get(job.cell)
        if cell is None:
            problems.append(
                f"{job.job}: {report_path} holds no record of {job.cell}; record the output where the"
                " cell was built (or `imagekit merge-reports` first)"
            )
        elif cell.image_id != job.image_id:
            problems.append(
                f"{job.job}: {job.cell} is image {cell.image_id} in {report_path}, the Job ran image"
                f" {job.image_id}: the cell was built again since; write the Jobs again and run them"
            )
        else:
            records.setdefault(job.cell, []).append(item.record)
    for cell_id, found in records.items():
        report = report.with_cluster_validations(cell_id, tuple(found))
    return report, problems
