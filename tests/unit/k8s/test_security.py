"""`--uid-mode scc` (OpenShift): no runAsUser, runAsGroup or fsGroup anywhere, so that the
restricted-v2 SecurityContextConstraints assign them from the namespace's range; the rest of Pod
Security's 'restricted' profile kept in every pod and container (imagekit.k8s.security)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.k8s.compute_domain import ComputeDomainOptions, render_domains
from imagekit.k8s.options import JobOptions
from imagekit.k8s.prepull import render_prepull
from imagekit.k8s.security import parse_uid_mode
from imagekit.k8s.validate_on import PLAN_NAME, parse_products, render_validation
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_compute_domain import shipped_lock
from tests.unit.k8s.test_manifests import render
from tests.unit.report_samples import lock_entry as entry

KUBERNETES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
ASSIGNED = {"runAsUser", "runAsGroup", "fsGroup"}  # what restricted-v2 assigns from the namespace


def pods(files: dict[str, str]) -> list[dict[str, Any]]:
    """Every pod spec of every workload in ``files``."""
    found = []
    for name, text in files.items():
        if name == PLAN_NAME:
            continue
        for document in yaml.safe_load_all(text):
            if document["kind"] in ("Job", "Deployment", "DaemonSet"):
                found.append(document["spec"]["template"]["spec"])
    return found


def restricted(pod: dict[str, Any]) -> list[str]:
    """What Pod Security's 'restricted' level (Kubernetes 1.34+) refuses in ``pod``: non-root,
    RuntimeDefault seccomp, every capability dropped, no privilege escalation."""
    wrong = []
    context = pod.get("securityContext", {})
    for container in [*pod["containers"], *pod.get("initContainers", [])]:
        own = container.get("securityContext", {})
        if own.get("runAsNonRoot", context.get("runAsNonRoot")) is not True:
            wrong.append(f"{container['name']}: runAsNonRoot")
        if own.get("runAsUser", context.get("runAsUser")) == 0:
            wrong.append(f"{container['name']}: runAsUser 0")
        seccomp = own.get("seccompProfile", context.get("seccompProfile", {}))
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            wrong.append(f"{container['name']}: seccompProfile")
        if own.get("allowPrivilegeEscalation") is not False:
            wrong.append(f"{container['name']}: allowPrivilegeEscalation")
        if own.get("capabilities", {}).get("drop") != ["ALL"] or own.get("capabilities", {}).get("add"):
            wrong.append(f"{container['name']}: capabilities")
        if own.get("privileged"):
            wrong.append(f"{container['name']}: privileged")
    return wrong


def every_workload(options: JobOptions) -> dict[str, str]:
    lock = shipped_lock()
    (h100,) = parse_products(["NVIDIA-H100-80GB-HBM3"])
    jupyter = {"j": entry("j", frontend="jupyter")}
    return {
        **render({"c": entry("c"), **jupyter}, options),
        **render_validation(lock, options, [h100]).files,
        **render_domains(lock, options, ComputeDomainOptions(2)).files,
        **render_prepull(lock, options),
    }


def test_scc_mode_leaves_the_uid_and_fsgroup_to_openshift_and_stays_restricted() -> None:
    files = every_workload(JobOptions(gpus=4, namespace="ml", uid_mode="scc"))
    found = pods(files)
    assert len(found) > 4
    for pod in found:
        contexts = [pod["securityContext"], *(c["securityContext"] for c in pod["containers"])]
        contexts += [c["securityContext"] for c in pod.get("initContainers", [])]
        assert not any(ASSIGNED & set(context) for context in contexts), contexts
        assert restricted(pod) == []
        assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in pod["containers"])
    one_of_each: dict[str, dict[str, Any]] = {}  # objects of a kind share their code: one is read
    for name, text in files.items():
        for document in yaml.safe_load_all(text) if name != PLAN_NAME else ():
            one_of_each.setdefault(document["kind"], document)
    assert {"Job", "Deployment", "DaemonSet"} <= set(one_of_each)
    for kind, document in one_of_each.items():
        if kind != "ComputeDomain":  # a CRD's: test_compute_domain.py reads it strictly
            for version in KUBERNETES:
                kubernetes_validate.validate(document, version, strict=True)


def test_the_default_mode_names_uid_10001_everywhere() -> None:
    for pod in pods(every_workload(JobOptions(gpus=4, namespace="ml"))):
        assert {pod["securityContext"][k] for k in ASSIGNED} == {10001}
        assert all(c["securityContext"]["runAsUser"] == 10001 for c in pod["containers"])
        assert restricted(pod) == []


def test_scc_mode_refuses_the_ssh_front_end(tmp_path: Path) -> None:
    """sshd logs in only a user of the image's /etc/passwd: an uid of the namespace's range has none."""
    with pytest.raises(
        InputError, match=r"^s: --uid-mode scc runs the pod as a uid of the namespace's range"
    ):
        render({"s": entry("s", frontend="ssh")}, JobOptions(uid_mode="scc"))


@pytest.mark.parametrize("value", ["openshift", "SCC", "", "fixed "])
def test_a_bad_uid_mode_is_one_line_and_exit_2(value: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--uid-mode .*: use fixed \(uid/gid 10001\) or scc"):
        parse_uid_mode(value)
    lock = tmp_path / "images.lock.json"
    lock.write_text("{}")
    done = run_cli("k8s", "-m", str(REPO / "matrix.yaml"), "--lock", str(lock), "--uid-mode", value)
    assert done.exit_code == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("imagekit: error: --uid-mode"), line
