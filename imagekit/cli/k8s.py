"""Commands that put published images on a Kubernetes cluster: k8s (Jobs, front ends, validate-on
Jobs, compute domains, admission policies) and k8s-results (validate-on Jobs' outputs into the
report)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagekit.cli.app import (
    DEFAULT_LOCK,
    DEFAULT_MATRIX,
    JsonOption,
    LockOption,
    MatrixOption,
    OnlyOption,
    StateDirOption,
    app,
    path_argument,
    path_option,
    reports_errors,
    say,
    select_cells,
)
from imagekit.cli.publish import AttestationPolicyOption, RequireAttestationOption
from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import MAX_INT32
from imagekit.core.text import counted
from imagekit.k8s.failure import DEFAULT_BACKOFF_LIMIT
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from imagekit.k8s.manifests import JobOptions
    from imagekit.plan.schema import Publish
    from imagekit.report.lockfile import Lock, LockEntry


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
    gpus: Annotated[int, typer.Option("--gpus", min=0, max=64, help="GPUs (--gpu-resource) per Job.")] = 1,
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
    from imagekit.k8s import manifests as kube
    from imagekit.k8s.dra import parse_gpu_request
    from imagekit.k8s.kueue import parse_queue
    from imagekit.k8s.resources import sizes
    from imagekit.k8s.security import parse_uid_mode
    from imagekit.plan.cells import frontend_of
    from imagekit.report.lockfile import entries_for, read_lock

    argv = _command_argv(command)
    options = kube.JobOptions(
        gpus=gpus,
        gpu_resource=gpu_resource,
        gpu_request=parse_gpu_request(gpu_request),
        node_selector=kube.parse_node_selector(node_selector or []),
        tolerations=tuple(kube.Toleration.parse(t) for t in toleration or []),
        runtime_class=runtime_class,
        claims=tuple(kube.Claim.parse(p) for p in pvc or []),
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
    policy_key = _policy_key(policy, key, attestation_policy)
    if require_attestation is not None:
        from imagekit.cli.attest import require_attested

        require_attested(published, require_attestation, attestation_policy)
    if compute_domain is not None:
        files = _compute_domains(published, options, compute_domain, validate_on or [])
    elif validate_on:
        from imagekit.k8s.validate_on import parse_products, render_validation

        rendered = render_validation(
            published, options, parse_products(validate_on, options.gpu_request == "dra")
        )
        files = rendered.files
        for line in rendered.left_out:
            say("note", f"no Job for {line}")
    else:
        files = kube.render_jobs(published, options, {c.id: frontend_of(c) for c in cells})
    if prepull:
        from imagekit.k8s.prepull import render_prepull

        files.update(render_prepull(published, options))
    if policy_key is not None:
        files.update(
            _admission_policies(
                policy or [], the_plan.matrix.publish, entries, policy_key, attestation_policy
            )
        )
    for path in kube.write_jobs(files, out):
        typer.echo(str(path))
    typer.echo(f"imagekit: {counted(len(files), 'manifest')} in {out}", err=True)


def _compute_domains(
    published: Lock, options: JobOptions, nodes: int, validate_on: Sequence[str]
) -> dict[str, str]:
    """``--compute-domain``'s files (with ``--validate-on``: the probe's, and the plan), the cells
    left out said as notes."""
    from imagekit.k8s.compute_domain import ComputeDomainOptions, render_domains

    domain = ComputeDomainOptions(nodes)
    if validate_on:
        from imagekit.k8s.domain_validation import render_domain_validation
        from imagekit.k8s.validate_on import parse_products

        products = parse_products(validate_on, options.gpu_request == "dra")
        validation = render_domain_validation(published, options, products, domain)
        files, left_out = validation.files, validation.left_out
    else:
        rendered = render_domains(published, options, domain)
        files, left_out = rendered.files, rendered.left_out
    for line in left_out:
        say("note", f"no compute-domain Job for {line}")
    if options.queue is None:
        say(
            "note",
            "without --queue, a compute-domain Job's pods are scheduled one by one: a clique with too few"
            " free nodes holds part of the gang until --deadline; --queue NAME (Kueue) admits all or none",
        )
    return files


@app.command("k8s-results")
@reports_errors
def k8s_results(
    cluster: Annotated[
        str, typer.Option("--cluster", help="The cluster the Jobs ran in, as the report should name it.")
    ],
    outputs: Annotated[
        list[Path] | None,
        path_argument(help="Each validate-on Job's output: `kubectl logs -l job=NAME --tail=-1 > NAME.log`."),
    ] = None,
    plan: Annotated[
        Path,
        path_option(
            "--plan", help="The validate-on.plan `imagekit k8s --validate-on` wrote beside the Jobs."
        ),
    ] = Path("k8s") / "validate-on.plan",
    status: Annotated[
        Path | None,
        path_option(
            "--status",
            help="`kubectl get jobs,pods -l app.kubernetes.io/component=validate-on -o json`: says why"
            " each Job that did not report did not (evicted, pending, deadline, failed).",
        ),
    ] = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Record validate-on Jobs' outputs in the report: per cell and digest, the GPU products of
    CLUSTER its probe validated (or failed) on.

    Every file is read and checked first; with any problem (one line each) nothing is recorded
    (exit 2). Each Job of the plan that left no probe document is named with why (with --status),
    and every Job that did report is recorded. Exit 1 when a recorded run failed, else 6 when
    some Jobs did not report, 3 when none did.

    Example: imagekit k8s-results --cluster prod-east --plan validate/validate-on.plan logs/*.log
    Example: imagekit k8s-results --cluster prod-east --status status.json logs/*.log
    """
    from imagekit.k8s import results
    from imagekit.k8s.job_status import missing_lines, read_status
    from imagekit.report.store import open_store

    name = results.cluster_name(cluster)
    jobs = results.read_plan(plan)
    found = results.read_outputs(jobs, outputs or [], name)
    states = read_status(status) if status is not None else None
    missing = results.unreported(jobs, found, states, str(status))
    recorded, problems = found.recorded, found.problems
    with open_store(state_dir) as store:
        report, refused = results.into_report(store.require(), recorded, store.path)
        for problem in [*problems, *refused]:
            say("error", problem)
        if problems or refused:
            say("error", f"{counted(len(problems) + len(refused), 'problem')}; nothing recorded")
            raise typer.Exit(int(ExitCode.INVALID_INPUT))
        for line in missing_lines(missing):
            say("not reported", line)
        if not recorded:
            say("error", f"none of the {counted(len(jobs), 'Job')} of {plan} reported; nothing recorded")
            raise typer.Exit(int(ExitCode.ENVIRONMENT))
        path = store.save(report)
    if as_json:
        typer.echo(json.dumps([{"cell": i.job.cell, **i.record.as_json()} for i in recorded], indent=2))
    else:
        for line in results.lines(recorded):
            typer.echo(line)
    failed = sum(1 for i in recorded if i.record.verification.verdict != "validated")
    typer.echo(
        f"imagekit: recorded {counted(len(recorded), 'run')} on {name}, {failed} failed,"
        f" {len(missing)} not reported; report: {path}",
        err=True,
    )
    if failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
    if missing:
        raise typer.Exit(int(ExitCode.INCOMPLETE))


