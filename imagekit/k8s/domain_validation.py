"""``imagekit k8s --validate-on PRODUCT --compute-domain N``: the image's probe on N nodes of a product
at once, its nccl check across all of them.

For each selected cell that runs on GB200/GB300 racks (``imagekit.k8s.compute_domain``) and each
product whose hosts are of its machine: the compute domain's objects (ComputeDomain, Service,
Indexed Job), the pods pinned to the product as a validate-on Job's are (``imagekit.k8s.validate_on``)
and running the probe as it does, with the rendezvous variables that turn the probe's nccl check
into one all-reduce across every pod's GPUs (``imagekit/probe/rendezvous.py``). The plan names each
Job with its node count; ``imagekit k8s-results`` reads one pod's output per Job (``kubectl logs
job/NAME``): each pod's probe reports the whole domain's collective from its own ranks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace

import yaml

from imagekit.core import platforms
from imagekit.core.errors import InputError
from imagekit.k8s import compute_domain, validate_on
from imagekit.k8s.compute_domain import ComputeDomainOptions, DomainRun
from imagekit.k8s.manifests import ManifestDumper
from imagekit.k8s.options import JobOptions
from imagekit.k8s.validate_on import PLAN_NAME, Plan, PlannedJob, Product, Rendered
from imagekit.report.lockfile import Lock


def render_domain_validation(
    published: Lock,
    options: JobOptions,
    products: Sequence[Product],
    domain: ComputeDomainOptions,
) -> Rendered:
    """One compute-domain validation per selected rack cell and product of its machine, and the
    plan naming them; raises before anything is written where there is none."""
    validate_on.check_options(options)
    compute_domain.check_options(options)
    if not products:
        raise InputError("--validate-on: name at least one GPU product")
    files: dict[str, str] = {}
    jobs: list[PlannedJob] = []
    left_out: list[str] = []
    for cell in sorted(published.images):
        entry = published.images[cell]
        reason = compute_domain.unfit_reason(entry)
        if reason is not None:
            left_out.append(f"{cell}: {reason}")
            continue
        machine = platforms.get(entry.platform).machine
        index = published.index_of(cell)
        for product in products:
            if product.machine != machine:
                left_out.append(
                    f"{cell} ({entry.platform}) on {product.label}: its hosts are {product.machine}"
                )
                continue
            name = validate_on.job_name(cell, product.label, entry.digest, compute_domain.NAME_CHARS)
            args = validate_on.probe_arguments(entry, options.gpus, product.machine)
            pinned = replace(
                options,
                node_selector=(*options.node_selector, *validate_on.product_selector(product, options)),
                gpu_affinity=False,  # pinned to a product: the probe says why a cell cannot serve it
            )
            run = DomainRun(name, tuple(args), validate_on.COMPONENT, product.label, product.product_name)
            manifests = compute_domain.domain_manifests(entry, pinned, domain, run)
            files[f"{name}.yaml"] = yaml.dump_all(manifests, Dumper=ManifestDumper, sort_keys=False)
            jobs.append(validate_on.planned_job(name, entry, product, options, index, domain.nodes))
    if not jobs:
        raise InputError(
            "--validate-on with --compute-domain: no selected cell runs on GB200/GB300 racks with hosts of "
            + ", ".join(f"{p.label} ({p.machine})" for p in products)
            + (f" ({left_out[0]})" if len(left_out) == 1 else "")
        )
    plan = Plan(tuple(jobs))
    files[PLAN_NAME] = json.dumps(plan.as_json(), indent=2, sort_keys=True) + "\n"
    return Rendered(files, plan, tuple(left_out))


def render_compute_domains(
    published: Lock,
    options: JobOptions,
    nodes: int,
    products_asked: Sequence[str],
    note: Callable[[str], None],
) -> dict[str, str]:
    """``--compute-domain``'s files (with ``--validate-on``: the probe's, and the plan), each cell
    left out said as a ``note``, and what a gang risks without a queue."""
    domain = ComputeDomainOptions(nodes)
    if products_asked:
        products = validate_on.parse_products(products_asked, options.gpu_request == "dra")
        validation = render_domain_validation(published, options, products, domain)
        files, left_out = validation.files, validation.left_out
    else:
        rendered = compute_domain.render_domains(published, options, domain)
        files, left_out = rendered.files, rendered.left_out
    for line in left_out:
        note(f"no compute-domain Job for {line}")
    if options.queue is None:
        note(
            "without --queue, a compute-domain Job's pods are scheduled one by one: a clique with too few"
            " free nodes holds part of the gang until --deadline; --queue NAME (Kueue) admits all or none",
        )
    return files
