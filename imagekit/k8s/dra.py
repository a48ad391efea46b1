"""GPUs claimed through Dynamic Resource Allocation (``--gpu-request dra``, Kubernetes 1.34+).

With the device plugin a pod asks for ``nvidia.com/gpu: N`` and is placed by node affinity on GPU
feature discovery's labels. With DRA (``resource.k8s.io/v1``, GA and on by default since 1.34) and
NVIDIA's DRA driver, each workload gets a ``ResourceClaimTemplate`` of its own: one request of
exactly ``--gpus`` devices of the driver's DeviceClass (``gpu.nvidia.com``; ``mig.nvidia.com``
for a MIG slice) with CEL selectors from the cell's fit (``imagekit.k8s.dra_cel``); the pod names
the template in ``spec.resourceClaims`` and the container the claim in ``resources.claims``. There
is no ``nvidia.com/gpu`` limit and no feature-discovery affinity: the scheduler allocates only
devices the selectors accept, to the exact compute capability and the full driver version.

The template is written into the same file as its workload, first (``kubectl apply -f`` creates
it before the pod that names it): one file is one cell's objects, as a front end's already are.

:func:`gpu_claim` is the builder other writers reuse (a ComputeDomain's workers): the template and
the pod's and container's fields, from the cell and the options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.k8s.dra_cel import fit_selectors, mig_profile_selector, product_selector
from imagekit.k8s.kueue import QUEUE_LABEL
from imagekit.k8s.mig import driver_profile
from imagekit.k8s.options import GPU_REQUESTS, GpuRequestKind, JobOptions
from imagekit.k8s.placement import ARCH_LABEL, entry_fit
from imagekit.report.lockfile import LockEntry

API_VERSION = "resource.k8s.io/v1"
GPU_CLASS = "gpu.nvidia.com"  # the DRA driver's DeviceClass of whole GPUs
MIG_CLASS = "mig.nvidia.com"  # ... and of MIG slices (deployments/helm/.../deviceclass-mig.yaml)
CLAIM = "gpu"  # the pod's name for its claim, which the container's resources.claims names
REQUEST = "gpu"  # the claim's one request
_MIG_PREFIX = "nvidia.com/mig-"


def parse_gpu_request(text: str) -> GpuRequestKind:
    for kind in GPU_REQUESTS:
        if text == kind:
            return kind
    raise InputError(f"--gpu-request {shown(text)}: use {' or '.join(GPU_REQUESTS)}")


def mig_profile(resource: str) -> str | None:
    """The DRA driver's profile name for a device plugin's MIG resource (``nvidia.com/mig-1g.10gb``
    -> ``1g.10gb``; the plugin's ``.me.all`` is go-nvlib's ``+me.all``: imagekit.k8s.mig), None
    for a whole GPU. A profile neither spells is passed on as given, for the selector to refuse."""
    if not resource.startswith(_MIG_PREFIX):
        return None
    profile = resource.removeprefix(_MIG_PREFIX)
    return driver_profile(profile) or profile


def check_gpu_request(options: JobOptions) -> None:
    """Refuse what a DRA claim cannot ask for, before anything is written."""
    if options.gpu_request == "dra" and options.gpu_resource == "nvidia.com/gpu.shared":
        raise InputError(
            "--gpu-resource nvidia.com/gpu.shared is the device plugin's time-sliced resource; with"
            " --gpu-request dra ask for nvidia.com/gpu (sharing under DRA is the claim's, not a name)"
        )


@dataclass(frozen=True)
class GpuClaim:
    """A workload's GPUs as DRA asks for them: the template, the pod's ``spec.resourceClaims`` and
    the GPU container's ``resources.claims``."""

    template: dict[str, Any]
    pod_claims: tuple[dict[str, str], ...]
    container_claims: tuple[dict[str, str], ...]


def device_request(entry: LockEntry, options: JobOptions, product_name: str | None = None) -> dict[str, Any]:
    """The one request: ``--gpus`` devices of the class, each accepted by every selector (the
    cell's fit unless ``--no-gpu-affinity``; the product for a validate-on Job; the MIG profile)."""
    profile = mig_profile(options.gpu_resource)
    selectors: list[str] = []
    if options.gpu_affinity:
        selectors += fit_selectors(entry_fit(entry), entry.cell)
    if product_name is not None:
        selectors.append(product_selector(product_name))
    if profile is not None:
        selectors.append(mig_profile_selector(profile))
    exactly: dict[str, Any] = {
        "deviceClassName": MIG_CLASS if profile is not None else GPU_CLASS,
        "count": options.gpus,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": REQUEST, "exactly": exactly}


def gpu_claim(
    name: str,
    entry: LockEntry,
    options: JobOptions,
    metadata: dict[str, Any],
    product_name: str | None = None,
) -> GpuClaim:
    """The claim of the workload ``name`` (its template is ``<name>-gpu``), labelled and placed in
    the namespace as ``metadata`` (the workload's) says."""
    template_name = f"{name}-gpu"
    template_metadata: dict[str, Any] = {
        "name": template_name,
        # the workload's labels but Kueue's queue: a template is not a workload Kueue admits
        "labels": {k: v for k, v in metadata.get("labels", {}).items() if k != QUEUE_LABEL},
        "annotations": dict(metadata.get("annotations", {})),
    }
    if "namespace" in metadata:
        template_metadata["namespace"] = metadata["namespace"]
    request = device_request(entry, options, product_name)
    template = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": template_metadata,
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }
    return GpuClaim(
        template,
        ({"name": CLAIM, "resourceClaimTemplateName": template_name},),
        ({"name": CLAIM},),
    )


def claim_gpus(
    manifests: list[dict[str, Any]],
    entry: LockEntry,
    options: JobOptions,
    product_name: str | None = None,
) -> list[dict[str, Any]]:
    """``manifests`` (a workload first: a Job or a Deployment), with its GPUs claimed through DRA
    where ``--gpu-request dra`` asks for GPUs: the template first, the pod wired to it. As they
    are otherwise."""
    if options.gpu_request != "dra" or not options.gpus:
        return manifests
    workload = manifests[0]
    claim = gpu_claim(workload["metadata"]["name"], entry, options, workload["metadata"], product_name)
    pod = workload["spec"]["template"]["spec"]
    pod["resourceClaims"] = [dict(c) for c in claim.pod_claims]
    pod["containers"][0]["resources"]["claims"] = [dict(c) for c in claim.container_claims]
    if options.gpu_affinity:
        _hold_to_the_cells_architecture(pod, entry)
    return [claim.template, *manifests]


def _hold_to_the_cells_architecture(pod: dict[str, Any], entry: LockEntry) -> None:
    """``kubernetes.io/arch`` of the cell's platform in the pod's nodeSelector. The device
    attributes name the GPU's architecture (Hopper), never the host CPU's, so the CPU is the
    kubelet's label (on every node, no feature discovery needed), as in the device-plugin
    affinity: also where the image pulled is an index of several platforms, the Job checks this
    cell's expectations, which are of its platform's wheels."""
    arch = entry_fit(entry).platform.arch
    selector = pod.setdefault("nodeSelector", {})
    if selector.setdefault(ARCH_LABEL, arch) != arch:
        raise InputError(
            f"--node-selector {ARCH_LABEL}={selector[ARCH_LABEL]}: {entry.cell} is a {arch} cell;"
            f" select {ARCH_LABEL}={arch}, leave it out, or narrow --only"
        )
