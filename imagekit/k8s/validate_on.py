"""Validate-on Jobs: each published image's own probe, run on each GPU product of a cluster.

``imagekit k8s --validate-on PRODUCT`` writes, for every selected cell and every product, one Job
pinned to that product (GPU feature discovery's ``nvidia.com/gpu.product`` node label; with
``--gpu-request dra``, a claim whose CEL selects the DRA driver's ``productName``) that runs
``/opt/imagekit/check.py`` with the GPU required, as ``imagekit verify`` runs it; and a plan
(``validate-on.plan``) that names each Job's cell, product and digest, which ``imagekit
k8s-results`` reads back with the Jobs' outputs (``imagekit.k8s.results``).

Where each Job runs:

- the product's nodes, and nodes of the cell's architecture: a product's hosts are of one machine
  (``gpus.yaml``: GH200, GB200 and GB300 sit in aarch64 Grace hosts; a product it does not name is
  taken to sit in x86_64 hosts unless ``PRODUCT:arm64`` says otherwise). A cell of another
  platform gets no Job for that product (its image could not run there);
- the image by its own manifest digest, not the index it may be a platform of: the record then
  names exactly the manifest that ran (an index pulled on a node of that architecture resolves to
  the same manifest);
- no node affinity from the cell (compute capability, driver floor): pinned to one product, a Job
  that could not pass would otherwise wait unscheduled forever, while the probe's arch and driver
  checks say why the image does not serve that product, which is the finding to record.

The pod is the restricted one every imagekit workload is (``imagekit.k8s.security``): uid 10001 (with
``--uid-mode scc``, the one OpenShift assigns), no capability, a read-only root with /tmp and /dev/shm
as emptyDirs, sized for the probe (``imagekit.k8s.resources``), and its Job ends at the probe's
verdict but survives a disruption (``imagekit.k8s.failure``). ``imagekit verify`` runs the
probe as the image's user (root in a plain image) without capabilities; the probe needs neither
root nor a user of its own (tests/slow/probe/test_run_nonroot.py runs it as uid 65534 and as a uid no
/etc/passwd names), and the NVIDIA runtime makes the GPU device nodes usable by any user.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any

import yaml

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_COMPUTE_DOMAIN_NODES, MAX_GPUS, MAX_RECORDS
from imagekit.core.platforms import PlatformName
from imagekit.core.safetypes import (
    RECORD_CONFIG,
    CellId,
    Expectation,
    ExpectationName,
    ImageDigest,
    ImageReference,
    Items,
    Number,
    ShortText,
    parse_json_object,
    validate_json,
)
from imagekit.core.text import shown
from imagekit.k8s.compute_domain import NAME_CHARS as DOMAIN_NAME_CHARS
from imagekit.k8s.dra import check_gpu_request, claim_gpus
from imagekit.k8s.dra_cel import checked_product_name
from imagekit.k8s.failure import job_spec
from imagekit.k8s.kueue import queued
from imagekit.k8s.manifests import (
    ManifestDumper,
    check_gpu_resource,
    dns_name,
    object_metadata,
    workload_container,
    workload_pod,
)
from imagekit.k8s.mig import PLUGIN_PROFILE_PATTERN
from imagekit.k8s.options import LABEL_VALUE, JobOptions, check_dns_labels
from imagekit.k8s.placement import ARCH_LABEL
from imagekit.k8s.resources import sizes
from imagekit.render.contract import CHECK_SCRIPT_PATH
from imagekit.report.lockfile import Lock, LockEntry, LockIndex
from imagekit.report.verification import DnsLabel, GpuProduct
from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import check_arguments

PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's, on every GPU node
COMPONENT = "validate-on"  # app.kubernetes.io/component of these Jobs: `kubectl get jobs -l ...`
PLAN_NAME = "validate-on.plan"  # not .yaml/.json: `kubectl apply -f DIR` would take it for a manifest
PLAN_VERSION = 1
# Suffixes GPU feature discovery adds to a product: time-slicing's "-SHARED", and the MIG
# profile under the single strategy ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "...-MIG-1g.10gb.me.all":
# the device plugin's spelling, imagekit.k8s.mig). The GPU is the same.
_PRODUCT_SUFFIX = re.compile(rf"(-MIG-{PLUGIN_PROFILE_PATTERN})?(-SHARED)?$")


def product_base(product: str) -> str:
    """The GPU a product label names, without the sharing and MIG suffixes."""
    return _PRODUCT_SUFFIX.sub("", product)


def label_form(device_name: str) -> str:
    """A driver's device name as feature discovery labels it: its spaces as '-'."""
    return "-".join(device_name.split())


