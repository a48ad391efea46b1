"""Why a validate-on Job left no probe document: its status and its pods', as
``kubectl get jobs,pods -l app.kubernetes.io/component=validate-on -o json`` printed them
(``imagekit k8s-results --status FILE``).

The file is untrusted like every output (a person may have edited it): read up to a bound, every
field looked at checked for its type, anything else ignored. Each Job that did not report gets one
kind and a detail, in this order of precedence:

- ``not-found``: the file holds no Job of that name (never applied, or removed since by
  ``ttlSecondsAfterFinished`` or a person);
- ``deadline``: ``activeDeadlineSeconds`` passed (the Job's ``Failed`` condition, reason
  ``DeadlineExceeded``), with what its last pod was doing (never scheduled, evicted);
- ``failed``: the Job failed otherwise (the probe's own failure is a document, so this is a pod that
  died without one: its exit code or reason, such as OOMKilled);
- ``no-output``: the Job completed, yet the output given holds no document (collect it again);
- ``evicted``: a pod of it was disrupted (the ``DisruptionTarget`` condition, or the kubelet's
  ``Evicted``), and the Job is still going: the replacement's state follows;
- ``pending``: the Job is suspended (a queue holds it) or its pod is not running yet, with the
  scheduler's or the kubelet's reason (Unschedulable, ImagePullBackOff);
- ``running``: still running: wait for it.

Without ``--status`` every such Job is ``no-output``, its detail saying what the file held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.core.errors import InputError
from imagekit.core.limits import K8S_STATUS_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import parse_json
from imagekit.core.text import printable

STATUS_WHAT = "the Jobs' and pods' status (`kubectl get jobs,pods -l ... -o json`)"
DETAIL_CHARS = 300  # of a message a Job or pod carries (a scheduler's lists every node group)
JOB_LABELS = ("job", "batch.kubernetes.io/job-name", "job-name")  # imagekit's own first


@dataclass
class JobState:
    """One Job's object (None: the file holds its pods only) and its pods'."""

    job: Mapping[str, Any] | None = None
    pods: list[Mapping[str, Any]] = field(default_factory=list)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return " ".join(printable(value).split())[:DETAIL_CHARS] if isinstance(value, str) else ""


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def parse_status(raw: bytes, source: str) -> dict[str, JobState]:
    """The file's Jobs and pods by Job name; one InputError naming the file where it is no
    Kubernetes object list."""
    fix = "write it with `kubectl get jobs,pods -l app.kubernetes.io/component=validate-on -o json`"
    try:
        data = parse_json(raw)  # strict: a key given twice is refused, not the last one taken
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source}: not JSON ({str(exc)[:80]}); {fix}") from None
    items = data.get("items") if isinstance(data, Mapping) and "items" in data else [data]
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise InputError(f"{source}: not a list of Kubernetes objects; {fix}")
    states: dict[str, JobState] = {}
    for item in items:
        kind, metadata = item.get("kind"), _mapping(item.get("metadata"))
        if kind == "Job" and isinstance(metadata.get("name"), str):
            states.setdefault(metadata["name"], JobState()).job = item
        elif kind == "Pod":
            labels = _mapping(metadata.get("labels"))
            owner = next((labels[k] for k in JOB_LABELS if isinstance(labels.get(k), str)), None)
            if owner is not None:
                states.setdefault(owner, JobState()).pods.append(item)
    if not states and items:
        raise InputError(f"{source}: no Job and no pod of a Job in it; {fix}")
    return states


def read_status(path: Path) -> dict[str, JobState]:
    try:
        raw = read_regular_file(path, K8S_STATUS_BYTES, STATUS_WHAT)
    except FileNotFoundError:
        raise InputError(f"--status {path}: no such file; {STATUS_WHAT} writes it") from None
    return parse_status(raw, str(path))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in _list(_mapping(obj.get("status")).get("conditions")):
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _evicted(pod: Mapping[str, Any]) -> str | None:
    """Why ``pod`` was disrupted, or None."""
    condition = _condition(pod, "DisruptionTarget")
    if condition is not None:
        return ": ".join(t for t in (_text(condition.get("reason")), _text(condition.get("message"))) if t)
    status = _mapping(pod.get("status"))
    if status.get("reason") == "Evicted":
        return ": ".join(t for t in ("Evicted", _text(status.get("message"))) if t)
    return None


def _pod_state(pod: Mapping[str, Any]) -> str:
    """What ``pod`` was doing, in a few words."""
    status = _mapping(pod.get("status"))
    phase = _text(status.get("phase")) or "Unknown"
    for condition in _list(status.get("conditions")):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = _text(condition.get("reason")) or "not scheduled"
            return f"{phase}, {reason}: {_text(condition.get('message'))}".rstrip(": ")
    for container in _list(status.get("containerStatuses")):
        state = _mapping(container.get("state"))
        waiting, terminated = _mapping(state.get("waiting")), _mapping(state.get("terminated"))
        if waiting:
            reason = _text(waiting.get("reason")) or "waiting"
            return f"{phase}, {reason} {_text(waiting.get('message'))}".strip()
        if terminated:
            code = terminated.get("exitCode")
            shown_code = f"exit {code}" if isinstance(code, int) and not isinstance(code, bool) else ""
            words = ", ".join(t for t in (shown_code, _text(terminated.get("reason"))) if t)
            return f"{phase}, {words}" if words else phase
    return phase


def _last_pod(state: JobState) -> Mapping[str, Any] | None:
    """The pod created last (the replacement of an evicted one, the last retry)."""
    stamped = [
        (str(_mapping(p.get("metadata")).get("creationTimestamp", "")), i) for i, p in enumerate(state.pods)
    ]
    return state.pods[max(stamped)[1]] if stamped else None


def why_missing(name: str, status: Mapping[str, JobState] | None, source: str, note: str) -> tuple[str, str]:
    """(kind, detail) for the Job ``name`` that left no document; ``note`` what its output held."""
    if status is None:
        return "no-output", f"{note}; --status FILE says why"
    state = status.get(name)
    if state is None or state.job is None:
        return (
            "not-found",
            f"no Job {name} in {source}: never applied, or removed since (ttlSecondsAfterFinished)",
        )
    last = _last_pod(state)
    doing = f"; its last pod: {_pod_state(last)}" if last is not None else "; no pod was made"
    evictions = [e for e in (_evicted(p) for p in state.pods) if e is not None]
    evicted = f"; evicted {len(evictions)}x ({evictions[-1]})" if evictions else ""
    failed = _condition(state.job, "Failed")
    if failed is not None:
        reason = _text(failed.get("reason")) or "Failed"
        if reason == "DeadlineExceeded":
            return "deadline", f"activeDeadlineSeconds passed{evicted}{doing}"
        return (
            "failed",
            f"failed without a probe document ({reason}: {_text(failed.get('message'))}){evicted}{doing}",
        )
    if _condition(state.job, "Complete") is not None:
        return "no-output", f"the Job completed, but {note}: collect its output again"
    if _condition(state.job, "Suspended") is not None:
        return "pending", "suspended: a queue holds it until it admits the Job"
    if evictions:
        return "evicted", f"{evictions[-1]}; replaced{doing}"
    if last is None:
        return "pending", "no pod yet"
    phase = _mapping(last.get("status")).get("phase")
    kind = "running" if phase == "Running" else "pending"
    return kind, _pod_state(last)


def missing_lines(missing: Sequence[tuple[str, str, str]]) -> list[str]:
    """One line per Job that did not report: name, kind, detail."""
    return [f"{job}: {kind}: {detail}" for job, kind, detail in missing]
