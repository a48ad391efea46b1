"""Compute-domain Jobs: one image across the nodes of a multi-node NVLink domain (GB200/GB300 racks).

``imagekit k8s --compute-domain N`` writes, for every selected cell whose image can run on such a
rack, one file holding three objects, all named after the Job:

- a ``ComputeDomain`` (``resource.nvidia.com/v1beta1``, NVIDIA's DRA driver): the driver starts an
  IMEX daemon on each node a pod of the Job lands on and creates the ResourceClaimTemplate named in
  ``spec.channel.resourceClaimTemplate`` (``<job>-channel``), whose claim gives a pod its IMEX
  channel (``/dev/nvidia-caps-imex-channels``): GPU memory shared over NVLink between nodes.
  ``numNodes: N``: deprecated since driver v0.4.0 (where it only decides when the domain's status
  says Ready), required by v25.x, and what the driver waits for with ``IMEXDaemonsWithDNSNames``
  off (tests/fixtures/crds/dra-driver-nvidia-gpu/NOTES.md);
- an Indexed Job of N pods (completions = parallelism = N), each claiming the channel and its GPUs,
  one pod per node (``numNodes`` counts nodes), all in one NVLink clique: required pod affinity on
  ``nvidia.com/gpu.clique`` (the label GPU feature discovery, or the driver's kubelet plugin, sets
  to ``<cluster UUID>.<clique id>``). The driver itself places a pod on any node with a channel
  device and makes one IMEX domain per clique, so pods in two racks would share no NVLink: its
  demos (demo/specs/imex, an MPIJob) leave placement to the cluster and its install guide's pod
  requires the label to exist; required affinity of a pod to pods it matches itself lets the first
  one schedule anywhere, and the rest follow it into its clique;
- a headless Service whose name is the pods' subdomain: pod i is ``<job>-i.<job>`` in the
  namespace, and the rendezvous env (``MASTER_ADDR`` is pod 0's name) is what the probe,
  torchrun (``PET_*``) and torch.distributed's ``env://`` read (:func:`rendezvous_env`).

Which cells: an image of the Grace hosts' platform (linux/arm64) whose torch has kernels for a rack
family's compute capability (GB200: 10.0, GB300: 10.3; ``imagekit/data/gpus.yaml``), as
``imagekit.plan.coverage`` decides it for ``plan --coverage``.

How a pod gets its GPUs is ``--gpu-request``'s, as for the single-node Jobs: the device plugin's
``--gpus`` of ``--gpu-resource``, or a DRA claim (``imagekit.k8s.dra``) whose template is written
beside the Job and whose selectors replace feature discovery's node affinity.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

import yaml

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_COMPUTE_DOMAIN_NODES
from imagekit.k8s.dra import check_gpu_request, gpu_claim
from imagekit.k8s.failure import job_spec
from imagekit.k8s.kueue import queued
from imagekit.k8s.manifests import (
    ManifestDumper,
    check_command,
    check_gpu_resource,
    dns_name,
    node_affinity,
    object_metadata,
    workload_container,
    workload_pod,
)
from imagekit.k8s.options import JobOptions
from imagekit.k8s.placement import entry_fit
from imagekit.k8s.resources import sizes
from imagekit.plan.coverage import families, family_machines
from imagekit.plan.gpu_fit import capability
from imagekit.probe import protocol
from imagekit.report.lockfile import Lock, LockEntry

API_VERSION = "resource.nvidia.com/v1beta1"
COMPONENT = "compute-domain"  # app.kubernetes.io/component of these objects
# The racks whose GPUs share NVLink across nodes (NVL72: 18 compute trays of 2 Grace-Blackwell
# superchips, 4 GPUs a tray); their capability and host machine are gpus.yaml's.
RACK_FAMILIES = ("GB200", "GB300")
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # <cluster UUID>.<clique id>: one NVLink domain
HOSTNAME_LABEL = "kubernetes.io/hostname"
CHANNEL_CLAIM = "channel"  # the pod's name for its claim of the domain's IMEX channel
# The Job controller writes each pod's index here (and in JOB_COMPLETION_INDEX, which a later env
# entry cannot refer to: it is added after the template's); the downward API reads it.
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
RENDEZVOUS_PORT = 29500  # torch.distributed's and torchrun's default MASTER_PORT
TORCHRUN_PREFIX = "PET_"  # torchrun reads its options from PET_<OPTION> (rendezvous_env)
RANK = "RANK"  # torch.distributed's env:// rank of the process
# A pod's hostname is `<job>-<index>`, a DNS label: the Job's name leaves room for the index.
NAME_CHARS = 63 - len(f"-{MAX_COMPUTE_DOMAIN_NODES - 1}")


@dataclass(frozen=True)
class GpuAttachment:
    """How each pod of the Job gets its GPUs: extended-resource limits (the device plugin), the
    pod's resource claims (DRA: claim name, ResourceClaimTemplate name), the objects those claims
    need written beside the Job, and whether node affinity on GPU feature discovery's labels still
    selects the nodes (a DRA claim's selectors do that instead)."""

    limits: tuple[tuple[str, int], ...] = ()
    claims: tuple[tuple[str, str], ...] = ()
    documents: tuple[dict[str, Any], ...] = ()
    feature_discovery: bool = True


def requested_gpus(
    name: str, entry: LockEntry, options: JobOptions, metadata: dict[str, Any], product_name: str | None
) -> GpuAttachment:
    """Each pod's GPUs as ``--gpu-request`` asks: ``--gpus`` of ``--gpu-resource`` from the device
    plugin (request == limit), or the DRA claim of the Job ``name`` (``product_name`` selected for a
    validate-on run), whose selectors stand in for feature discovery's affinity."""
    if options.gpu_request != "dra":
        return GpuAttachment(limits=((options.gpu_resource, options.gpus),))
    claim = gpu_claim(name, entry, options, metadata, product_name)
    return GpuAttachment(
        claims=tuple((c["name"], c["resourceClaimTemplateName"]) for c in claim.pod_claims),
        documents=(claim.template,),
        feature_discovery=False,
    )


@dataclass(frozen=True)
class ComputeDomainOptions:
    nodes: int  # pods of the Job, one a node, all in one NVLink domain

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_COMPUTE_DOMAIN_NODES:
            raise InputError(
                f"--compute-domain {self.nodes}: give 1 to {MAX_COMPUTE_DOMAIN_NODES} nodes (the nodes"
                f" of one NVLink domain: NVIDIA's DRA driver joins at most {MAX_COMPUTE_DOMAIN_NODES}"
                " into one IMEX domain, an NVL72 rack's compute trays)"
            )


def rack_families(entry: LockEntry) -> tuple[str, ...]:
    """The rack families whose GPUs ``entry``'s image has kernels for, on those racks' hosts (its
    fit: ``imagekit.plan.gpu_fit``, as for every placement)."""
    fit = entry_fit(entry)
    table = families()
    return tuple(
        family
        for family in RACK_FAMILIES
        if fit.platform.machine in family_machines(family) and fit.runs_on(capability(table[family]))
    )


def unfit_reason(entry: LockEntry) -> str | None:
    """Why ``entry``'s image cannot run on a GB200/GB300 rack, or None where it can."""
    if rack_families(entry):
        return None
    machines = sorted({m for family in RACK_FAMILIES for m in family_machines(family)})
    machine = platforms.get(entry.platform).machine
    if machine not in machines:
        return f"its image is {entry.platform}, the racks' Grace hosts are {', '.join(machines)}"
    wanted = ", ".join(f"{f} {families()[f]}" for f in RACK_FAMILIES)
    return f"its torch has no kernels for the racks' GPUs ({wanted})"


def job_name(cell: str) -> str:
    """The Job's name (and its ComputeDomain's and Service's), short enough for `<job>-<index>`."""
    name = dns_name("imagekit-domain", cell)
    if len(name) <= NAME_CHARS:
        return name
    tag = hashlib.sha256(cell.encode()).hexdigest()[:8]
    return f"{name[: NAME_CHARS - 9].rstrip('-')}-{tag}"


def channel_template(name: str) -> str:
    """The ResourceClaimTemplate the driver creates for the domain ``name``'s channel."""
    return f"{name}-{CHANNEL_CLAIM}"


def compute_domain(name: str, metadata: dict[str, Any], domain: ComputeDomainOptions) -> dict[str, Any]:
    spec = {"numNodes": domain.nodes, "channel": {"resourceClaimTemplate": {"name": channel_template(name)}}}
    return {"apiVersion": API_VERSION, "kind": "ComputeDomain", "metadata": metadata, "spec": spec}


def rendezvous_env(name: str, domain: ComputeDomainOptions, gpus: int) -> list[dict[str, Any]]:
    """The rendezvous under the name each launcher reads it by; pod 0 is the master, a pod's node
    rank its completion index:

    - the probe's nccl check (imagekit.probe.rendezvous): MASTER_ADDR, MASTER_PORT, NNODES,
      NODE_RANK, NPROC_PER_NODE, unprefixed;
    - torchrun: the same with ``PET_`` (torch/distributed/argparse_util.py's ``env`` action reads
      ``PET_<DEST>`` for --nnodes, --node-rank, --nproc-per-node, --master-addr, --master-port of
      torch/distributed/run.py), so a bare ``torchrun train.py`` joins; it gives each worker its
      own RANK and WORLD_SIZE;
    - torch.distributed's ``env://`` in the pod's own process: MASTER_ADDR, MASTER_PORT,
      WORLD_SIZE and RANK. Only when a pod is one process (one GPU) is that process's rank the
      pod's: then WORLD_SIZE (the pods) and RANK (the node rank) both; with more GPUs a pod runs a
      process a GPU and its launcher numbers them, so neither (a WORLD_SIZE with no RANK, or a
      RANK of the pod, would be a world no process can join)."""
    index = {"valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}
    values: dict[str, dict[str, Any]] = {
        protocol.MASTER_ADDR: {"value": f"{name}-0.{name}"},  # pod 0 in the Service's subdomain
        protocol.MASTER_PORT: {"value": str(RENDEZVOUS_PORT)},
        protocol.NNODES: {"value": str(domain.nodes)},
        protocol.NPROC_PER_NODE: {"value": str(gpus)},
        protocol.NODE_RANK: index,
    }
    torchrun = {f"{TORCHRUN_PREFIX}{key}": value for key, value in values.items()}
    one_process: dict[str, dict[str, Any]] = (
        {protocol.WORLD_SIZE: {"value": str(domain.nodes)}, RANK: index} if gpus == 1 else {}
    )
    # each entry's objects its own: a shared one would be written as a YAML alias
    return [
        {"name": key, **copy.deepcopy(value)} for key, value in {**values, **torchrun, **one_process}.items()
    ]


def placement(entry: LockEntry, options: JobOptions, name: str, gpus: GpuAttachment) -> dict[str, Any]:
    """Nodes in an NVLink clique (and, with feature discovery, of GPUs the cell serves); all pods
    in one clique; one pod a node."""
    clique = {"key": CLIQUE_LABEL, "operator": "Exists"}
    affinity = node_affinity(entry, options) if gpus.feature_discovery else None
    if affinity is None:
        terms: list[dict[str, Any]] = [{"matchExpressions": [clique]}]
    else:
        required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        terms = required["nodeSelectorTerms"]
        for term in terms:
            term["matchExpressions"].append(clique)
    pods = {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "imagekit", "job": name}}}
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}},
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**pods, "topologyKey": CLIQUE_LABEL}]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**pods, "topologyKey": HOSTNAME_LABEL}]
        },
    }


