"""Commands that publish and hand images on: publish, images, k8s, k8s-results."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagekit.cli.app import (
    DEFAULT_LOCK,
    DEFAULT_MATRIX,
    JsonOption,
    LockOption,
    MatrixOption,
    OnlyOption,
    RegistryOption,
    StateDirOption,
    app,
    path_argument,
    path_option,
    registry_host,
    reports_errors,
    say,
    select_cells,
)
from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import MAX_INT32
from imagekit.core.text import counted
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from imagekit.k8s.manifests import JobOptions
    from imagekit.plan.schema import Publish
    from imagekit.publish.promote import PublishRun
    from imagekit.report.lockfile import Lock, LockEntry, LockIndex

RequireAttestationOption = Annotated[
    Path | None,
    path_option(
        "--require-attestation",
        help="PEM public key: hand out only digests that carry a verification attestation signed"
        " with it (checked in the registry first; no Docker engine needed).",
    ),
]
AttestationPolicyOption = Annotated[
    str,
    typer.Option(
        "--attestation-policy", help="validated (a GPU verification, default) or checked (also without GPU)."
    ),
]


@app.command()
@reports_errors
def publish(
    matrix: MatrixOption = DEFAULT_MATRIX,
    registry: RegistryOption = None,
    only: OnlyOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be pushed and tagged; touch nothing.")
    ] = False,
    retries: Annotated[
        int, typer.Option("--retries", min=1, max=20, help="Attempts per registry request or push.")
    ] = 5,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    lock: LockOption = DEFAULT_LOCK,
    as_json: JsonOption = False,
    signing_key: Annotated[
        Path | None,
        path_option(
            "--signing-key",
            help="PEM private key (ECDSA P-256) that signs the attestations and SBOMs attached to each"
            " published digest; or the PEM itself in IMAGEKIT_SIGNING_KEY. Never printed.",
        ),
    ] = None,
    scans: Annotated[
        list[Path] | None,
        path_option(
            "--scan",
            help="A scanner's JSON for a staged digest (trivy image --format json, grype -o json);"
            " repeat it. A cell with an unwaived finding at or above the threshold is refused.",
        ),
    ] = None,
    scan_threshold: Annotated[
        str | None,
        typer.Option(
            "--scan-threshold", help="critical, high, medium or low (default: advisories.scan.threshold)."
        ),
    ] = None,
) -> None:
    """Promote the cells that pass the matrix's publish policy, by manifest digest.

    A cell that `build --push` staged is promoted in the registry alone (no Docker engine needed
    when every selected cell is staged); any other is pushed to a staging tag first. Only when
    every cell is staged and checked are the readable and immutable tags written, as the same
    manifest by digest. The platforms of one readable tag (linux/amd64, linux/arm64) are
    published as one OCI image index of their digests, only when every platform passes the
    policy (publish.partial_index: true publishes those that do). Exit 1 when a cell was refused.

    Example: imagekit publish --matrix matrix.yaml --registry ghcr.io --dry-run
    """
    from imagekit.core import naming
    from imagekit.publish.policy import Refusal
    from imagekit.publish.promote import Published, PublishedIndex, PublishOptions, publish_cells
    from imagekit.publish.scan_gate import gate_for_run, threshold_flag
    from imagekit.registry.client import Backoff
    from imagekit.report.lockfile import read_lock
    from imagekit.report.store import check_output_path, open_store, read_report

    # The lock is written after each promoted cell: one it cannot replace, or could not read back
    # to merge, is refused now, before the first tag moves.
    check_output_path(lock, state_dir, "--lock")
    read_lock(lock)
    the_plan, cells = select_cells(matrix, only)
    settings = the_plan.matrix.publish
    host = registry_host(registry, the_plan, matrix)
    from imagekit.attest.statements import KEY_ENV, load_signing_key

    key = load_signing_key(signing_key)  # before anything moves: a bad key is exit 2 now
    if key is None and settings.signing == "required":
        raise InputError(
            f"{matrix}: publish.signing is required; pass --signing-key PATH or set {KEY_ENV}"
            " (the PEM of an ECDSA P-256 key)"
        )
    options = PublishOptions(
        registry=host,
        repository=settings.repository,
        staging_repository=settings.staging_repository,
        lock_path=lock,
        dry_run=dry_run,
        backoff=Backoff(attempts=retries),
        signing_key=key,
        max_layer_size=settings.max_layer_size,
    )
    if key is None and not dry_run:
        say("note", f"nothing signed: no --signing-key or {KEY_ENV}; no attestation or SBOM is attached")

    def refused(refusal: Refusal) -> None:
        say("refused", f"{refusal.cell}: {refusal.reason}")

    def published(done: Published | PublishedIndex) -> None:
        if as_json:
            return
        record: LockEntry | LockIndex
        if isinstance(done, PublishedIndex):
            record = done.index
            left = f"; left out: {', '.join(record.missing)}" if record.missing else ""
            typer.echo(f"{record.group:<50} {record.reference}")
            typer.echo(f"    index of {', '.join(record.platforms)}{left}")
        else:
            record = done.entry
            typer.echo(f"{record.cell:<50} {record.reference}")
        typer.echo(f"    {record.level}; tags {', '.join(record.tags)} ({done.duration_s:.1f}s)")

    with contextlib.ExitStack() as held:
        # a dry run only reads: it takes no lock and makes no state directory (a read-only
        # checkout can preview); a real one holds the lock so no build rewrites the report meanwhile
        store = None if dry_run else held.enter_context(open_store(state_dir))
        report = read_report(state_dir) if store is None else store.require()
        # every scan read and matched to the report's cells before anything moves
        gate = gate_for_run(scans, the_plan, report, f"{state_dir}", threshold_flag(scan_threshold))
        options = replace(options, scan_gate=gate)
        run = publish_cells(
            the_plan,
            cells,
            report,
            options,
            say=lambda m: typer.echo(f"imagekit: {m}", err=True),
            on_retry=lambda m: say("retry", m),
            on_refused=refused,
            on_published=published,
        )
        if store is not None and (run.costs or run.scans):  # what a node pulls, what scans found
            store.save(report.with_pull_costs(dict(run.costs)).with_scans(run.scans))
    target = naming.repository(host, settings.repository)
    if dry_run and not as_json:
        for candidate in run.singles:
            typer.echo(f"would publish {candidate.cell} ({candidate.level}) as {target}:")
            typer.echo(f"    {', '.join(candidate.tags)}")
        for group in run.groups:
            typer.echo(f"would publish index {group.tag} ({group.level}) as {target}:")
            left = f"; left out: {', '.join(m.platform for m in group.missing)}" if group.missing else ""
            typer.echo(f"    of {', '.join(f'{m.platform} ({m.cell})' for m in group.members)}{left}")
            typer.echo(f"    {', '.join(group.tags)}")
    if as_json:
        typer.echo(json.dumps(_run_document(run, dry_run), indent=2, sort_keys=True))
    verb = "would publish" if dry_run else "published"
    count = len(run.singles) + len(run.groups)
    typer.echo(f"imagekit: {verb} {count}, refused {len(run.refused)}; lock: {lock}", err=True)
    if run.refused:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


def _run_document(run: PublishRun, dry_run: bool) -> dict[str, Any]:
    """``publish --json``: what was published (or, dry, would be), each index and each refusal."""
    entries: list[dict[str, Any]]
    indexes: list[dict[str, Any]]
    if dry_run:
        entries = [{"cell": c.cell, "level": c.level, "tags": list(c.tags)} for c in run.singles]
        indexes = [
            {
                "group": g.tag,
                "level": g.level,
                "tags": list(g.tags),
                "platforms": {m.platform: m.cell for m in g.members},
                "missing": {m.platform: m.cell for m in g.missing},
            }
            for g in run.groups
        ]
    else:
        entries = [p.entry.as_json() for p in run.published]
        indexes = [{**i.index.as_json(), "entries": [e.as_json() for e in i.entries]} for i in run.indexes]
    refusals = [{"cell": r.cell, "reason": r.reason} for r in run.refused]
    return {"dry_run": dry_run, "published": entries, "indexes": indexes, "refused": refusals}


@app.command()
@reports_errors
def images(
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json, yaml, or env (IMAGEKIT_IMAGE_<CELL>=repo@sha256:..., IMAGEKIT_INDEX_<TAG>=...).",
        ),
    ] = "json",
    only: OnlyOption = None,
    lock: LockOption = DEFAULT_LOCK,
    require_attestation: RequireAttestationOption = None,
    attestation_policy: AttestationPolicyOption = "validated",
) -> None:
    """Print the published images (images.lock.json) for other tools.

    Example: eval "$(imagekit images --format env)"; docker pull "$IMAGEKIT_IMAGE_..."
    """
    from imagekit.plan.cells import select_ids
    from imagekit.report.lockfile import read_lock, render_lock

    if not lock.exists():
        raise InputError(f"no lock file at {lock}; run `imagekit publish` first")
    published = read_lock(lock)
    chosen = published.only(select_ids(sorted(published.images), only or [], str(lock)))
    if require_attestation is not None:
        from imagekit.cli.attest import require_attested

        require_attested(chosen, require_attestation, attestation_policy)
    typer.echo(render_lock(chosen, output_format), nl=False)


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
            help="gpu (the nvidia.com/gpu:NoSchedule taint), key=value:Effect or key:Effect (repeatable).",
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
    cpu: Annotated[str | None, typer.Option("--cpu", help="CPU request and limit (8, 500m).")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="Memory request and limit (64Gi).")] = None,
    shm: Annotated[
        str | None,
        typer.Option(
            "--shm",
            help="Size of /dev/shm (DataLoader workers, NCCL); default 8Gi per GPU (at least 2Gi),"
            " at most --memory.",
        ),
    ] = None,
    backoff_limit: Annotated[
        int, typer.Option("--backoff-limit", min=0, max=MAX_INT32, help="Job retries.")
    ] = 0,
    deadline: Annotated[
        int, typer.Option("--deadline", min=1, max=MAX_INT32, help="activeDeadlineSeconds of each Job.")
    ] = 3600,
    namespace: Annotated[str | None, typer.Option("--namespace", help="metadata.namespace.")] = None,
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
    Example: imagekit k8s --only '*arm64*' --compute-domain 4 --gpus 4 --out rack
    Example: imagekit k8s --only '*arm64*' --compute-domain 2 --gpus 4 --validate-on NVIDIA-GB200
    Example: imagekit k8s --gpu-request dra --validate-on 'NVIDIA H100 80GB HBM3' --out validate
    """
    from imagekit.k8s import manifests as kube
    from imagekit.k8s.dra import parse_gpu_request
    from imagekit.plan.cells import frontend_of
    from imagekit.report.lockfile import entries_for, read_lock

    the_plan, cells = select_cells(matrix, only)
    matrix_platforms = {c.id: c.platform for c in cells}
    published = entries_for(read_lock(lock), matrix_platforms, the_plan.matrix.publish.repository, lock)
    entries = published.images
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
        cpu=kube.check_quantity("--cpu", cpu),
        memory=kube.check_quantity("--memory", memory),
        shm=kube.check_quantity("--shm", shm),
        backoff_limit=backoff_limit,
        deadline_s=deadline,
        namespace=namespace,
        gpu_affinity=gpu_affinity,
        secret=secret,
        workspace_claim=workspace_claim,
        workspace_size=workspace_size,
    )
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
    return files