def _command_argv(command: str | None) -> tuple[str, ...]:
    """--command, shell-split; () without one."""
    import shlex

    try:
        argv = tuple(shlex.split(command)) if command is not None else ()
    except ValueError as exc:
        raise InputError(f"--command: {exc}") from None
    if command is not None and not argv:
        raise InputError("--command is empty")
    return argv


def _policy_key(policies: Sequence[str] | None, key: Path | None, attestation_policy: str) -> Path | None:
    """The public key of --policy; None without --policy."""
    from imagekit.k8s.admission import check_policies

    return check_policies(policies, key, attestation_policy)


def _admission_policies(
    policies: Sequence[str],
    publish: Publish,
    entries: Mapping[str, LockEntry],
    key: Path,
    attestation_policy: str,
) -> dict[str, str]:
    """The admission policy files (file name -> YAML) admitting the published repositories'
    attested digests (``imagekit.k8s.admission``)."""
    from imagekit.attest.statements import VERIFICATION_PREDICATES, load_public_key
    from imagekit.core import naming
    from imagekit.k8s.admission import policy_files

    pem = load_public_key(key).pem()
    repositories = sorted({e.repository for e in entries.values()}) or [
        naming.repository(publish.registry, publish.repository)
    ]
    return policy_files(policies, repositories, pem, VERIFICATION_PREDICATES[attestation_policy])
