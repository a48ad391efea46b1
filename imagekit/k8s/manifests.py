"""Kubernetes Job manifests that run each published image on a cluster's GPU nodes.

The image is named by digest from ``images.lock.json`` (never by a moving tag, so a Job runs
exactly what was verified; a cell published as a platform of an image index is named by the
index's digest, which resolves on each node to the verified image of its platform, and a cell
whose image serves one platform is held to nodes of that architecture), and the default
arguments run the image's own check script behind the image's entrypoint, as verification did: a
node pool is validated by the same checks as the build machine. Options come from the command line
(the matrix schema has no Kubernetes section): ``imagekit.k8s.options``. The admission policy
written next to them is ``imagekit.k8s.admission``'s.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.k8s.dra import check_gpu_request, claim_gpus
from imagekit.k8s.failure import job_spec
from imagekit.k8s.kueue import queued
from imagekit.k8s.mig import PLUGIN_PROFILE_PATTERN
from imagekit.k8s.options import JobOptions, check_dns_labels
from imagekit.k8s.placement import ARCH_LABEL, entry_fit, gfd_affinity
from imagekit.k8s.resources import TMP_SIZE, check_quantity, sizes
from imagekit.k8s.security import RUN_AS, container_security, pod_security
from imagekit.render.contract import CHECK_SCRIPT_PATH, FRONTEND
from imagekit.report.lockfile import Lock, LockEntry, LockIndex
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import check_arguments

# What the NVIDIA device plugin advertises: whole GPUs, time-sliced shares renamed by the plugin,
# and MIG slices under the mixed strategy (one resource per profile, `nvidia.com/mig-1g.10gb`;
# every spelling go-nvlib writes: imagekit.k8s.mig).
_GPU_RESOURCE = re.compile(rf"nvidia\.com/(gpu|gpu\.shared|mig-{PLUGIN_PROFILE_PATTERN})")


def parse_command(command: str | None) -> tuple[str, ...]:
    """--command, shell-split; () without one."""
    try:
        argv = tuple(shlex.split(command)) if command is not None else ()
    except ValueError as exc:
        raise InputError(f"--command: {exc}") from None
    if command is not None and not argv:
        raise InputError("--command is empty")
    return argv


def check_gpu_resource(options: JobOptions) -> None:
    resource = options.gpu_resource
    if not _GPU_RESOURCE.fullmatch(resource):
        raise InputError(
            f"--gpu-resource {shown(resource)}: use nvidia.com/gpu, nvidia.com/gpu.shared or a MIG"
            " slice of the mixed strategy such as nvidia.com/mig-1g.10gb"
        )
    if "/mig-" in resource and options.gpus != 1:
        raise InputError(
            f"--gpu-resource {resource}: a MIG slice takes --gpus 1 (a CUDA process uses one MIG"
            f" device), not {options.gpus}"
        )


# -- where a cell's image can run: node affinity from the cell (imagekit.k8s.placement) -------------


def node_affinity(entry: LockEntry, options: JobOptions) -> dict[str, Any] | None:
    """Node affinity on feature discovery's labels from the cell's fit; None with
    ``--no-gpu-affinity`` (no feature discovery) and with DRA (the claim selects the GPU)."""
    if not options.gpu_affinity or options.gpu_request == "dra":
        return None
    return gfd_affinity(entry_fit(entry), options.gpus)


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


def object_metadata(name: str, entry: LockEntry, options: JobOptions, component: str) -> dict[str, Any]:
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


def image_of(entry: LockEntry, index: LockIndex | None) -> str:
    """What a workload pulls: the index the cell's image is a platform of, else the image."""
    return index.reference if index is not None else entry.reference