def _product_machines() -> dict[str, str]:
    """Product label -> the machine of its hosts, for the products gpus.yaml says come in one."""
    from imagekit.facts.probe_tables import load_gpus

    products: Mapping[str, Any] = load_gpus()["gemm_floors"]["products"]
    return {
        label_form(name): str(facts["machine"]) for name, facts in products.items() if facts.get("machine")
    }


@dataclass(frozen=True)
class Product:
    """One ``--validate-on`` value: the product label and the machine (uname -m) of its hosts;
    with DRA also the name the driver publishes (productName), of which the label is the form."""

    label: str
    machine: str
    product_name: str | None = None  # --gpu-request dra: NVML's name, which the claim selects

    @classmethod
    def parse(cls, text: str, dra: bool = False) -> Product:
        """``PRODUCT`` or ``PRODUCT:ARCH`` (amd64, arm64) for a product gpus.yaml does not place;
        with ``dra``, PRODUCT is the productName the DRA driver publishes (NVIDIA H100 80GB HBM3)."""
        name, sep, arch = text.partition(":")
        label = label_form(checked_product_name(name)) if dra else name
        if not LABEL_VALUE.fullmatch(label) or len(label) > 63:
            raise InputError(
                f"--validate-on {shown(text)}: not a {PRODUCT_LABEL} label value (like NVIDIA-H100-80GB-HBM3;"
                " `kubectl get nodes -L nvidia.com/gpu.product` lists a cluster's)"
            )
        known = _product_machines().get(product_base(label))
        product_name = name if dra else None
        if not sep:
            return cls(label, known or platforms.get(platforms.DEFAULT).machine, product_name)
        given = platforms.of_machine(arch) if arch in ("amd64", "arm64") else None
        if given is None:
            raise InputError(f"--validate-on {shown(text)}: the part after ':' is amd64 or arm64")
        if known is not None and known != given.machine:
            raise InputError(f"--validate-on {shown(text)}: {label}'s hosts are {known} (gpus.yaml)")
        return cls(label, given.machine, product_name)


def parse_products(texts: Sequence[str], dra: bool = False) -> tuple[Product, ...]:
    products = tuple(Product.parse(t, dra) for t in texts)
    labels = [p.label for p in products]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise InputError(f"--validate-on {twice[0]}: given twice")
    return products


# -- the plan: what each Job is, for reading its output back ---------------------------------------


@dataclass(frozen=True)
class PlannedJob:
    """One validate-on Job: the cell, the product it is pinned to and the image it pulls. The
    expectations are the probe's arguments, so that an output can be told to be this Job's."""

    __pydantic_config__ = RECORD_CONFIG

    job: DnsLabel
    cell: CellId
    product: GpuProduct
    platform: PlatformName
    image: ImageReference  # repository@digest: what the Job pulls
    digest: ImageDigest
    image_id: ImageDigest  # the image's config digest: the report's record must be of this image
    host_machine: ShortText  # uname -m of the product's hosts (x86_64, aarch64)
    gpus: Annotated[int, Number(1, MAX_GPUS, integer=True)]
    expect: Mapping[ExpectationName, Expectation] = field(default_factory=dict)
    index_digest: ImageDigest | None = None
    namespace: DnsLabel | None = None
    # --compute-domain: the Job's pods (one a node, one NVLink domain); None: one pod
    nodes: Annotated[int, Number(1, MAX_COMPUTE_DOMAIN_NODES, integer=True)] | None = None


