"""Jobs queued by Kueue (``imagekit k8s --queue NAME``), compute-domain Jobs admitted as one gang.

Every name below is Kueue's own (kubernetes-sigs/kueue at v0.19/main):

- ``kueue.x-k8s.io/queue-name`` (``pkg/controller/constants/constants.go``, ``QueueLabel``): the
  LocalQueue, in the Job's namespace, the Job is submitted to; Kueue's webhook checks it as a
  DNS-1123 subdomain (``pkg/controller/jobframework/validation.go``). Kueue admits a Job by
  unsuspending it; its webhook suspends a labelled Job itself (``site/content/en/docs/tasks/run/
  jobs.md``), and the Job is also written ``spec.suspend: true``, as Kueue's sample
  ``site/static/examples/admin/shared-quota-sample-job.yaml`` is: no pod starts before admission
  even where the webhook does not act (a namespace outside ``managedJobsNamespaceSelector``: the
  Job then waits, visibly suspended, instead of running unqueued). A suspended Job's
  ``activeDeadlineSeconds`` counts from when it is resumed (the Job controller resets
  ``status.startTime``), so the time spent queued is not charged to ``--deadline``.
- ``kueue.x-k8s.io/podset-required-topology`` (``apis/kueue/v1beta2/topology_types.go``,
  ``PodSetRequiredTopologyAnnotation``), on the pod template: topology-aware scheduling admits the
  pod set only when all its pods fit in one domain of that level, here one NVLink clique
  (``nvidia.com/gpu.clique``), and then gates the pods onto it; otherwise the Job stays suspended,
  holding no node. The preferred form (``podset-preferred-topology``) is not offered: it admits a
  gang split across cliques, which shares no NVLink, and whose pods outside the first clique the
  required pod affinity would hold Pending (the stranding this is here to prevent).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from imagekit.core.errors import InputError
from imagekit.core.text import shown

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
# A LocalQueue's name is an object name (a DNS-1123 subdomain), and here also a label value (at
# most 63 characters): both hold only for a lower-case subdomain of at most 63.
_QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_QUEUE_NAME = 63  # a label value's limit (apimachinery validation.LabelValueMaxLength)


def parse_queue(text: str | None) -> str | None:
    """``--queue``: a LocalQueue name, or None without one."""
    if text is None:
        return None
    if len(text) > MAX_QUEUE_NAME or not _QUEUE_NAME.fullmatch(text):
        raise InputError(
            f"--queue {shown(text)}: name a LocalQueue: lower-case letters, digits, '-' and '.',"
            f" starting and ending alphanumeric, at most {MAX_QUEUE_NAME} characters"
        )
    return text


def queued(job: dict[str, Any], queue: str | None, topology: str | None = None) -> dict[str, Any]:
    """``job`` submitted to LocalQueue ``queue`` (unchanged without one): labelled, suspended
    until Kueue admits it; ``topology``: a node label all its pods must share (Kueue's
    topology-aware scheduling admits them together in one domain of it, or not at all)."""
    if queue is None:
        return job
    # the metadata may be shared with the objects beside the Job (its Service): they are not queued
    metadata = copy.deepcopy(job["metadata"])
    metadata["labels"][QUEUE_LABEL] = queue
    spec = {"suspend": True, **job["spec"]}
    if topology is not None:
        template = spec["template"] = copy.deepcopy(spec["template"])
        template["metadata"].setdefault("annotations", {})[REQUIRED_TOPOLOGY] = topology
    return {**job, "metadata": metadata, "spec": spec}
