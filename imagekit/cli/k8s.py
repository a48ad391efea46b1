"""k8s: published images put on a Kubernetes cluster: Jobs, front ends, validate-on Jobs, compute
domains, prepull DaemonSets and admission policies (their outputs come back through k8s-results)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, gpu_request, reports_errors, say, select_cells
from imagekit.cli.flags import (
    DEFAULT_LOCK,
    AttestationPolicyOption,
    LockOption,
    MatrixOption,
    OnlyOption,
    RequireAttestationOption,
    gpus_option,
    path_option,
)
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_GPUS, MAX_INT32
from imagekit.core.text import counted, shown
from imagekit.k8s.failure import DEFAULT_BACKOFF_LIMIT


@app.command()
@reports_errors
def k8s(
    matrix: MatrixOption = DEFAULT_MATRIX,
    only: OnlyOption = None,
    out: Annotated[
        Path,
        path_option(
            "--out",
            help="Directory for the Job manifests.",
        ),
    ] = Path("k8s"),
    lock: LockOption = DEFAULT_LOCK,
    gpus: Annotated[str, gpus_option(f"GPUs (--gpu-resource) per Job: a count, 0 to {MAX_GPUS}.")] = "1",
    gpu_resource: Annotated[
        str,
        typer.Option(
            "--gpu-resource",
            help="The GPU resource to request: nvidia.com/gpu, or a MIG slice (mixed strategy)"
            " such as nvidia.com/mig-1g.10gb.",
        ),
    ] = "nvidia.com/gpu",
    gpu_request: Annotated[
        str,
        typer.Option(
            "--gpu-request",
            help="device-plugin (an nvidia.com/gpu limit, feature-discovery affinity) or dra (Kubernetes"
            " 1.34+ with NVIDIA's DRA driver: a ResourceClaimTemplate per workload whose CEL selects"
            " the GPUs the cell serves; --validate-on then takes the productName, 'NVIDIA H100 80GB HBM3').",
        ),
    ] = "device-plugin",
    node_selector: Annotated[
        list[str] | None, typer.Option("--node-selector", help="key=value (repeatable).")
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option(
            "--toleration",
            help="gpu (the nvidia.com/gpu:NoSchedule taint), key=value:Effect or key:Effect (repeatable)."
            " DRA claims bring no toleration: give the GPU pool's taints here.",
        ),
    ] = None,
    runtime_class: Annotated[
        str | None, typer.Option("--runtime-class", help="RuntimeClass, e.g. nvidia.")
    ] = None,
    pvc: Annotated[
        list[str] | None,
        typer.Option("--pvc", help="NAME[:/mount]: a claim for data and checkpoints (default /data)."),
    ] = None,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help="Run this (shell-split) instead of the check script, as the container's args:"
            " behind the image's entrypoint, as verification ran.",
        ),
    ] = None,
    cpu: Annotated[
        str | None,
        typer.Option("--cpu", help="CPU request (8, 500m); default 1 + 1 per GPU, sized for the probe."),
    ] = None,
    cpu_limit: Annotated[
        str | None, typer.Option("--cpu-limit", help="CPU limit; none by default (a quota throttles NCCL).")
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option("--memory", help="Memory request (64Gi); default 4Gi + 2Gi per GPU, for the probe."),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option("--memory-limit", help="Memory limit; default the request plus /dev/shm (it counts)."),
    ] = None,
    shm: Annotated[
        str | None,
        typer.Option(
            "--shm",
            help="Size of /dev/shm (DataLoader workers, NCCL); default 8Gi per GPU (at least 2Gi),"
            " at most --memory-limit.",
        ),
    ] = None,
    uid_mode: Annotated[
        str,
        typer.Option(
            "--uid-mode",
            help="fixed (uid/gid/fsGroup 10001) or scc (OpenShift: no runAsUser, runAsGroup or fsGroup;"
            " restricted-v2 assigns them from the namespace's range; the rest stays restricted).",
        ),
    ] = "fixed",
    backoff_limit: Annotated[
        int,
        typer.Option(
            "--backoff-limit",
            min=0,
            max=MAX_INT32,
            help="Retries of a pod that failed neither by disruption (ignored: replaced) nor by the"
            " probe's verdict (fails the Job); per index for --compute-domain.",
        ),
    ] = DEFAULT_BACKOFF_LIMIT,
    deadline: Annotated[
        int, typer.Option("--deadline", min=1, max=MAX_INT32, help="activeDeadlineSeconds of each Job.")
    ] = 3600,
    namespace: Annotated[str | None, typer.Option("--namespace", help="metadata.namespace.")] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            help="A Kueue LocalQueue: every Job gets its kueue.x-k8s.io/queue-name label and is written"
            " suspended (Kueue starts it on admission); a --compute-domain Job is admitted as one gang"
            " in one nvidia.com/gpu.clique (topology-aware scheduling) or not at all.",
        ),
    ] = None,
    gpu_affinity: Annotated[
        bool,
        typer.Option(
            "--gpu-affinity/--no-gpu-affinity",
            help="Node affinity on GPU feature discovery's labels (compute capability, driver) and"
            " the platform, from each cell (with --gpu-request dra: the claim's CEL selectors); off"
            " for clusters without feature discovery.",
        ),
    ] = True,
    secret: Annotated[
        str | None,
        typer.Option("--secret", help="Front ends: the Secret holding `token` or `authorized_keys`."),
    ] = None,
    workspace_claim: Annotated[
        str | None,
        typer.Option("--workspace-claim", help="Front ends: an existing claim for /workspace/* (else one)."),
    ] = None,
    workspace_size: Annotated[
        str, typer.Option("--workspace-size", help="Front ends: the size of the claim written.")
    ] = "50Gi",
    require_attestation: RequireAttestationOption = None,
    attestation_policy: AttestationPolicyOption = "validated",
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="kyverno (a Kyverno ClusterPolicy, Kyverno 1.13-1.19; validated only; kyverno-legacy is"
            " its former name), kyverno-ivpol (a Kyverno ImageValidatingPolicy, for a Kyverno with the"
            " fix for kyverno/kyverno#17109: 1.17-1.19 deny every image under it) or sigstore (a"
            " Sigstore policy-controller ClusterImagePolicy), repeatable: also write an admission policy"
            " admitting only images of the published repository whose digest carries an imagekit"
            " attestation signed by --key.",
        ),
    ] = None,
    key: Annotated[
        Path | None,
        path_option("--key", help="The PEM public key (ECDSA P-256) for --policy."),
    ] = None,
    validate_on: Annotated[
        list[str] | None,
        typer.Option(
            "--validate-on",
            help="A GPU product (the nvidia.com/gpu.product node label, e.g. NVIDIA-L40S; PRODUCT:arm64"
            " for one gpus.yaml does not place), repeatable: instead of the workloads, one Job per cell"
            " and product running the image's probe on that product, and validate-on.plan for"
            " `imagekit k8s-results`.",
        ),
    ] = None,
    compute_domain: Annotated[
        int | None,
        typer.Option(
            "--compute-domain",
            help="N nodes (1-18): instead of the workloads, for each selected linux/arm64 cell built for"
            " GB200/GB300, a ComputeDomain (NVIDIA's DRA driver), an Indexed Job of N pods (one a node,"
            " one NVLink clique) claiming its IMEX channel and --gpus each, and a headless Service"
            " for the rendezvous env (MASTER_ADDR, NODE_RANK, ...). With --validate-on: the probe on"
            " N nodes of each product, its nccl check across all of them.",
        ),
    ] = None,
    prepull: Annotated[
        bool,
        typer.Option(
            "--prepull",
            help="Also write prepull-<arch>.yaml: a DaemonSet per architecture that pulls every selected"
            " digest onto that architecture's GPU nodes (--node-selector, --toleration and"
            " --gpu-affinity apply; no GPU is requested) and keeps it there while it runs.",
        ),
    ] = False,
) -> None:
    """Write one Kubernetes Job per published cell, referencing the image by digest; a front-end
    cell (jupyter, ssh) gets a Deployment, a ClusterIP Service and its workspace claim instead.

    By default each Job runs the image's own check script with the GPUs requested, so a cluster's
    GPU nodes are validated by the same checks as the build machine. A front end's token or SSH
    keys come from a Secret (never written into a manifest): `kubectl create secret generic NAME
    --from-file=token=./token` or `--from-file=authorized_keys=$HOME/.ssh/id_ed25519.pub`.

    Example: imagekit k8s --only '*cu121*' --gpus 8 --runtime-class nvidia --pvc ckpt:/checkpoints
    Example: imagekit k8s --only '*-jupyter' --secret jupyter-token --workspace-claim team-ws
    Example: imagekit k8s --validate-on NVIDIA-H100-80GB-HBM3 --validate-on NVIDIA-L40S --out validate
    Example: imagekit k8s --prepull --namespace ml --node-selector pool=training
    Example: imagekit k8s --only '*arm64*' --compute-domain 4 --gpus 4 --queue team-a --out rack
    Example: imagekit k8s --only '*arm64*' --compute-domain 2 --gpus 4 --validate-on NVIDIA-GB200
    Example: imagekit k8s --gpu-request dra --validate-on 'NVIDIA H100 80GB HBM3' --out validate
    Example: imagekit k8s --uid-mode scc --namespace ml --toleration gpu --gpus 8 --memory 64Gi
    """
    from imagekit.k8s import manifests
    from imagekit.k8s.admission import check_policies, published_policy_files
    from imagekit.k8s.dra import parse_gpu_request
    from imagekit.k8s.kueue import parse_queue
    from imagekit.k8s.options import Claim, JobOptions, Toleration, parse_node_selector
    from imagekit.k8s.resources import sizes
    from imagekit.k8s.security import parse_uid_mode
    from imagekit.plan.cells import frontend_of
    from imagekit.report.lockfile import entries_for, read_lock

    argv = manifests.parse_command(command)
    options = JobOptions(
        gpus=_gpus_per_job(gpus),
        gpu_resource=gpu_resource,
        gpu_request=parse_gpu_request(gpu_request),
        node_selector=parse_node_selector(node_selector or []),
        tolerations=tuple(Toleration.parse(t) for t in toleration or []),
        runtime_class=runtime_class,
        claims=tuple(Claim.parse(p) for p in pvc or []),
        command=argv,
        cpu=cpu,
        cpu_limit=cpu_limit,
        memory=memory,
        memory_limit=memory_limit,
        shm=shm,
        uid_mode=parse_uid_mode(uid_mode),
        backoff_limit=backoff_limit,
        deadline_s=deadline,
        namespace=namespace,
        queue=parse_queue(queue),
        gpu_affinity=gpu_affinity,
        secret=secret,
        workspace_claim=workspace_claim,
        workspace_size=workspace_size,
    )
    sizes(options)  # every flag checked before any file is read
    the_plan, cells = select_cells(matrix, only)
    matrix_platforms = {c.id: c.platform for c in cells}
    published = entries_for(read_lock(lock), matrix_platforms, the_plan.matrix.publish.repository, lock)
    entries = published.images
    policy_key = check_policies(policy, key, attestation_policy)  # the public key of --policy
    if require_attestation is not None:
        from imagekit.attest.required import require_attested

        require_attested(published, require_attestation, attestation_policy, say)
    if compute_domain is not None:
        from imagekit.k8s.domain_validation import render_compute_domains

        files = render_compute_domains(
            published, options, compute_domain, validate_on or [], lambda line: say("note", line)
        )
    elif validate_on:
        from imagekit.k8s.validate_on import parse_products, render_validation

        rendered = render_validation(
            published, options, parse_products(validate_on, options.gpu_request == "dra")
        )
        files = rendered.files
        for line in rendered.left_out:
            say("note", f"no Job for {line}")
    else:
        files = manifests.render_jobs(published, options, {c.id: frontend_of(c) for c in cells})
    if prepull:
        from imagekit.k8s.prepull import render_prepull

        files.update(render_prepull(published, options))
    if policy_key is not None:
        files.update(
            published_policy_files(
                policy or [], the_plan.matrix.publish, entries, policy_key, attestation_policy
            )
        )
    for path in manifests.write_jobs(files, out):
        typer.echo(str(path))
    typer.echo(f"imagekit: {counted(len(files), 'manifest')} in {out}", err=True)


def _gpus_per_job(text: str) -> int:
    """``--gpus`` read as every command reads it (``gpu_request``), as the count of --gpu-resource
    one Job's pod asks for: an extended resource is counted, so all, device= and cdi: ask nothing."""
    try:
        request = gpu_request(text)
    except InputError:
        request = None
    if request is None or request.device_ids or request.cdi_devices or not 0 <= request.count <= MAX_GPUS:
        raise InputError(
            f"--gpus {shown(text)}: a Job asks for a count of GPUs, 0 to {MAX_GPUS} (like --gpus 8)"
        )
    return request.count