def node_selector(entry: LockEntry, index: LockIndex | None, options: JobOptions) -> dict[str, str]:
    """``--node-selector``, and ``kubernetes.io/arch`` where what the workload pulls serves one
    platform (an image alone, or an index left with one): on a mixed cluster an image on a node
    of another architecture dies with "exec format error". A selector that asks for another
    architecture is refused (the pod would never be scheduled)."""
    selector = dict(options.node_selector)
    served = list(index.platforms) if index is not None else [entry.platform]
    if len(served) != 1:
        return selector
    arch = platforms.get(served[0]).arch
    if selector.setdefault(ARCH_LABEL, arch) != arch:
        raise InputError(
            f"--node-selector {ARCH_LABEL}={selector[ARCH_LABEL]}: {entry.cell}'s image serves"
            f" {served[0]} only; select {ARCH_LABEL}={arch} or leave it out"
        )
    return selector


def workload_container(
    name: str, entry: LockEntry, options: JobOptions, image: str, gpu_limits: bool = True
) -> dict[str, Any]:
    """The image by digest, the resources asked for (GPUs: request == limit; CPU and memory as
    ``imagekit.k8s.resources`` sizes them for ``--gpus``), and Pod Security's 'restricted' profile:
    non-root, no privilege escalation, no capability, a read-only root. ``gpu_limits`` False: the
    caller attaches the GPUs itself."""
    sized = sizes(options)
    limits: dict[str, str | int] = dict(sized.limits())
    requests: dict[str, str | int] = dict(sized.requests())
    if gpu_limits and options.gpus and options.gpu_request == "device-plugin":  # DRA: a claim instead
        limits[options.gpu_resource] = options.gpus  # extended resources: request == limit
        requests[options.gpu_resource] = options.gpus
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # by digest, a cached copy is the same image
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {"limits": limits, "requests": requests},
        "securityContext": container_security(options.uid_mode),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def workload_pod(
    container: dict[str, Any],
    options: JobOptions,
    volumes: list[dict[str, Any]],
    entry: LockEntry,
    index: LockIndex | None,
) -> dict[str, Any]:
    """The pod around ``container``: /dev/shm for NCCL, the claims asked for, where it may run."""
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": sizes(options).shm}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
        *volumes,
    ]
    for number, claim in enumerate(options.claims):
        volume = f"data-{number}"
        container["volumeMounts"].append({"name": volume, "mountPath": claim.mount})
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim.name}})
    pod: dict[str, Any] = {
        # no workload here talks to the Kubernetes API: no service account token in the pod
        "automountServiceAccountToken": False,
        "securityContext": pod_security(options.uid_mode),
        "containers": [container],
        "volumes": volumes,
    }
    if options.runtime_class:
        pod["runtimeClassName"] = options.runtime_class
    selector = node_selector(entry, index, options)
    if selector:
        pod["nodeSelector"] = selector
    affinity = node_affinity(entry, options)
    if affinity is not None:
        pod["affinity"] = affinity
    if options.tolerations:
        pod["tolerations"] = [t.as_json() for t in options.tolerations]
    return pod


def job_manifest(entry: LockEntry, options: JobOptions, index: LockIndex | None = None) -> dict[str, Any]:
    """The Job that runs ``entry``'s checks; ``index``: the published index it is a platform of."""
    name = job_name(entry.cell)
    metadata = object_metadata(name, entry, options, "gpu-check")
    container = workload_container("check", entry, options, image_of(entry, index))
    container["env"].append({"name": "HOME", "value": "/tmp"})  # as verification ran it
    # `args`, never `command`: `command` would replace the image's ENTRYPOINT (NGC's sets up CUDA
    # forward compatibility; a front end's starts dumb-init), while verification replaced only CMD.
    container["args"] = list(options.command) or check_command(entry, options.gpus)
    pod = {"restartPolicy": "Never", **workload_pod(container, options, [], entry, index)}
    spec = job_spec(
        {"metadata": {"labels": metadata["labels"]}, "spec": pod},
        backoff_limit=options.backoff_limit,
        deadline_s=options.deadline_s,
        ttl_s=options.ttl_s,
        probe=not options.command,  # the check script is the probe: its exit codes are its verdict
    )
    return queued(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}, options.queue
    )


# -- front ends: a Deployment, its Service and its workspace --------------------------------------