def planned_job(
    name: str,
    entry: LockEntry,
    product: Product,
    options: JobOptions,
    index: LockIndex | None,
    nodes: int | None,
) -> PlannedJob:
    """The plan's record of the Job ``name`` running ``entry``'s probe on ``product``."""
    return PlannedJob(
        job=name,
        cell=entry.cell,
        product=product.label,
        platform=entry.platform,
        image=entry.reference,
        digest=entry.digest,
        image_id=entry.image_id,
        host_machine=product.machine,
        gpus=options.gpus,
        expect=dict(entry.expect),
        index_digest=index.digest if index is not None else None,
        namespace=options.namespace,
        nodes=nodes,
    )


@dataclass(frozen=True)
class Plan:
    __pydantic_config__ = RECORD_CONFIG

    jobs: Annotated[tuple[PlannedJob, ...], Items(MAX_RECORDS)]

    def as_json(self) -> dict[str, Any]:
        jobs = [{**asdict(j), "expect": dict(j.expect)} for j in self.jobs]
        return {"version": PLAN_VERSION, "jobs": jobs}

    def by_job(self) -> dict[str, PlannedJob]:
        return {j.job: j for j in self.jobs}


def parse_plan(raw: bytes, source: str) -> Plan:
    """A plan file's bytes, every field checked (one InputError naming the file and the field)."""
    fix = "write the Jobs again with `imagekit k8s --validate-on`"
    data = parse_json_object(raw, source, "validate-on plan", fix, version=PLAN_VERSION)
    del data["version"]
    plan = validate_json(Plan, json.dumps(data), source, fix)
    machines = {p.machine for p in platforms.PLATFORMS.values()}
    for job in plan.jobs:
        if job.host_machine not in machines:
            raise InputError(
                f"{source}: {job.job}: host_machine {shown(job.host_machine)} is no machine; {fix}"
            )
        _check_identity(job, source, fix)
    if len(plan.by_job()) != len(plan.jobs):
        raise InputError(f"{source}: a Job is named twice; {fix}")
    return plan


def _check_identity(job: PlannedJob, source: str, fix: str) -> None:
    """An entry is the Job its name was made for: the name carries the cell, the product and the
    digest (``job_name``), the image pulls that digest. An edited digest would credit another
    image with the Job's run."""
    made_for = job_name(job.cell, job.product, job.digest, DOMAIN_NAME_CHARS if job.nodes else 63)
    if job.job != made_for:
        raise InputError(
            f"{source}: {job.job}: the entry names {job.cell} on {job.product} at {job.digest}, but"
            f" the Job's name carries another digest, cell or product (for this one it is {made_for});"
            f" {fix}"
        )
    if not job.image.endswith(f"@{job.digest}"):
        raise InputError(f"{source}: {job.job}: its image {job.image} is not its digest {job.digest}; {fix}")


# -- the Jobs --------------------------------------------------------------------------------------


def job_name(cell: str, product: str, digest: str, chars: int = 63) -> str:
    """The Job's name: readable where it fits, and distinct per cell, product AND digest (a Job's
    pod template cannot change: the next image's Job is a new object, not a failed `apply`);
    ``chars`` at most (a compute domain's Job leaves room for its pods' index)."""
    tag = hashlib.sha256(f"{cell}\0{product}\0{digest}".encode()).hexdigest()[:8]
    return f"{dns_name('imagekit-validate', f'{product}-{cell}')[: chars - 9].rstrip('-')}-{tag}"


def probe_arguments(entry: LockEntry, gpus: int, host_machine: str) -> list[str]:
    """The probe as verification runs it (the image's expectations, the GPU required), told the
    machine of the node it runs on so that it records whether it ran emulated."""
    labels = {naming.label(k): v for k, v in entry.expect.items()}
    request = GpuRequest(str(gpus), gpus)
    script = entry.check_script or CHECK_SCRIPT_PATH
    return ["python3", script, *check_arguments(labels, request, host_machine)]


def product_selector(product: Product, options: JobOptions) -> tuple[tuple[str, str], ...]:
    """The node selector that pins a Job to ``product``: feature discovery's label; none with
    ``--gpu-request dra``, whose claim selects the productName instead (which it must then know)."""
    if options.gpu_request != "dra":
        return ((PRODUCT_LABEL, product.label),)
    if product.product_name is None:
        raise InputError(f"--validate-on {product.label}: with --gpu-request dra, name the productName")
    return ()