@dataclass(frozen=True)
class DomainRun:
    """What a domain's Job is called and runs: by default the cell's checks under its own name; a
    validate-on run names the product its pods are pinned to."""

    name: str
    args: tuple[str, ...]
    component: str = COMPONENT
    product: str | None = None  # feature discovery's label of the product
    product_name: str | None = None  # with --gpu-request dra: the productName its claim selects


def domain_manifests(
    entry: LockEntry,
    options: JobOptions,
    domain: ComputeDomainOptions,
    run: DomainRun | None = None,
) -> list[dict[str, Any]]:
    """The ComputeDomain, the GPUs' own objects, the Service and the Job for ``entry``; each pod
    runs ``--command``, else the image's check script, unless ``run`` says otherwise."""
    probe = run is not None or not options.command
    run = run or DomainRun(job_name(entry.cell), tuple(options.command or check_command(entry, options.gpus)))
    name, args = run.name, list(run.args)
    metadata = object_metadata(name, entry, options, run.component)
    if run.product is not None:
        metadata["annotations"][naming.annotation("gpu-product")] = run.product
    gpus = requested_gpus(name, entry, options, metadata, run.product_name)
    # the GPUs are the attachment's: the container gets no device-plugin limit of its own
    container = workload_container("check", entry, options, entry.reference, gpu_limits=False)
    for resource, count in gpus.limits:
        container["resources"]["limits"][resource] = container["resources"]["requests"][resource] = count
    claims = ((CHANNEL_CLAIM, channel_template(name)), *gpus.claims)
    container["resources"]["claims"] = [{"name": claim} for claim, _ in claims]
    container["env"] += [{"name": "HOME", "value": "/tmp"}, *rendezvous_env(name, domain, options.gpus)]
    container["args"] = args  # `args`, never `command`: the image's ENTRYPOINT runs first
    container["ports"] = [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}]
    # index None: the image by its own digest, held to its platform's nodes (the Grace hosts)
    pod = workload_pod(container, options, [], entry, None)
    pod.pop("affinity", None)
    pod.update(
        restartPolicy="Never",
        subdomain=name,
        affinity=placement(entry, options, name, gpus),
        resourceClaims=[{"name": claim, "resourceClaimTemplateName": template} for claim, template in claims],
    )
    labels = dict(metadata["labels"])
    spec = job_spec(
        {"metadata": {"labels": labels}, "spec": pod},
        backoff_limit=options.backoff_limit,
        deadline_s=options.deadline_s,
        ttl_s=options.ttl_s,
        # the probe: imagekit's check script or a validate-on run's, never --command
        probe=probe,
        pods=domain.nodes,
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",  # headless: a DNS name per pod, no proxying
            "publishNotReadyAddresses": True,  # pod 0 is named before it is Ready, as peers dial it
            "selector": {"app.kubernetes.io/name": "imagekit", "job": name},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": "rendezvous"}],
        },
    }
    # with --queue, admitted as one gang in one clique or not at all (k8s.kueue)
    job = queued(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec},
        options.queue,
        CLIQUE_LABEL,
    )
    return [compute_domain(name, metadata, domain), *gpus.documents, service, job]


