"""How a Job survives disruption and when it gives up: the Job-level fields every imagekit Job
shares (``imagekit.k8s.manifests``, ``validate_on``, ``compute_domain``).

- ``podFailurePolicy`` (GA in Kubernetes 1.31): a pod that failed because it was disrupted (a drain's
  eviction, a preemption, a taint's NoExecute eviction, a DRA device taint, the node's graceful
  shutdown or its garbage collection: each sets the pod condition ``DisruptionTarget``) is
  **ignored**: it counts against no backoff limit and the Job controller starts a replacement. A
  probe that exits with its own failure codes (``imagekit.probe.protocol``: 1 a required check
  failed, 2 bad arguments) **fails the Job** at once: a finding, never a flake to retry. Any other
  failure (a crash of the interpreter or a library, an OOM kill, the entrypoint's own error, a
  disruption Kubernetes did not mark) counts against ``backoffLimit``, one retry by default.
  With ``--command`` the exit codes are the command's, so only the disruption rule is written.
- What Kubernetes 1.34-1.37 require with it (apiserver validation, ``JobSpec``'s rules): the pod
  template's ``restartPolicy: Never``; ``podReplacementPolicy`` unset or ``Failed`` (left unset,
  it defaults to ``Failed``: a replacement starts once the failed pod is gone, so two pods of one
  index never hold a GPU at once); each ``onExitCodes.containerName`` a container of the template;
  the values sorted, distinct, and no 0 with ``In``.
- Indexed Jobs (a compute domain's pods, one per node) count retries per index
  (``backoffLimitPerIndex``, GA in 1.33) and stop at the first index out of retries
  (``maxFailedIndexes: 0``): a gang with a node missing validates nothing, and its other pods would
  only hold their nodes until the deadline. ``backoffLimit`` is then left to its default (the
  per-index limit governs).
"""

from __future__ import annotations

from typing import Any

from imagekit.probe import protocol

DISRUPTION_CONDITION = "DisruptionTarget"  # set on a pod by whatever disrupts it (KEP-3329)
# The probe's own failure statuses: anything else is not its verdict (a crash, a kill).
PROBE_FAILURE_EXITS = (protocol.EXIT_FAILED, protocol.EXIT_BAD_ARGUMENTS)
# One retry of a failure no rule explains: a crash that comes once (an Xid error, a node going
# bad) is told from one that comes every time, at the price of one more run.
DEFAULT_BACKOFF_LIMIT = 1


def pod_failure_policy(container: str, probe: bool) -> dict[str, Any]:
    """Disruptions ignored; with ``probe`` (``container`` runs the image's probe), its failure
    statuses fail the Job."""
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}]}
    ]
    if probe:
        exits = {"containerName": container, "operator": "In", "values": sorted(PROBE_FAILURE_EXITS)}
        rules.append({"action": "FailJob", "onExitCodes": exits})
    return {"rules": rules}


def job_spec(
    template: dict[str, Any],
    *,
    backoff_limit: int,
    deadline_s: int,
    ttl_s: int | None,
    probe: bool,
    pods: int | None = None,
) -> dict[str, Any]:
    """A Job's spec around ``template`` (its pod's first container the workload); ``pods``: an
    Indexed Job of that many pods, all at once."""
    container = template["spec"]["containers"][0]["name"]
    assert template["spec"].get("restartPolicy") == "Never", "podFailurePolicy needs restartPolicy Never"
    spec: dict[str, Any] = {}
    if pods is not None:
        spec |= {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimitPerIndex": backoff_limit,
            "maxFailedIndexes": 0,
        }
    else:
        spec["backoffLimit"] = backoff_limit
    spec |= {
        "podFailurePolicy": pod_failure_policy(container, probe),
        "activeDeadlineSeconds": deadline_s,
        "template": template,
    }
    if ttl_s is not None:
        spec["ttlSecondsAfterFinished"] = ttl_s
    return spec