def validate_job(entry: LockEntry, product: Product, options: JobOptions) -> dict[str, Any]:
    """The Job that runs ``entry``'s probe on a node of ``product``."""
    name = job_name(entry.cell, product.label, entry.digest)
    selector = (*options.node_selector, *product_selector(product, options))
    pinned = replace(options, node_selector=selector, gpu_affinity=False)
    metadata = object_metadata(name, entry, pinned, COMPONENT)
    metadata["annotations"][naming.annotation("gpu-product")] = product.label
    container = workload_container("check", entry, pinned, entry.reference)
    container["env"].append({"name": "HOME", "value": "/tmp"})  # as verification runs it
    # `args`, never `command`: the image's ENTRYPOINT runs first, as in verification
    container["args"] = probe_arguments(entry, options.gpus, product.machine)
    # index None: the cell's own manifest, and kubernetes.io/arch from its platform
    pod = {"restartPolicy": "Never", **workload_pod(container, pinned, [], entry, None)}
    spec = job_spec(
        {"metadata": {"labels": dict(metadata["labels"])}, "spec": pod},
        backoff_limit=options.backoff_limit,
        deadline_s=options.deadline_s,
        ttl_s=options.ttl_s,
        probe=True,
    )
    return queued(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}, options.queue
    )


def _claimed(
    manifest: dict[str, Any], entry: LockEntry, product: Product, options: JobOptions
) -> list[dict[str, Any]]:
    """The Job, and with DRA its claim template first: the product's productName selected, no
    selector from the cell (as no affinity from it: the probe's findings say why it cannot run)."""
    return claim_gpus([manifest], entry, replace(options, gpu_affinity=False), product.product_name)


def check_options(options: JobOptions) -> None:
    """Refuse options a validate-on Job cannot carry, before anything is written."""
    check_dns_labels((("--runtime-class", options.runtime_class), ("--namespace", options.namespace)))
    if options.gpus < 1:
        raise InputError("--validate-on runs the probe with the GPU required: give --gpus 1 or more")
    if options.command:
        raise InputError("--validate-on runs the image's probe: leave --command out")
    if options.claims:
        raise InputError("--validate-on runs the image's probe, which reads no claim: leave --pvc out")
    if any(key in (PRODUCT_LABEL, ARCH_LABEL) for key, _ in options.node_selector):
        raise InputError(
            f"--node-selector {PRODUCT_LABEL} / {ARCH_LABEL}: --validate-on sets both from each product"
        )
    check_gpu_resource(options)
    check_gpu_request(options)
    sizes(options)


@dataclass(frozen=True)
class Rendered:
    files: dict[str, str]  # file name -> text: one Job each, and the plan
    plan: Plan
    left_out: tuple[str, ...]  # one line per cell and product without a Job, and why


def render_validation(published: Lock, options: JobOptions, products: Sequence[Product]) -> Rendered:
    """One Job per selected cell and product its platform can run on, and the plan naming them;
    raises before anything is written."""
    check_options(options)
    if not products:
        raise InputError("--validate-on: name at least one GPU product")
    files: dict[str, str] = {}
    jobs: list[PlannedJob] = []
    left_out: list[str] = []
    for cell in sorted(published.images):
        entry = published.images[cell]
        machine = platforms.get(entry.platform).machine
        index = published.index_of(cell)
        for product in products:
            if product.machine != machine:
                left_out.append(
                    f"{cell} ({entry.platform}) on {product.label}: its hosts are {product.machine}"
                )
                continue
            manifest = validate_job(entry, product, options)
            name = manifest["metadata"]["name"]
            documents = _claimed(manifest, entry, product, options)
            files[f"{name}.yaml"] = yaml.dump_all(documents, Dumper=ManifestDumper, sort_keys=False)
            jobs.append(planned_job(name, entry, product, options, index, None))
    if not jobs:
        raise InputError(
            "--validate-on: no selected cell runs on the hosts of "
            + ", ".join(f"{p.label} ({p.machine})" for p in products)
        )
    plan = Plan(tuple(jobs))
    files[PLAN_NAME] = json.dumps(plan.as_json(), indent=2, sort_keys=True) + "\n"
    return Rendered(files, plan, tuple(left_out))
