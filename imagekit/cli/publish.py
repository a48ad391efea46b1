"""publish: promote the cells that pass the publish policy, by manifest digest, and write the lock."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, reports_errors, say, select_cells
from imagekit.cli.flags import (
    DEFAULT_LOCK,
    JsonOption,
    LockOption,
    MatrixOption,
    OnlyOption,
    RegistryOption,
    StateDirOption,
    path_option,
)
from imagekit.core.errors import ExitCode, InputError
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from imagekit.publish.publish_run import PublishRun
    from imagekit.report.lockfile import LockEntry, LockIndex


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
    from imagekit.plan.matrix import registry_host
    from imagekit.publish.policy import Refusal
    from imagekit.publish.promote import Published, PublishedIndex, PublishOptions
    from imagekit.publish.publish_run import publish_cells
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
