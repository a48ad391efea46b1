"""Kubernetes Job manifests that run each published image on a cluster's GPU nodes.

The image is named by digest from ``images.lock.json`` (never by a moving tag, so a Job runs
exactly what was verified), and the default command is the image's own check script: a node
pool is validated by the same checks as the build machine. Options come from the command line
(the matrix schema has no Kubernetes section).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagekit import naming
from imagekit.contract import CHECK_SCRIPT_PATH, FRONTEND
from imagekit.errors import InputError
from imagekit.lockfile import LockEntry
from imagekit.text import shown
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
                f"--toleration {shown(text)}: use key=value:Effect or key:Effect,"
                f" Effect one of {', '.join(_EFFECTS)}"
            )
        if eq and not (value and _LABEL_VALUE.fullmatch(value)):
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
    secret: str | None = None  # front ends: the Secret with the token / authorized keys
    workspace_claim: str | None = None  # front ends: an existing claim (else one is written)
    workspace_size: str = "50Gi"


def parse_node_selector(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value) or len(value) > 63:
            raise InputError(f"--node-selector {shown(pair)}: use key=value with Kubernetes label syntax")
        out.append((key, value))
    return tuple(out)


def check_quantity(option: str, value: str | None) -> str | None:
    if value is not None and not _QUANTITY.fullmatch(value):
        raise InputError(f"{option} {shown(value)}: not a Kubernetes quantity (like 8, 500m, 16Gi)")
    return value


def dns_name(prefix: str, cell: str) -> str:
    """A DNS label (<= 63) from the cell id; a hash keeps truncated names distinct."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{cell}".lower()).strip("-")
    if len(base) <= 63:
        return base
    suffix = hashlib.sha256(cell.encode()).hexdigest()[:8]
    return f"{base[: 63 - 9].rstrip('-')}-{suffix}"


def job_name(cell: str) -> str:
    return dns_name("imagekit-check", cell)


def check_command(entry: LockEntry, gpus: int) -> list[str]:
    labels = {naming.label(k): v for k, v in entry.expect.items()}
    request = GpuRequest(str(gpus), gpus)
    return ["python3", entry.check_script or CHECK_SCRIPT_PATH, *check_arguments(labels, request)]


def _metadata(name: str, entry: LockEntry, options: JobOptions, component: str) -> dict[str, Any]:
    if not naming.DIGEST.fullmatch(entry.digest):
        raise InputError(f"{entry.cell}: the lock file names no digest; run `imagekit publish` first")
    labels = {"app.kubernetes.io/name": "imagekit", "app.kubernetes.io/component": component, "job": name}
    annotations = {
        naming.annotation("cell"): entry.cell,
        naming.annotation("input-digest"): entry.input_digest,
        naming.annotation("verified"): entry.level,
    }
    metadata: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if options.namespace:
        metadata["namespace"] = options.namespace
    return metadata


