"""`imagekit k8s --queue NAME`: every Job labelled for a Kueue LocalQueue and written suspended; a
compute-domain Job's pods admitted as one gang in one NVLink clique (Kueue's topology-aware
scheduling), each object strictly valid for Kubernetes 1.34 to 1.37."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.k8s.compute_domain import CLIQUE_LABEL, ComputeDomainOptions, render_domains
from imagekit.k8s.domain_validation import render_domain_validation
from imagekit.k8s.kueue import QUEUE_LABEL, REQUIRED_TOPOLOGY, parse_queue
from imagekit.k8s.manifests import render_jobs
from imagekit.k8s.options import JobOptions
from imagekit.k8s.validate_on import PLAN_NAME, parse_products, render_validation
from imagekit.plan.cells import frontend_of
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_compute_domain import FIT, KUBERNETES, _lock_file, shipped_lock
from tests.unit.report_samples import lock_entry

QUEUED = JobOptions(gpus=4, namespace="ml", queue="team-a")
QUEUED_DRA = replace(QUEUED, gpu_request="dra")


def _documents(files: dict[str, str]) -> list[dict[str, Any]]:
    return [d for name, text in sorted(files.items()) if name != PLAN_NAME for d in yaml.safe_load_all(text)]


def _workloads(options: JobOptions) -> list[dict[str, Any]]:
    plan = load_plan(REPO / "matrix.yaml")
    repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
    entries = {
        c.id: replace(lock_entry(c.id, frontend=frontend_of(c)), repository=repository, platform=c.platform)
        for c in plan.cells
    }
    return _documents(render_jobs(Lock(entries), options, {c.id: frontend_of(c) for c in plan.cells}))


def _every_job_path(options: JobOptions) -> dict[str, list[dict[str, Any]]]:
    """The documents of each path that writes Jobs: the workloads, validate-on, compute domains and
    their validate-on form, with ``options``."""
    dra = options.gpu_request == "dra"
    products = parse_products(
        ["NVIDIA H100 80GB HBM3", "NVIDIA GB200"] if dra else ["NVIDIA-H100-80GB-HBM3", "NVIDIA-GB200"], dra
    )
    domain = ComputeDomainOptions(4)
    return {
        "workloads": _workloads(options),
        "validate-on": _documents(render_validation(shipped_lock(), options, products).files),
        "compute-domain": _documents(render_domains(shipped_lock(), options, domain).files),
        "compute-domain validate-on": _documents(
            render_domain_validation(shipped_lock(), options, products, domain).files
        ),
    }


@pytest.mark.parametrize("options", [QUEUED, QUEUED_DRA], ids=["device-plugin", "dra"])
def test_every_job_is_queued_suspended_and_strictly_valid(options: JobOptions) -> None:
    for path, documents in _every_job_path(options).items():
        jobs = [d for d in documents if d["kind"] == "Job"]
        assert jobs, path
        for job in jobs:
            assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a", path
            assert job["spec"]["suspend"] is True, path
        # the fields --queue adds are the same in every Job of a path: one Job of each, every version
        for version in KUBERNETES:
            kubernetes_validate.validate(jobs[0], version, strict=True)
        # only the Jobs: Kueue's Job integration reads the label there; a Service, a
        # ComputeDomain or a claim template labelled for a queue would only mislead
        for other in documents:
            if other["kind"] != "Job":
                assert QUEUE_LABEL not in other["metadata"].get("labels", {}), (path, other["kind"])


def test_a_compute_domain_job_is_one_gang_in_one_clique() -> None:
    for path, documents in _every_job_path(QUEUED).items():
        for job in (d for d in documents if d["kind"] == "Job"):
            template = job["spec"]["template"]
            annotations = template["metadata"].get("annotations", {})
            if path.startswith("compute-domain"):
                assert annotations[REQUIRED_TOPOLOGY] == CLIQUE_LABEL == "nvidia.com/gpu.clique"
                # kept: the pods Kueue gates onto the clique meet it; without Kueue it is the
                # only thing keeping the pods in one clique
                (affinity,) = template["spec"]["affinity"]["podAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]
                assert affinity["topologyKey"] == CLIQUE_LABEL
            else:
                assert REQUIRED_TOPOLOGY not in annotations, path


def test_without_a_queue_nothing_changes() -> None:
    for path, documents in _every_job_path(replace(QUEUED, queue=None)).items():
        for document in documents:
            assert QUEUE_LABEL not in document["metadata"].get("labels", {}), path
            if document["kind"] == "Job":
                assert "suspend" not in document["spec"], path
                assert REQUIRED_TOPOLOGY not in document["spec"]["template"]["metadata"].get(
                    "annotations", {}
                )


@pytest.mark.parametrize("name", ["team-a", "a", "gpu.team-a", "0", "a" * 63])
def test_a_local_queue_name_is_taken(name: str) -> None:
    assert parse_queue(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Team-A", "team_a", "-team", "team-", "team..a", ".team", "team a", "a" * 64, "team/a", "tëam"],
)
def test_a_bad_queue_name_is_refused(name: str) -> None:
    with pytest.raises(InputError, match=r"--queue .*: name a LocalQueue"):
        parse_queue(name)


@pytest.mark.parametrize("name", ["Team_A", "a" * 64, "team\nb"])
def test_the_command_refuses_a_bad_queue_in_one_line_writing_nothing(tmp_path: Path, name: str) -> None:
    out = tmp_path / "k8s"
    lock = _lock_file(tmp_path)
    result = run_cli(
        "k8s", "--matrix", str(REPO / "matrix.yaml"), "--lock", str(lock), "--out", str(out), "--queue", name
    )
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "--queue" in line and "name a LocalQueue" in line
    assert not out.exists()


def _domain_command(tmp_path: Path, *flags: str) -> tuple[str, list[dict[str, Any]]]:
    out = tmp_path / "k8s"
    lock = _lock_file(tmp_path)
    result = run_cli(
        "k8s",
        "--matrix",
        str(REPO / "matrix.yaml"),
        "--lock",
        str(lock),
        "--out",
        str(out),
        *("--only", FIT, "--compute-domain", "2", "--gpus", "4", *flags),
    )
    assert result.exit_code == 0, result.stderr
    return result.stderr, [d for p in sorted(out.iterdir()) for d in yaml.safe_load_all(p.read_text())]


def test_the_command_queues_compute_domain_jobs_and_says_why_without_a_queue(tmp_path: Path) -> None:
    stderr, documents = _domain_command(tmp_path / "queued", "--queue", "team-a")
    (job,) = [d for d in documents if d["kind"] == "Job"]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a" and job["spec"]["suspend"] is True
    assert job["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] == CLIQUE_LABEL
    assert "--queue" not in stderr
    stderr, documents = _domain_command(tmp_path / "unqueued")
    (job,) = [d for d in documents if d["kind"] == "Job"]
    assert QUEUE_LABEL not in job["metadata"]["labels"] and "suspend" not in job["spec"]
    (note,) = [line for line in stderr.splitlines() if "--queue" in line]
    assert note.startswith("imagekit: note: ") and "part of the gang" in note
