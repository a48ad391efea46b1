"""Pre-pull DaemonSets: every published digest pulled onto the GPU nodes before a workload needs it.

``imagekit k8s --prepull`` writes, next to the Jobs, one DaemonSet (``apps/v1``) per architecture
of the selected cells, ``prepull-<arch>.yaml``. Its pod holds one init container per image,
``REPO@DIGEST`` with ``imagePullPolicy: IfNotPresent``, which exits at once: the kubelet pulls an
init container's image before it starts it, one container after the other, so the pod is Running
once every image is on the node. A cell published as a platform of an image index is pulled by the
index's digest (``manifests.image_of``, what its Job and Deployment pull), on the DaemonSet of the
cell's own architecture: the node's runtime resolves the index to that platform's image, and a
node never pulls the images of another architecture. The same image for several cells is pulled
once.

Where it runs: the nodes of its architecture (``kubernetes.io/arch``) that ``--node-selector``
selects and, with ``--gpu-affinity`` (the default), that GPU feature discovery labelled with a
compute capability: the nodes a Job of these cells could land on. One pod template serves every
image, so the per-cell affinity of the Jobs (compute capability, driver floor) is not applied: an
image pulled onto a GPU its kernels do not serve costs disk, never a failed workload. No GPU is
requested (pulling needs none, and a request would keep the pod off a node whose GPUs are busy),
which also means no toleration is added for it by the ExtendedResourceToleration admission
plugin: the ``nvidia.com/gpu`` taint is tolerated here by default, with ``--toleration``'s.

Why the images stay: the init containers' exited containers are kept while the pod exists, and the
kubelet's image garbage collection leaves alone the images of the containers it knows (from
memory of the kubelet's image GC manager, not re-read here). The bound on images per node
(``limits.MAX_PREPULL_IMAGES``) follows from that: the disk they take cannot be reclaimed.
"""

from __future__ import annotations

from typing import Any

import yaml

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_PREPULL_IMAGES
from imagekit.core.text import shown
from imagekit.k8s.manifests import ManifestDumper, dns_name, image_of, render_jobs
from imagekit.k8s.options import JobOptions, Toleration
from imagekit.k8s.placement import ARCH_LABEL, COMPUTE_MAJOR
from imagekit.k8s.security import container_security, pod_security
from imagekit.report.lockfile import Lock

COMPONENT = "prepull"  # app.kubernetes.io/component: `kubectl get ds -l app.kubernetes.io/component=prepull`
# Every imagekit image runs its check script with `python3` (manifests.check_command, verification):
# it is the one program each of them is known to have. A shell or `true` is not: a distroless
# image has neither. `command`, not `args`: the image's entrypoint (NGC's CUDA compatibility setup,
# a front end's server) has no business in a pull. -I -S: no environment, no site-packages and
# their .pth hooks, so nothing of the image's Python code runs; it starts in milliseconds.
PULLED = ["python3", "-I", "-S", "-c", ""]
# The pod's one long-lived container, run from the last image pulled (already on the node: no
# pause image, which an offline cluster's registry may not hold). It waits for SIGTERM and exits
# 0 on it: as PID 1, a process without a handler would ignore SIGTERM and be killed only after the
# grace period.
SLEEP = [
    *PULLED[:-1],
    "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()",
]
# What a Python interpreter that imports nothing takes (about 10 MB resident, a few ms of CPU);
# the limit leaves room for the probe's second interpreter beside the sleeping one.
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
# A new set of digests rolls over a fifth of the nodes at a time: each pulls several GB, and a
# whole pool pulling at once would load the registry (and its egress) for no gain in time.
MAX_UNAVAILABLE = "20%"
# The NVIDIA container runtime (often the GPU nodes' default) hands a container every GPU of the
# node when its environment says NVIDIA_VISIBLE_DEVICES=all, as nvidia/cuda images do, outside the
# device plugin's accounting; "void" makes it behave as runc (the NVIDIA container toolkit's
# documented values), whatever the image sets.
NO_GPU = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
# The container is alive and ready while its interpreter runs; a probe every 5 minutes is one
# short-lived `python3` (policy scanners require both probes on a long-running workload).
PROBE = {"exec": {"command": PULLED}, "periodSeconds": 300, "timeoutSeconds": 10}


def daemonset_name(arch: str) -> str:
    return dns_name("imagekit-prepull", arch)


def file_name(arch: str) -> str:
    return f"prepull-{arch}.yaml"


