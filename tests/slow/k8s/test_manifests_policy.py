"""tests/unit/k8s/test_manifests_policy.py's slow tests: checkov (in a venv of its own, installed by
scripts/test.sh) and kubernetes-validate's strict schemas on every shipped matrix's manifests, ~10 s
of CPU a scan."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from imagekit.k8s.manifests import write_jobs
from imagekit.k8s.options import JobOptions, Toleration
from tests.unit.k8s.test_manifests_policy import (
    ACCEPTED,
    NAMESPACED,
    OPENSHIFT,
    OPTIONS,
    UNSIZED,
    _compute_domains,
    _findings,
    _kinds,
    _manifests,
    _validate_on,
)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_shipped_matrices_manifests_are_strictly_valid(options: JobOptions) -> None:
    files = _manifests(options)
    assert {"Job", "Deployment", "Service", "PersistentVolumeClaim"} <= _kinds(files)
    for text in files.values():
        for manifest in yaml.safe_load_all(text):
            kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_policy_scanner_finds_only_what_the_readme_explains(options: JobOptions, tmp_path: Path) -> None:
    write_jobs(_manifests(options), tmp_path)
    accepted = {
        **ACCEPTED,
        **(UNSIZED if options.cpu_limit is None else {}),
        **(OPENSHIFT if options.uid_mode == "scc" else {}),
        **(NAMESPACED if options.namespace is None else {}),
    }
    found = {f"{f['check_id']} {f['resource']}" for f in _findings(tmp_path) if f["check_id"] not in accepted}
    assert not found, "\n".join(sorted(found))


def test_validate_on_jobs_are_strictly_valid_and_pass_the_policy_scanner(tmp_path: Path) -> None:
    options = JobOptions(
        namespace="ml", cpu="8", cpu_limit="8", memory="64Gi", tolerations=(Toleration.parse("gpu"),)
    )
    files = _validate_on(options)
    assert _kinds(files) == {"Job"}
    for text in files.values():
        kubernetes_validate.validate(yaml.safe_load(text), kubernetes_validate.latest_version(), strict=True)
    write_jobs(files, tmp_path)
    found = {f"{f['check_id']} {f['resource']}" for f in _findings(tmp_path) if f["check_id"] not in ACCEPTED}
    assert not found, "\n".join(sorted(found))


def test_compute_domain_jobs_are_strictly_valid_and_pass_the_policy_scanner(tmp_path: Path) -> None:
    options = JobOptions(
        gpus=4,
        namespace="ml",
        cpu="16",
        cpu_limit="16",
        memory="256Gi",
        tolerations=(Toleration.parse("gpu"),),
        queue="team-a",  # the Job suspended, its pod template carrying Kueue's topology annotation
    )
    files = _compute_domains(options)
    assert _kinds(files) == {"ComputeDomain", "Service", "Job"}
    for text in files.values():
        for manifest in yaml.safe_load_all(text):
            if manifest["kind"] != "ComputeDomain":  # a CRD's: tests/unit/k8s/test_compute_domain.py
                kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    write_jobs(files, tmp_path)
    findings = _findings(tmp_path)
    found = {f"{f['check_id']} {f['resource']}" for f in findings if f["check_id"] not in ACCEPTED}
    assert not found, "\n".join(sorted(found))
    assert {f["check_id"] for f in findings} == {"CKV2_K8S_6"}  # the scanner saw the Jobs (uid 10001)
