"""Kubernetes Job manifests that run each published image on a cluster's GPU nodes.

The image is named by digest from ``images.lock.json`` (never by a moving tag, so a Job runs
exactly what was verified), and the default command is the image's own check script: a node
pool is validated by the same checks as the build machine. Options come from the command line
(the matrix schema has no Kubernetes section).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagekit import naming
from imagekit.contract import CHECK_SCRIPT_PATH
from imagekit.errors import InputError
from imagekit.lockfile import LockEntry
from imagekit.verify import GpuRequest, check_arguments

GPU_RESOURCE = "nvidia.com/gpu"
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str | None
    effect: str

    @classmethod
    def parse(cls, text: str) -> Toleration:
        """``key=value:Effect`` (Equal) or ``key:Effect`` (Exists)."""
        head, sep, effect = text.rpartition(":")
        key, eq, value = head.partition("=")
        if not sep or effect not in _EFFECTS or not _LABEL_KEY.fullmatch(key):
            raise InputError(
                f"--toleration {text!r}: use key=value:Effect or key:Effect,"
                f" Effect one of {', '.join(_EFFECTS)}"
            )
        if eq and not (value and _LABEL_VALUE.fullmatch(value)):
            raise InputError(f"--toleration {text!r}: {value!r} is not a valid label value")
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
            raise InputError(f"--pvc {text!r}: {name!r} is not a claim name (lower-case, digits, '-')")
        if not re.fullmatch(r"/[A-Za-z0-9._/-]*", mount) or "/../" in f"{mount}/":
            raise InputError(f"--pvc {text!r}: {mount!r} is not an absolute mount path")
        return cls(name, mount)


@dataclass(frozen=True)
class JobOptions:
    gpus: int = 1
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    runtime_class: str | None = None
    claims: tuple[Claim, ...] = ()
    command: tuple[str, ...] = ()  # empty: the image's check script
    cpu: str | None = None
    memory: str | None = None
    shm: str = "2Gi"  # NCCL's all-reduce needs more than the default 64 MiB /dev/shm
    backoff_limit: int = 0  # a failed check is a finding, not a flake to retry
    deadline_s: int = 3600
    ttl_s: int | None = 86400
    namespace: str | None = None


def parse_node_selector(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value) or len(value) > 63:
            raise InputError(f"--node-selector {pair!r}: use key=value with Kubernetes label syntax")
        out.append((key, value))
    return tuple(out)


def check_quantity(option: str, value: str | None) -> str | None:
    if value is not None and not _QUANTITY.fullmatch(value):
        raise InputError(f"{option} {value!r}: not a Kubernetes quantity (like 8, 500m, 16Gi)")
    return value


def job_name(cell: str) -> str:
    """A DNS label (<= 63) from the cell id; a hash keeps truncated names distinct."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"imagekit-check-{cell}".lower()).strip("-")
    if len(base) <= 63:
        return base
    suffix = hashlib.sha256(cell.encode()).hexdigest()[:8]
    return f"{base[: 63 - 9].rstrip('-')}-{suffix}"


def check_command(entry: LockEntry, gpus: int) -> list[str]:
    labels = {naming.label(k): v for k, v in entry.expect.items()}
    request = GpuRequest(str(gpus), gpus)
    return ["python3", entry.check_script or CHECK_SCRIPT_PATH, *check_arguments(labels, request)]


def job_manifest(entry: LockEntry, options: JobOptions) -> dict[str, Any]:
    if not entry.digest.startswith("sha256:"):
        raise InputError(f"{entry.cell}: the lock file names no digest; run `imagekit publish` first")
    name = job_name(entry.cell)
    labels = {"app.kubernetes.io/name": "imagekit", "app.kubernetes.io/component": "gpu-check", "job": name}
    annotations = {
        naming.annotation("cell"): entry.cell,
        naming.annotation("input-digest"): entry.input_digest,
        naming.annotation("verified"): entry.level,
    }
    limits: dict[str, str | int] = {}
    requests: dict[str, str | int] = {}
    if options.gpus:
        limits[GPU_RESOURCE] = options.gpus  # extended resources: request == limit
        requests[GPU_RESOURCE] = options.gpus
    if options.cpu:
        limits["cpu"] = requests["cpu"] = options.cpu
    if options.memory:
        limits["memory"] = requests["memory"] = options.memory
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm}}
    ]
    for index, claim in enumerate(options.claims):
        volume = f"data-{index}"
        mounts.append({"name": volume, "mountPath": claim.mount})
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim.name}})
    container: dict[str, Any] = {
        "name": "check",
        "image": entry.reference,
        "imagePullPolicy": "IfNotPresent",  # by digest, a cached copy is the same image
        "command": list(options.command) or check_command(entry, options.gpus),
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {"limits": limits, "requests": requests},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    if options.runtime_class:
        pod["runtimeClassName"] = options.runtime_class
    if options.node_selector:
        pod["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        pod["tolerations"] = [t.as_json() for t in options.tolerations]
    metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if options.namespace:
        metadata["namespace"] = options.namespace
    spec: dict[str, Any] = {
        "backoffLimit": options.backoff_limit,
        "activeDeadlineSeconds": options.deadline_s,
        "template": {"metadata": {"labels": labels}, "spec": pod},
    }
    if options.ttl_s is not None:
        spec["ttlSecondsAfterFinished"] = options.ttl_s
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def render_jobs(entries: Mapping[str, LockEntry], options: JobOptions) -> dict[str, str]:
    """File name -> YAML, for every entry; raises before anything is written."""
    if options.runtime_class is not None and not _DNS_LABEL.fullmatch(options.runtime_class):
        raise InputError(f"--runtime-class {options.runtime_class!r}: not a DNS label")
    out: dict[str, str] = {}
    for cell in sorted(entries):
        manifest = job_manifest(entries[cell], options)
        out[f"{manifest['metadata']['name']}.yaml"] = yaml.safe_dump(manifest, sort_keys=False)
    return out


def write_jobs(files: Mapping[str, str], out: Path) -> list[Path]:
    from imagekit.atomic import atomic_write

    written = []
    for name, text in files.items():
        path = out / name
        atomic_write(path, text)
        written.append(path)
    return written