def check_options(options: JobOptions) -> None:
    """Refuse options a compute-domain Job cannot carry, before anything is written."""
    if options.gpus < 1:
        raise InputError(
            "--compute-domain runs on the racks' GPUs: give --gpus 1 or more (4 is a whole tray)"
        )
    if options.gpu_resource != "nvidia.com/gpu":
        raise InputError(
            f"--gpu-resource {options.gpu_resource}: --compute-domain shares whole GPUs over NVLink;"
            " leave --gpu-resource out (nvidia.com/gpu)"
        )
    check_gpu_resource(options)
    check_gpu_request(options)
    sizes(options)


@dataclass(frozen=True)
class Rendered:
    files: dict[str, str]  # file name -> the domain's objects, one YAML stream
    left_out: tuple[str, ...]  # one line per selected cell without a domain Job, and why


def render_domains(
    published: Lock,
    options: JobOptions,
    domain: ComputeDomainOptions,
) -> Rendered:
    """One compute-domain file per selected cell that runs on the racks; raises before anything is
    written where none does (naming the reason for one cell alone)."""
    check_options(options)
    files: dict[str, str] = {}
    left_out: list[str] = []
    for cell in sorted(published.images):
        entry = published.images[cell]
        reason = unfit_reason(entry)
        if reason is not None:
            left_out.append(f"{cell}: {reason}")
            continue
        manifests = domain_manifests(entry, options, domain)
        files[f"{job_name(cell)}.yaml"] = yaml.dump_all(manifests, Dumper=ManifestDumper, sort_keys=False)
    if not files:
        if len(left_out) == 1:
            raise InputError(
                f"--compute-domain: {left_out[0]}; select a linux/arm64 cell built for GB200/GB300"
            )
        raise InputError(
            f"--compute-domain: none of the {len(left_out)} selected cells runs on GB200/GB300 racks"
            " (linux/arm64 with kernels for compute capability 10.x); select one with --only"
        )
    return Rendered(files, tuple(left_out))