def _container(name: str, entry: LockEntry, options: JobOptions) -> dict[str, Any]:
    """The image by digest, the resources asked for (GPUs: request == limit), no privileges."""
    limits: dict[str, str | int] = {}
    requests: dict[str, str | int] = {}
    if options.gpus:
        limits[GPU_RESOURCE] = options.gpus  # extended resources: request == limit
        requests[GPU_RESOURCE] = options.gpus
    if options.cpu:
        limits["cpu"] = requests["cpu"] = options.cpu
    if options.memory:
        limits["memory"] = requests["memory"] = options.memory
    return {
        "name": name,
        "image": entry.reference,
        "imagePullPolicy": "IfNotPresent",  # by digest, a cached copy is the same image
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {"limits": limits, "requests": requests},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _pod(container: dict[str, Any], options: JobOptions, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod around ``container``: /dev/shm for NCCL, the claims asked for, where it may run."""
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm}}, *volumes]
    for index, claim in enumerate(options.claims):
        volume = f"data-{index}"
        container["volumeMounts"].append({"name": volume, "mountPath": claim.mount})
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim.name}})
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if options.runtime_class:
        pod["runtimeClassName"] = options.runtime_class
    if options.node_selector:
        pod["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        pod["tolerations"] = [t.as_json() for t in options.tolerations]
    return pod


def job_manifest(entry: LockEntry, options: JobOptions) -> dict[str, Any]:
    name = job_name(entry.cell)
    metadata = _metadata(name, entry, options, "gpu-check")
    container = _container("check", entry, options)
    container["command"] = list(options.command) or check_command(entry, options.gpus)
    pod = {"restartPolicy": "Never", **_pod(container, options, [])}
    spec: dict[str, Any] = {
        "backoffLimit": options.backoff_limit,
        "activeDeadlineSeconds": options.deadline_s,
        "template": {"metadata": {"labels": metadata["labels"]}, "spec": pod},
    }
    if options.ttl_s is not None:
        spec["ttlSecondsAfterFinished"] = options.ttl_s
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


# -- front ends: a Deployment, its Service and its workspace --------------------------------------

# Where a front end reads its secret (the image's entrypoint takes these variables), and the key
# of the Kubernetes Secret that holds it: `kubectl create secret generic NAME --from-file=KEY=...`.
SECRET_DIR = "/run/secrets/imagekit"
FRONTEND_SECRETS = {
    "jupyter": ("JUPYTER_TOKEN_FILE", "token"),
    "ssh": ("SSH_AUTHORIZED_KEYS_FILE", "authorized_keys"),
}
SERVICE_PORTS = {"jupyter": 8888, "ssh": 22}  # what a client connects to; the container's is higher


def frontend_manifests(entry: LockEntry, options: JobOptions) -> list[dict[str, Any]]:
    """A front-end cell as a long-running service: Deployment (one replica, by digest, non-root,
    the secret from a Secret reference, never inline), a ClusterIP Service and, unless a claim is
    named, a PersistentVolumeClaim whose code/, data/ and checkpoints/ mount below the workspace."""
    frontend = entry.frontend
    assert frontend in FRONTEND_SECRETS
    name = dns_name(f"imagekit-{frontend}", entry.cell)
    metadata = _metadata(name, entry, options, frontend)
    claim = options.workspace_claim or f"{name}-workspace"
    secret = options.secret or f"{name}-secret"
    variable, key = FRONTEND_SECRETS[frontend]
    port = FRONTEND.port(frontend)
    container = _container(frontend, entry, options)
    container["env"].append({"name": variable, "value": f"{SECRET_DIR}/{key}"})
    container["ports"] = [{"name": frontend, "containerPort": port}]
    container["volumeMounts"] += [
        {"name": "secret", "mountPath": SECRET_DIR, "readOnly": True},
        *(
            {"name": "workspace", "mountPath": f"{FRONTEND.workspace}/{d}", "subPath": d}
            for d in FRONTEND.workspace_dirs
        ),
    ]
    probe = {"exec": {"command": ["python3", f"{FRONTEND.files_dir}/healthcheck.py"]}, "timeoutSeconds": 10}
    container["readinessProbe"] = {**probe, "initialDelaySeconds": 10, "periodSeconds": 15}
    container["livenessProbe"] = {**probe, "initialDelaySeconds": 60, "periodSeconds": 30}
    volumes = [
        {"name": "secret", "secret": {"secretName": secret, "defaultMode": 0o440}},
        {"name": "workspace", "persistentVolumeClaim": {"claimName": claim}},
    ]
    pod = _pod(container, options, volumes)
    pod["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": FRONTEND.uid,
        "runAsGroup": FRONTEND.uid,
        "fsGroup": FRONTEND.uid,  # the claim and the secret readable by the image's user
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    selector = {"app.kubernetes.io/name": "imagekit", "job": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer of the workspace at a time
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": metadata["labels"]}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "name": name},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": frontend, "port": SERVICE_PORTS[frontend], "targetPort": frontend}],
        },
    }
    manifests = [deployment, service]
    if options.workspace_claim is None:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {**metadata, "name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": options.workspace_size}},
                },
            }
        )
    return manifests


def _overlap(one: str, other: str) -> bool:
    """Whether two mount paths are the same directory or one holds the other."""
    return one == other or one.startswith(other.rstrip("/") + "/") or other.startswith(one.rstrip("/") + "/")


def check_mounts(options: JobOptions, frontend: bool) -> None:
    """Refuse a --pvc mount path that would hide or be hidden by another mount: /dev/shm, a front
    end's Secret and workspace directories, another claim (Kubernetes would start the pod, and
    one of the two would silently not be what the workload reads)."""
    taken = [("/dev/shm", "the shared-memory volume")]
    if frontend:
        taken.append((SECRET_DIR, "the front end's Secret"))
        taken += [(f"{FRONTEND.workspace}/{d}", "the workspace claim") for d in FRONTEND.workspace_dirs]
    for claim in options.claims:
        mount = posixpath.normpath(claim.mount)
        for path, what in taken:
            if _overlap(mount, path):
                raise InputError(
                    f"--pvc {claim.name}:{claim.mount}: collides with {what} at {path}; mount it elsewhere"
                )
        taken.append((mount, f"the claim {claim.name}"))


def render_jobs(
    entries: Mapping[str, LockEntry], options: JobOptions, frontends: Mapping[str, str | None]
) -> dict[str, str]:
    """File name -> YAML, for every entry (a Job, or a front end's workloads); raises before
    anything is written. ``frontends``: which front end each cell serves, from the matrix (the
    lock file is an editable record, never the word on what a cell is)."""
    for flag, value in (
        ("--runtime-class", options.runtime_class),
        ("--namespace", options.namespace),
        ("--secret", options.secret),
        ("--workspace-claim", options.workspace_claim),
    ):
        if value is not None and not (_DNS_LABEL.fullmatch(value) and len(value) <= 63):
            raise InputError(f"{flag} {shown(value)}: not a DNS label (lower-case letters, digits, '-')")
    check_quantity("--workspace-size", options.workspace_size)
    out: dict[str, str] = {}
    made_by: dict[str, str] = {}
    for cell in sorted(entries):
        frontend = frontends.get(cell)
        if frontend != entries[cell].frontend:
            raise InputError(
                f"{cell}: the lock file says front end {entries[cell].frontend or 'none'}, the matrix"
                f" {frontend or 'none'}; run `imagekit publish` again"
            )
        check_mounts(options, frontend is not None)
        entry = entries[cell]
        if frontend:
            manifests = frontend_manifests(entry, options)
            name = manifests[0]["metadata"]["name"]
            text = yaml.safe_dump_all(manifests, sort_keys=False)
        else:
            manifest = job_manifest(entry, options)
            name = manifest["metadata"]["name"]
            text = yaml.safe_dump(manifest, sort_keys=False)
        if name in made_by:  # one object would silently replace the other in the cluster
            raise InputError(f"{made_by[name]} and {cell} would both be the Kubernetes object {name}")
        made_by[name] = cell
        out[f"{name}.yaml"] = text
    return out


def write_jobs(files: Mapping[str, str], out: Path) -> list[Path]:
    from imagekit.atomic import atomic_write_all

    paths = {out / name: text for name, text in files.items()}
    atomic_write_all(paths, out)
    return list(paths)


# -- admission: only images that carry a valid imagekit attestation --------------------------------------

KYVERNO_POLICY_FILE = "imagekit-attestation-policy.kyverno.yaml"
KYVERNO_POLICY_NAME = "imagekit-verified-images"


def kyverno_policy(repositories: Sequence[str], public_pem: str, predicate_type: str) -> dict[str, Any]:
    """A Kyverno ClusterPolicy that admits a Pod's image from ``repositories`` only when its
    digest carries a DSSE attestation of ``predicate_type`` signed by ``public_pem`` (cosign's
    key-based layout, which imagekit writes), whose predicate says validated on a visible GPU.
    Kyverno resolves a tag to its digest and pins it (``mutateDigest``)."""
    references = sorted({f"{r}{suffix}" for r in repositories for suffix in (":*", "@*")})
    conditions = [
        {"key": "{{ verdict }}", "operator": "Equals", "value": "validated"},
        {"key": "{{ gpu.visible }}", "operator": "Equals", "value": True},
    ]
    if predicate_type.endswith("/checked-without-gpu/v1"):
        conditions = [{"key": "{{ verdict }}", "operator": "AnyIn", "value": ["validated", "checked"]}]
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": KYVERNO_POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "imagekit: verified GPU images only",
                "policies.kyverno.io/description": (
                    "Admits images of the published repository only by a digest that carries an"
                    f" imagekit verification attestation ({predicate_type}) signed by the given key."
                ),
            },
        },
        "spec": {
            "validationFailureAction": "Enforce",
            "background": False,
            "webhookTimeoutSeconds": 30,
            "rules": [
                {
                    "name": "imagekit-verification-attestation",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [
                        {
                            "imageReferences": references,
                            "required": True,
                            "verifyDigest": True,
                            "mutateDigest": True,
                            "attestations": [
                                {
                                    "type": predicate_type,
                                    "attestors": [
                                        {
                                            "count": 1,
                                            "entries": [
                                                {
                                                    "keys": {
                                                        "publicKeys": public_pem.strip(),
                                                        "signatureAlgorithm": "sha256",
                                                        "rekor": {"ignoreTlog": True},
                                                        "ctlog": {"ignoreSCT": True},
                                                    }
                                                }
                                            ],
                                        }
                                    ],
                                    "conditions": [{"all": conditions}],
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }


def render_policy(document: Mapping[str, Any]) -> str:
    """A policy document as the YAML file `k8s` writes (the PEM a literal block, as typed)."""
    return yaml.safe_dump(dict(document), sort_keys=False)