def images_by_arch(published: Lock) -> dict[str, dict[str, str]]:
    """arch -> image reference -> the first cell (sorted) it is pulled for; every reference by digest."""
    out: dict[str, dict[str, str]] = {}
    for cell in sorted(published.images):
        entry = published.images[cell]
        index = published.index_of(cell)
        for what, digest in (("image", entry.digest), ("index", index.digest if index else None)):
            if digest is not None and not naming.DIGEST.fullmatch(digest):
                raise InputError(
                    f"{cell}: the lock file names its {what} by {shown(digest)}, not a sha256 digest;"
                    " run `imagekit publish` again"
                )
        image = image_of(entry, index)
        if not naming.is_reference(image):
            raise InputError(
                f"{cell}: {shown(image)} is not an image reference; run `imagekit publish` again"
            )
        out.setdefault(platforms.get(entry.platform).arch, {}).setdefault(image, cell)
    for arch, images in out.items():
        if len(images) > MAX_PREPULL_IMAGES:
            raise InputError(
                f"--prepull: {len(images)} images for {arch} nodes, more than {MAX_PREPULL_IMAGES}: a node"
                " keeps every one on disk while the DaemonSet runs; narrow --only"
            )
    return out


def _pull_containers(images: dict[str, str], options: JobOptions) -> list[dict[str, Any]]:
    made_by: dict[str, str] = {}
    containers: list[dict[str, Any]] = []
    for image, cell in images.items():
        name = dns_name("pull", cell)
        if name in made_by:  # Kubernetes refuses a pod with two containers of one name
            raise InputError(f"{made_by[name]} and {cell} would both be the init container {name}")
        made_by[name] = cell
        containers.append(
            {
                "name": name,
                "image": image,
                "imagePullPolicy": "IfNotPresent",  # by digest, a cached copy is the same image
                "command": PULLED,
                "env": NO_GPU,
                "resources": RESOURCES,
                "securityContext": container_security(options.uid_mode),
            }
        )
    return containers


def _node_selector(arch: str, options: JobOptions) -> dict[str, str]:
    selector = dict(options.node_selector)
    if selector.setdefault(ARCH_LABEL, arch) != arch:
        raise InputError(
            f"--node-selector {ARCH_LABEL}={selector[ARCH_LABEL]}: the selected cells include {arch}"
            f" images; narrow --only to the cells of {selector[ARCH_LABEL]}, or leave it out"
        )
    return selector


def tolerations(options: JobOptions) -> list[dict[str, str]]:
    """``--toleration``'s, and the GPU taint's (no GPU request brings it, see the module's doc)."""
    gpu = Toleration.parse("gpu")
    chosen = [*options.tolerations, *(() if gpu in options.tolerations else (gpu,))]
    return [t.as_json() for t in chosen]


def daemonset(arch: str, images: dict[str, str], options: JobOptions) -> dict[str, Any]:
    """The DaemonSet that pulls ``images`` (reference -> cell) onto the ``arch`` GPU nodes."""
    name = daemonset_name(arch)
    labels = {"app.kubernetes.io/name": "imagekit", "app.kubernetes.io/component": COMPONENT, "job": name}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if options.namespace:
        metadata["namespace"] = options.namespace
    pulls = _pull_containers(images, options)
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,  # it never talks to the Kubernetes API
        "securityContext": pod_security(options.uid_mode),
        "initContainers": pulls,
        "containers": [
            {
                **pulls[-1],
                "name": "pulled",
                "command": SLEEP,
                "livenessProbe": PROBE,
                "readinessProbe": PROBE,
            }
        ],
        "nodeSelector": _node_selector(arch, options),
        "tolerations": tolerations(options),
        "terminationGracePeriodSeconds": 5,  # SLEEP exits at once on SIGTERM
    }
    # No runtimeClassName: the pull is the node's image service's, whatever the runtime, and this
    # pod needs no GPU runtime (see NO_GPU).
    if options.gpu_affinity:
        gpu_nodes = {"matchExpressions": [{"key": COMPUTE_MAJOR, "operator": "Exists"}]}
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [gpu_nodes]}
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "imagekit", "job": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": MAX_UNAVAILABLE}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def render_prepull(published: Lock, options: JobOptions) -> dict[str, str]:
    """File name -> YAML: one DaemonSet per architecture of ``published``'s cells; raises before
    anything is written (the caller writes these with the Jobs, all or none)."""
    render_jobs(Lock(), options, {})  # the flags checked as for the Jobs (--namespace, ...)
    return {
        file_name(arch): yaml.dump(daemonset(arch, images, options), Dumper=ManifestDumper, sort_keys=False)
        for arch, images in sorted(images_by_arch(published).items())
    }
