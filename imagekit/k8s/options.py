"""What the Kubernetes writers are asked for: ``JobOptions``, from ``imagekit k8s``'s command line
(the matrix schema has no Kubernetes section), and its parsed parts (tolerations, volume claims, a
node selector).

Every writer reads them: the Job and front-end manifests, their sizes (``imagekit.k8s.resources``),
DRA claims (``imagekit.k8s.dra``), ComputeDomains, validate-on Jobs, pre-pull DaemonSets. Here,
below all of them, so that none imports another writer for its options.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.k8s.failure import DEFAULT_BACKOFF_LIMIT
from imagekit.k8s.security import UidMode

GPU_RESOURCE = "nvidia.com/gpu"
# How a pod asks for its GPUs: the device plugin's extended resource (a limit), or a DRA claim
# (resource.k8s.io/v1, Kubernetes 1.34+, NVIDIA's DRA driver: imagekit.k8s.dra).
GpuRequestKind = Literal["device-plugin", "dra"]
GPU_REQUESTS: tuple[GpuRequestKind, ...] = get_args(GpuRequestKind)
GPU_TAINT = "nvidia.com/gpu"  # the taint GPU node pools (GKE, EKS, the GPU operator's docs) carry
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# a label's value (63 characters at most; a node selector's may also be empty)
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # of 63 characters at most: check_dns_labels
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str | None
    effect: str

    @classmethod
    def parse(cls, text: str) -> Toleration:
        """``key=value:Effect`` (Equal), ``key:Effect`` (Exists), or ``gpu``: the usual GPU
        node taint, ``nvidia.com/gpu`` with any value, NoSchedule."""
        if text == "gpu":
            return cls(GPU_TAINT, None, "NoSchedule")
        head, sep, effect = text.rpartition(":")
        key, eq, value = head.partition("=")
        if not sep or effect not in _EFFECTS or not _LABEL_KEY.fullmatch(key):
            raise InputError(
                f"--toleration {shown(text)}: use gpu, key=value:Effect or key:Effect,"
                f" Effect one of {', '.join(_EFFECTS)}"
            )
        if eq and not LABEL_VALUE.fullmatch(value):
            raise InputError(f"--toleration {shown(text)}: its value is not a valid label value")
        return cls(key, value if eq else None, effect)

    def as_json(self) -> dict[str, str]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class Claim:
    name: str
    mount: str

    @classmethod
    def parse(cls, text: str) -> Claim:
        """``NAME[:/mount/path]``; data and checkpoints outlive the disposable container there."""
        name, _, mount = text.partition(":")
        mount = mount or "/data"
        if not _DNS_LABEL.fullmatch(name) or len(name) > 253:
            raise InputError(f"--pvc {shown(text)}: its name is not a claim name (lower-case, digits, '-')")
        if not re.fullmatch(r"/[A-Za-z0-9._/-]*", mount) or "/../" in f"{mount}/":
            raise InputError(f"--pvc {shown(text)}: its mount path (after ':') is not absolute")
        return cls(name, mount)


@dataclass(frozen=True)
class JobOptions:
    gpus: int = 1
    gpu_resource: str = GPU_RESOURCE  # or a MIG slice, nvidia.com/mig-1g.10gb
    gpu_request: GpuRequestKind = "device-plugin"
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    runtime_class: str | None = None
    claims: tuple[Claim, ...] = ()
    command: tuple[str, ...] = ()  # the container's args (behind the entrypoint); empty: the check script
    cpu: str | None = None  # the CPU request; None: sized for the probe and --gpus (k8s.resources)
    cpu_limit: str | None = None  # None: no CPU limit
    memory: str | None = None  # the memory request; None: sized for the probe and --gpus
    memory_limit: str | None = None  # None: the memory request and /dev/shm
    shm: str | None = None  # /dev/shm's size limit; None: 8Gi per GPU, at most the memory limit
    uid_mode: UidMode = "fixed"  # fixed: uid/gid 10001; scc: left to OpenShift's constraints
    # retries of a failure that is neither a disruption nor the probe's verdict (k8s.failure)
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    deadline_s: int = 3600
    ttl_s: int | None = 86400
    namespace: str | None = None
    queue: str | None = None  # a Kueue LocalQueue: each Job labelled for it and suspended (k8s.kueue)
    gpu_affinity: bool = True  # placement from the cell: GFD node affinity, or with DRA the CEL selectors
    secret: str | None = None  # front ends: the Secret with the token / authorized keys
    workspace_claim: str | None = None  # front ends: an existing claim (else one is written)
    workspace_size: str = "50Gi"


def check_dns_labels(names: Sequence[tuple[str, str | None]]) -> None:
    """Refuse, in one line naming its flag, the first name given (``(flag, name)``; None: not given)
    that is not a DNS label: a namespace, a runtime class, a Secret, a claim."""
    for flag, value in names:
        if value is not None and not (_DNS_LABEL.fullmatch(value) and len(value) <= 63):
            raise InputError(f"{flag} {shown(value)}: not a DNS label (lower-case letters, digits, '-')")


def parse_node_selector(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        value_ok = value == "" or (LABEL_VALUE.fullmatch(value) is not None and len(value) <= 63)
        if not eq or not _LABEL_KEY.fullmatch(key) or not value_ok:
            raise InputError(f"--node-selector {shown(pair)}: use key=value with Kubernetes label syntax")
        out.append((key, value))
    return tuple(out)
