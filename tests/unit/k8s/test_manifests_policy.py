"""The manifests `imagekit k8s` writes for the shipped matrices, checked by Kubernetes' schema
(kubernetes-validate, strict) and by an independent policy scanner (checkov's Kubernetes checks).

checkov is not a dev extra: resolved beside the project's dev dependencies it pins packaging to
23.x (which holds pytest back) and brings some 60 packages (boto3, aiohttp, ...). It runs from its
own virtual environment (``scripts/test.sh`` makes it under ~/.cache/imagekit/checkov-venv), found
through IMAGEKIT_CHECKOV (the executable), else ``checkov`` on PATH, else /tmp/checkov-venv.
Without it the scanner test fails saying so: it never skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.k8s.manifests import render_jobs
from imagekit.k8s.options import Claim, JobOptions, Toleration
from imagekit.k8s.validate_on import PLAN_NAME, parse_products, render_validation
from imagekit.plan.cells import frontend_of
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock, LockEntry
from tests.conftest import REPO
from tests.unit.report_samples import lock_entry

MATRICES = ("matrix.yaml", "examples/offline/matrix.yaml")  # Jobs; the offline one has front ends

# checkov findings that do not apply, each with the reason; README.md's Kubernetes section lists
# the same ids (a test below keeps the two in step).
ACCEPTED = {
    "CKV2_K8S_6": "NetworkPolicy: which traffic a namespace allows is the cluster's policy (ingress"
    " controllers, DNS, dataset and model mirrors); a front end is reached through a ClusterIP"
    " Service and kubectl port-forward",
}
# ... and the CPU limit, none by default: a CFS quota throttles NCCL's proxy threads and the
# DataLoader workers; the request (always written, imagekit.k8s.resources) is what scheduling needs
UNSIZED = {"CKV_K8S_11": "CPU limits: --cpu-limit"}
# ... and, with --uid-mode scc, the uid no manifest names: OpenShift's restricted-v2 assigns one of
# the namespace's range (1000000000 and up), and refuses a pod that names another
OPENSHIFT = {"CKV_K8S_40": "a high uid: --uid-mode scc leaves it to the SecurityContextConstraints"}
# and the default namespace, which --namespace (or `kubectl apply -n`) replaces
NAMESPACED = {"CKV_K8S_21": "the default namespace: --namespace"}


def _manifests(options: JobOptions) -> dict[str, str]:
    files: dict[str, str] = {}
    for matrix in MATRICES:
        plan = load_plan(REPO / matrix)
        repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
        # --uid-mode scc refuses the ssh front end (its sshd logs in only the image's own user)
        cells = [c for c in plan.cells if options.uid_mode == "fixed" or frontend_of(c) != "ssh"]
        entries: dict[str, LockEntry] = {
            c.id: replace(
                lock_entry(c.id, frontend=frontend_of(c)), repository=repository, platform=c.platform
            )
            for c in cells
        }
        files.update(render_jobs(Lock(entries), options, {c.id: frontend_of(c) for c in cells}))
    return files


OPTIONS = {
    "defaults": JobOptions(namespace="ml"),
    "a node pool": JobOptions(
        gpus=8,
        namespace="ml",
        runtime_class="nvidia",
        tolerations=(Toleration.parse("gpu"),),
        claims=(Claim.parse("ckpt:/checkpoints"),),
        cpu="32",
        cpu_limit="32",
        memory="512Gi",
        memory_limit="640Gi",
    ),
    "a MIG slice": JobOptions(gpus=1, gpu_resource="nvidia.com/mig-1g.10gb"),
    # GPUs claimed through DRA: a ResourceClaimTemplate beside each workload, no GPU limit
    "DRA claims": JobOptions(gpus=2, gpu_request="dra", namespace="ml"),
    # OpenShift: the uid and fsGroup left to the SecurityContextConstraints
    "OpenShift": JobOptions(namespace="ml", uid_mode="scc", tolerations=(Toleration.parse("gpu"),)),
    # Kueue: each Job labelled for a LocalQueue and written suspended
    "a Kueue queue": JobOptions(
        gpus=8, namespace="ml", queue="team-a", tolerations=(Toleration.parse("gpu"),)
    ),
}


def _kinds(files: dict[str, str]) -> set[str]:
    return {m["kind"] for text in files.values() for m in yaml.safe_load_all(text)}


def checkov() -> str:
    found = (
        os.environ.get("IMAGEKIT_CHECKOV")
        or shutil.which("checkov")
        or next((p for p in ("/tmp/checkov-venv/bin/checkov",) if Path(p).is_file()), None)
    )
    if not found:
        pytest.fail(
            "checkov is not installed: python3 -m venv /tmp/checkov-venv &&"
            " /tmp/checkov-venv/bin/pip install checkov (or set IMAGEKIT_CHECKOV to its executable)"
        )
    return found


def _findings(directory: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE"}  # no call home for its guideline links
    done = subprocess.run(  # a fixed argument list
        [
            checkov(),
            "-d",
            str(directory),
            "--framework",
            "kubernetes",
            "-o",
            "json",
            "--quiet",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    reports = json.loads(done.stdout)
    failed: list[dict[str, Any]] = []
    for report in reports if isinstance(reports, list) else [reports]:
        failed += report.get("results", {}).get("failed_checks", [])
    return failed


def _validate_on(options: JobOptions) -> dict[str, str]:
    """The validate-on Jobs for the shipped matrix on an x86 and a Grace product (the plan left out)."""
    plan = load_plan(REPO / "matrix.yaml")
    repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
    entries = {
        c.id: replace(lock_entry(c.id), repository=repository, platform=c.platform) for c in plan.cells
    }
    products = parse_products(["NVIDIA-H100-80GB-HBM3", "NVIDIA-GH200-480GB"])
    files = render_validation(Lock(entries), options, products).files
    return {name: text for name, text in files.items() if name != PLAN_NAME}


def _compute_domains(options: JobOptions) -> dict[str, str]:
    """The --compute-domain files (ComputeDomain, Service, Job) of the shipped matrix's rack cells."""
    from imagekit.k8s.compute_domain import ComputeDomainOptions, render_domains
    from tests.unit.k8s.test_compute_domain import shipped_lock

    return render_domains(shipped_lock(), options, ComputeDomainOptions(4)).files


def test_the_readme_lists_every_accepted_finding_and_no_other() -> None:
    """README's table of what checkov still reports names exactly these checks: one no longer
    found (CKV_K8S_40 since the uid is 10001) leaves the table too."""
    rows = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `CKV")]
    in_readme = {check for row in rows for check in re.findall(r"`(CKV2?_K8S_[0-9]+)`", row.split(" | ")[0])}
    listed = {**ACCEPTED, **UNSIZED, **NAMESPACED, **OPENSHIFT}
    assert in_readme == set(listed), (sorted(in_readme - set(listed)), sorted(set(listed) - in_readme))
