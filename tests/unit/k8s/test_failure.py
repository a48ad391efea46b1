"""Every Job imagekit writes survives a disruption and stops at the probe's verdict
(imagekit.k8s.failure): podFailurePolicy, backoffLimit, per-index limits for Indexed Jobs; each
checked against kubernetes-validate's strict schemas of 1.34-1.37 and against the API server's own
JobSpec rules, which a schema cannot express (reproduced below from k8s.io/api batch/v1 types.go's
validation rules and pkg/apis/batch/validation/validation.go)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.k8s.compute_domain import ComputeDomainOptions, render_domains
from imagekit.k8s.domain_validation import render_domain_validation
from imagekit.k8s.failure import DEFAULT_BACKOFF_LIMIT
from imagekit.k8s.options import JobOptions
from imagekit.k8s.validate_on import PLAN_NAME, parse_products, render_validation
from imagekit.probe import protocol
from tests.unit.k8s.test_compute_domain import shipped_lock
from tests.unit.k8s.test_manifests import render
from tests.unit.report_samples import lock_entry as entry

KUBERNETES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
GB200 = "NVIDIA-GB200"


def api_server_refuses(spec: dict[str, Any]) -> list[str]:
    """What the API server (1.34-1.37) says of ``spec`` beyond its schema: JobSpec's rules on
    podFailurePolicy, podReplacementPolicy and the per-index limits, and validatePodFailurePolicy's
    on exit codes and conditions."""
    wrong: list[str] = []
    indexed = spec.get("completionMode") == "Indexed"
    pod = spec["template"]["spec"]
    names = {c["name"] for c in [*pod["containers"], *pod.get("initContainers", [])]}
    if "maxFailedIndexes" in spec and "backoffLimitPerIndex" not in spec:
        wrong.append("spec.backoffLimitPerIndex: required when maxFailedIndexes is specified")
    if not indexed and ("backoffLimitPerIndex" in spec or "maxFailedIndexes" in spec):
        wrong.append("spec.backoffLimitPerIndex: requires indexed completion mode")
    if indexed and spec.get("maxFailedIndexes", 0) > spec["completions"]:
        wrong.append("spec.maxFailedIndexes: must be less than or equal to completions")
    if spec.get("restartPolicy", pod.get("restartPolicy")) not in ("Never", "OnFailure"):
        wrong.append("spec.template.spec.restartPolicy: valid values: OnFailure, Never")
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return wrong
    if pod.get("restartPolicy") != "Never":
        wrong.append('spec.template.spec.restartPolicy: only "Never" is supported with podFailurePolicy')
    if spec.get("podReplacementPolicy", "Failed") != "Failed":
        wrong.append('spec.podReplacementPolicy: must be "Failed" when podFailurePolicy is used')
    if len(policy["rules"]) > 20:
        wrong.append("spec.podFailurePolicy.rules: at most 20")
    for rule in policy["rules"]:
        action = rule["action"]
        if action not in ("FailJob", "FailIndex", "Ignore", "Count"):
            wrong.append(f"action {action}: unsupported")
        if action == "FailIndex" and "backoffLimitPerIndex" not in spec:
            wrong.append("FailIndex rule action requires the backoffLimitPerIndex to be set")
        if ("onExitCodes" in rule) == ("onPodConditions" in rule):
            wrong.append("exactly one of onExitCodes and onPodConditions")
        codes = rule.get("onExitCodes")
        if codes is not None:
            values = codes["values"]
            if codes.get("containerName") is not None and codes["containerName"] not in names:
                wrong.append("onExitCodes.containerName: must be one of the container or initContainer names")
            if values != sorted(set(values)) or not values or len(values) > 255:
                wrong.append("onExitCodes.values: must be ordered, unique, 1 to 255")
            if codes["operator"] == "In" and 0 in values:
                wrong.append("onExitCodes.values: must not be 0 for the In operator")
        for condition in rule.get("onPodConditions", []):
            if condition.get("status", "True") not in ("True", "False", "Unknown"):
                wrong.append("onPodConditions.status: True, False or Unknown")
    return wrong


def jobs(files: dict[str, str]) -> list[dict[str, Any]]:
    return [
        d
        for name, text in sorted(files.items())
        if name != PLAN_NAME
        for d in yaml.safe_load_all(text)
        if d["kind"] == "Job"
    ]


def every_job(options: JobOptions) -> dict[str, list[dict[str, Any]]]:
    """Each kind of Job `imagekit k8s` writes, with ``options``."""
    lock = shipped_lock()
    h100, gb200 = parse_products(["NVIDIA-H100-80GB-HBM3", GB200])
    fits = {c: e for c, e in lock.images.items() if c.endswith("-arm64")}
    return {
        "check": jobs(render({"c": entry("c")}, options)),
        "validate-on": jobs(render_validation(lock, options, [h100]).files),
        "compute-domain": jobs(render_domains(lock, options, ComputeDomainOptions(4)).files),
        "domain-validation": jobs(
            render_domain_validation(type(lock)(fits), options, [gb200], ComputeDomainOptions(2)).files
        ),
    }


IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
FAIL_ON_VERDICT = {
    "action": "FailJob",
    "onExitCodes": {"containerName": "check", "operator": "In", "values": [1, 2]},
}


def test_every_job_ignores_disruptions_and_fails_at_the_probes_verdict() -> None:
    found = every_job(JobOptions(gpus=4, namespace="ml"))
    for kind, written in found.items():
        assert written, kind
        for job in written:
            spec = job["spec"]
            assert spec["podFailurePolicy"]["rules"] == [IGNORE_DISRUPTION, FAIL_ON_VERDICT], kind
            assert api_server_refuses(spec) == [], kind
        for version in KUBERNETES:  # one of each kind: they share their spec's code (~1 s a release)
            kubernetes_validate.validate(written[0], version, strict=True)
    # the codes are the probe's own: a required check failed, bad arguments
    assert FAIL_ON_VERDICT["onExitCodes"]["values"] == [protocol.EXIT_FAILED, protocol.EXIT_BAD_ARGUMENTS]


def test_a_disruption_is_retried_and_an_unexplained_failure_once() -> None:
    found = every_job(JobOptions(gpus=4))
    for job in found["check"] + found["validate-on"]:
        spec = job["spec"]
        assert spec["backoffLimit"] == DEFAULT_BACKOFF_LIMIT > 0
        assert "backoffLimitPerIndex" not in spec and "completionMode" not in spec
    for job in found["compute-domain"] + found["domain-validation"]:
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        # per index: a node's pod retried on its own; the first index out of retries ends the gang
        assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (DEFAULT_BACKOFF_LIMIT, 0)
        assert "backoffLimit" not in spec  # defaults to MaxInt32 with a per-index limit
    limited = every_job(JobOptions(gpus=4, backoff_limit=5))
    assert limited["check"][0]["spec"]["backoffLimit"] == 5
    assert limited["compute-domain"][0]["spec"]["backoffLimitPerIndex"] == 5


def test_a_command_of_ones_own_keeps_its_exit_codes() -> None:
    """--command's exit codes are not the probe's: only disruptions are ignored."""
    options = JobOptions(gpus=4, command=("torchrun", "train.py"))
    (check,) = jobs(render({"c": entry("c")}, options))
    domain = jobs(render_domains(shipped_lock(), options, ComputeDomainOptions(2)).files)[0]
    for job in (check, domain):
        assert job["spec"]["podFailurePolicy"]["rules"] == [IGNORE_DISRUPTION]
        assert api_server_refuses(job["spec"]) == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s["template"]["spec"].update(restartPolicy="OnFailure"), 'only "Never" is supported'),
        (lambda s: s.update(podReplacementPolicy="TerminatingOrFailed"), 'must be "Failed"'),
        (lambda s: s["podFailurePolicy"]["rules"][1]["onExitCodes"].update(values=[2, 1]), "must be ordered"),
        (
            lambda s: s["podFailurePolicy"]["rules"][1]["onExitCodes"].update(containerName="main"),
            "container",
        ),
        (lambda s: s["podFailurePolicy"]["rules"][1].update(action="FailIndex"), "FailIndex rule action"),
        (lambda s: s.update(maxFailedIndexes=0), "requires indexed completion mode"),
    ],
)
def test_the_api_servers_rules_are_checked_for_real(change: Any, said: str) -> None:
    """The reproduction refuses what the API server refuses: it is no rubber stamp."""
    (job,) = jobs(render({"c": entry("c")}, JobOptions()))
    change(job["spec"])
    assert any(said in line for line in api_server_refuses(job["spec"])), api_server_refuses(job["spec"])