# Where a front end reads its secret (the image's entrypoint takes these variables), and the key
# of the Kubernetes Secret that holds it: `kubectl create secret generic NAME --from-file=KEY=...`.
SECRET_DIR = "/run/secrets/imagekit"
FRONTEND_SECRETS = {
    "jupyter": ("JUPYTER_TOKEN_FILE", "token"),
    "ssh": ("SSH_AUTHORIZED_KEYS_FILE", "authorized_keys"),
}
SERVICE_PORTS = {"jupyter": 8888, "ssh": 22}  # what a client connects to; the container's is higher
# The entrypoint's state directory (IMAGEKIT_STATE_DIR): sshd's host keys on the workspace claim,
# so a restarted pod keeps its identity (clients never see "host identification has changed");
# Jupyter's runtime files, which hold its token, stay off the claim, on the pod's /tmp.
STATE_DIRS = {"jupyter": "/tmp/imagekit-frontend", "ssh": f"{FRONTEND.workspace}/.imagekit-frontend"}
# Run by an init container (the image, its user, the same restrictions) before the server: the
# claim is the whole home, so its directories are made here; a claim its user cannot write (storage
# that ignores fsGroup, such as many NFS provisioners) stops the pod with the reason, in its log.
WORKSPACE_INIT = f"""set -eu
cd {FRONTEND.workspace}
if ! (: > .imagekit-writable) 2>/dev/null; then
  echo "imagekit: the workspace claim at {FRONTEND.workspace} is not writable by uid $(id -u)." \\
    "Its storage ignores fsGroup: make the volume's root owned by uid $(id -u)" \\
    "(chown $(id -u):$(id -g) on the NFS export, or the provisioner's uid/gid options)" >&2
  exit 1
fi
rm -f .imagekit-writable
mkdir -p {" ".join(FRONTEND.workspace_dirs)}
"""


def frontend_manifests(
    entry: LockEntry, options: JobOptions, index: LockIndex | None = None
) -> list[dict[str, Any]]:
    """A front-end cell as a long-running service: Deployment (one replica, by digest, Pod Security
    'restricted', the secret from a Secret reference, never inline), a ClusterIP Service and,
    unless a claim is named, a PersistentVolumeClaim that holds the whole workspace (the home)."""
    frontend = entry.frontend
    assert frontend in FRONTEND_SECRETS
    name = dns_name(f"imagekit-{frontend}", entry.cell)
    metadata = object_metadata(name, entry, options, frontend)
    claim = options.workspace_claim or f"{name}-workspace"
    secret = options.secret or f"{name}-secret"
    variable, key = FRONTEND_SECRETS[frontend]
    port = FRONTEND.port(frontend)
    container = workload_container(frontend, entry, options, image_of(entry, index))
    container["env"].append({"name": variable, "value": f"{SECRET_DIR}/{key}"})
    container["env"].append({"name": "IMAGEKIT_STATE_DIR", "value": STATE_DIRS[frontend]})
    container["ports"] = [{"name": frontend, "containerPort": port}]
    # The claim is the whole workspace, which is the user's home and Jupyter's root directory:
    # notebooks, code/ data/ checkpoints/, ~/.cache (model downloads), ~/.local, shell history and
    # sshd's host keys all outlive the pod.
    workspace_mount = {"name": "workspace", "mountPath": FRONTEND.workspace}
    container["volumeMounts"] += [
        {"name": "secret", "mountPath": SECRET_DIR, "readOnly": True},
        workspace_mount,
    ]
    probe = {"exec": {"command": ["python3", f"{FRONTEND.files_dir}/healthcheck.py"]}, "timeoutSeconds": 10}
    container["readinessProbe"] = {**probe, "initialDelaySeconds": 10, "periodSeconds": 15}
    container["livenessProbe"] = {**probe, "initialDelaySeconds": 60, "periodSeconds": 30}
    volumes = [
        {"name": "secret", "secret": {"secretName": secret, "defaultMode": 0o440}},
        {"name": "workspace", "persistentVolumeClaim": {"claimName": claim}},
    ]
    pod = workload_pod(container, options, volumes, entry, index)
    pod["initContainers"] = [
        {
            "name": "workspace",
            "image": container["image"],
            "imagePullPolicy": "IfNotPresent",
            "args": ["sh", "-c", WORKSPACE_INIT],  # behind the image's entrypoint, as the server
            "resources": {  # what the server asks for, but no GPU
                kind: {r: v for r, v in amounts.items() if r in ("cpu", "memory")}
                for kind, amounts in container["resources"].items()
            },
            "securityContext": container_security(options.uid_mode),
            "volumeMounts": [workspace_mount],
        }
    ]
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
    taken = [("/dev/shm", "the shared-memory volume"), ("/tmp", "the pod's /tmp")]
    if frontend:
        taken.append((SECRET_DIR, "the front end's Secret"))
        taken.append((FRONTEND.workspace, "the workspace claim"))
    for claim in options.claims:
        mount = posixpath.normpath(claim.mount)
        for path, what in taken:
            if _overlap(mount, path):
                raise InputError(
                    f"--pvc {claim.name}:{claim.mount}: collides with {what} at {path}; mount it elsewhere"
                )
        taken.append((mount, f"the claim {claim.name}"))