@app.command("k8s-results")
@reports_errors
def k8s_results(
    outputs: Annotated[
        list[Path],
        path_argument(help="Each validate-on Job's output, as `kubectl logs job/NAME > NAME.log` wrote it."),
    ],
    cluster: Annotated[
        str, typer.Option("--cluster", help="The cluster the Jobs ran in, as the report should name it.")
    ],
    plan: Annotated[
        Path,
        path_option(
            "--plan", help="The validate-on.plan `imagekit k8s --validate-on` wrote beside the Jobs."
        ),
    ] = Path("k8s") / "validate-on.plan",
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Record validate-on Jobs' outputs in the report: per cell and digest, the GPU products of
    CLUSTER its probe validated (or failed) on.

    Every file is read and checked first; with any problem (one line each) nothing is recorded
    (exit 2). Exit 1 when a recorded run failed.

    Example: imagekit k8s-results --cluster prod-east --plan validate/validate-on.plan logs/*.log
    """
    from imagekit.k8s import results
    from imagekit.report.store import open_store

    name = results.cluster_name(cluster)
    recorded, problems = results.read_outputs(results.read_plan(plan), outputs, name)
    with open_store(state_dir) as store:
        report, refused = results.into_report(store.require(), recorded, store.path)
        for problem in [*problems, *refused]:
            say("error", problem)
        if problems or refused:
            say("error", f"{counted(len(problems) + len(refused), 'problem')}; nothing recorded")
            raise typer.Exit(int(ExitCode.INVALID_INPUT))
        path = store.save(report)
    if as_json:
        typer.echo(json.dumps([{"cell": i.job.cell, **i.record.as_json()} for i in recorded], indent=2))
    else:
        for line in results.lines(recorded):
            typer.echo(line)
    failed = sum(1 for i in recorded if i.record.verification.verdict != "validated")
    typer.echo(
        f"imagekit: recorded {counted(len(recorded), 'run')} on {name}, {failed} failed; report: {path}",
        err=True,
    )
    if failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


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