class ManifestDumper(yaml.SafeDumper):
    """Every value written out in full: no YAML anchors and aliases where one dict is shared
    (the restricted securityContext, an affinity term), which readers of manifests rarely expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_jobs(published: Lock, options: JobOptions, frontends: Mapping[str, str | None]) -> dict[str, str]:
    """File name -> YAML, for every image entry (a Job, or a front end's workloads), each by its
    index's digest where it has one; raises before anything is written. ``frontends``: which
    front end each cell serves, from the matrix (the lock file is an editable record, never the
    word on what a cell is)."""
    check_dns_labels(
        (
            ("--runtime-class", options.runtime_class),
            ("--namespace", options.namespace),
            ("--secret", options.secret),
            ("--workspace-claim", options.workspace_claim),
        )
    )
    check_quantity("--workspace-size", options.workspace_size)
    check_gpu_resource(options)
    check_gpu_request(options)
    sizes(options)
    out: dict[str, str] = {}
    made_by: dict[str, str] = {}
    entries = published.images
    for cell in sorted(entries):
        frontend = frontends.get(cell)
        if frontend != entries[cell].frontend:
            raise InputError(
                f"{cell}: the lock file says front end {entries[cell].frontend or 'none'}, the matrix"
                f" {frontend or 'none'}; run `imagekit publish` again"
            )
        check_mounts(options, frontend is not None)
        if frontend == "ssh" and options.uid_mode == "scc":
            raise InputError(
                f"{cell}: --uid-mode scc runs the pod as a uid of the namespace's range, and the ssh"
                f" front end's sshd logs in only a user of the image's /etc/passwd (uid {RUN_AS}): grant"
                " its service account OpenShift's nonroot-v2 constraints and leave --uid-mode out, or"
                " leave the cell out with --only"
            )
        entry = entries[cell]
        index = published.index_of(cell)
        manifests = (
            frontend_manifests(entry, options, index) if frontend else [job_manifest(entry, options, index)]
        )
        name = manifests[0]["metadata"]["name"]
        manifests = claim_gpus(manifests, entry, options)  # with DRA, the claim template first
        text = yaml.dump_all(manifests, Dumper=ManifestDumper, sort_keys=False)
        if name in made_by:  # one object would silently replace the other in the cluster
            raise InputError(f"{made_by[name]} and {cell} would both be the Kubernetes object {name}")
        made_by[name] = cell
        out[f"{name}.yaml"] = text
    return out


def write_jobs(files: Mapping[str, str], out: Path) -> list[Path]:
    from imagekit.core.atomic import atomic_write_all

    paths = {out / name: text for name, text in files.items()}
    atomic_write_all(paths, out)
    return list(paths)
