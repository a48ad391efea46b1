"""Stage 5: publish the cells that pass the matrix's policy, promoted by manifest digest.

Order of work, chosen so that a failure leaves nothing half-done:

1. decide, from the build report alone, which cells may be published (policy, freshness, the
   verified image is the built one, the verified digest is the staged one) before anything moves;
2. check the registry answers. A cell that ``build --push`` staged already has its manifest in the
   registry: nothing to push, and no Docker engine is needed. Any other admitted image is pushed
   from the engine that holds it to its staging tag (docker moves the layers, once);
3. prepare every cell before any final tag is written: GET the staged manifest by digest, check it
   names the verified image, and where staging is another repository mount its blobs across. A
   cell whose staged manifest is gone or is not the verified image is refused here;
4. promote each by digest (PUT the same bytes under each immutable tag, the moving readable tag
   last) and add it to the lock only when all its tags are written. No layer moves and the digest
   is identical, so a tag can only ever name an image that passed.

A registry that stays down stops the run with exit 3; before step 4 nothing final was written, and
a cell in the lock is always a cell whose every tag names its verified digest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal, cast, get_args

import docker

from imagekit import naming
from imagekit.attest import SigningKey
from imagekit.cells import Cell, Plan
from imagekit.clock import timestamp
from imagekit.credentials import docker_auth_config
from imagekit.engine import PushFailed, connect, inspect_image, push_as
from imagekit.errors import EnvironmentProblem, RegistryError
from imagekit.lockfile import LockEntry, merge_lock
from imagekit.manifest import Manifest
from imagekit.provenance import provenance, verified_by
from imagekit.registry import Backoff, Registry, open_registry
from imagekit.safetypes import EXPECTATION, SCRIPT_PATH
from imagekit.schema import Publish, PublishPolicy, ServedFrontend
from imagekit.store import BuildReport, CellResult, Staged
from imagekit.verification import Verification

Level = Literal["validated", "checked", "built"]
# What a policy admits, by what the image actually passed.
ADMITS: Mapping[str, frozenset[str]] = {
    "gpu-validated": frozenset({"validated"}),
    "checked": frozenset({"validated", "checked"}),
    "built": frozenset({"validated", "checked", "built"}),
}


@dataclass(frozen=True)
class Candidate:
    """A cell admitted for publishing, with its final tags."""

    cell: str
    image_id: str
    input_digest: str
    level: Level
    tags: tuple[str, ...]
    verification: Verification | None
    staged: Staged | None = None  # where `build --push` staged it: promoted with no engine
    base_image: str | None = None  # what the build's FROM named, and the digest it resolved to
    base_digest: str | None = None


@dataclass(frozen=True)
class Refusal:
    cell: str
    reason: str


@dataclass(frozen=True)
class Published:
    entry: LockEntry
    duration_s: float


@dataclass(frozen=True)
class PublishOptions:
    registry: str
    repository: str  # without the registry
    lock_path: Path
    staging_repository: str = ""  # without the registry; "" = repository
    dry_run: bool = False
    backoff: Backoff = field(default_factory=Backoff)
    # Signs and attaches a verification attestation and an SBOM to each promoted digest; None:
    # nothing is signed (and publish says so). Its repr names the key id only.
    signing_key: SigningKey | None = None


def level_of(result: CellResult) -> Level | None:
    """How far this image was verified; None when it must never be published."""
    if result.status not in ("built", "skipped") or not result.image_id:
        return None
    verification = result.verification
    if verification is None:
        return "built"
    if verification.verdict == "failed":
        return None
    return verification.verdict


def _refusal_reason(result: CellResult | None, policy: str) -> str | None:
    if result is None:
        return "not in the build report; run `imagekit build` first"
    if result.status not in ("built", "skipped") or not result.image_id or not result.input_digest:
        return f"its build {result.status}"
    verification = result.verification
    staged = result.staged
    ran_on = (result.image_id, *result.tags, *((staged.reference,) if staged else ()))
    if verification is not None and verification.image not in ran_on:
        return f"its verification ran on {verification.image}, not the built {result.image_id}; verify again"
    level = level_of(result)
    if level is None:
        assert verification is not None
        return f"it failed verification ({verification.error or _failed_names(verification)})"
    if staged is not None and verification is not None and verification.image_digest != staged.digest:
        return (
            f"its verified digest ({verification.image_digest or 'unknown'}) is not its staged digest"
            f" ({staged.digest}); run `imagekit verify --pull` on the staged image"
        )
    if level not in ADMITS[policy]:
        what = "never verified" if level == "built" else "checked without a GPU"
        return (
            f"publish policy {policy} needs {' or '.join(sorted(ADMITS[policy]))}; it was {what}"
            " (run `imagekit verify --gpus all`, or set publish.policy explicitly)"
        )
    return None


def _failed_names(verification: Verification) -> str:
    return ", ".join(c.name for c in verification.failed_checks()[:4]) or "no checks ran"


def registry_side(candidate: Candidate, registry: str) -> bool:
    """Whether the candidate's manifest is already in ``registry`` (staged by ``build --push``)."""
    return candidate.staged is not None and candidate.staged.registry == registry


_ANY_DAY = date(2000, 1, 1)  # for tag patterns without {date}, which no day changes


def final_tags(cell: Cell, publish: Publish, result: CellResult, level: Level) -> tuple[str, ...] | None:
    """The matrix's tags for the cell (readable first), suffixed by level, dated as the build was.

    Derived from the matrix and the identity the build decided (input digest, build day, both
    typed fields of the report), never copied from the report's tags and never rendered again.
    None when a pattern needs the build day and the report (of an earlier release) has none.
    """
    patterns = publish.tags.immutable
    dated = any("date" in naming.placeholders(pattern) for pattern in patterns)
    day = result.built_on if dated else _ANY_DAY
    if day is None or result.input_digest is None:
        return None
    tags = naming.immutable_tags(cell.readable_tag, patterns, day, result.input_digest)
    return naming.published_tags(tags, level, cell.id)


def select(plan: Plan, cells: Sequence[Cell], report: BuildReport) -> tuple[list[Candidate], list[Refusal]]:
    """Decide per cell, from the report alone, before anything is pushed.

    Nothing is rendered: the report's input digest is what the build decided, and ``prepare``
    checks it against the label of the image the registry holds before any tag moves.
    """
    by_id = {r.id: r for r in report.cells}
    publish = plan.matrix.publish
    admitted: list[Candidate] = []
    refused: list[Refusal] = []
    for cell in cells:
        result = by_id.get(cell.id)
        reason = _refusal_reason(result, publish.policy)
        if reason is not None:
            refused.append(Refusal(cell.id, reason))
            continue
        assert result is not None and result.image_id and result.input_digest
        level = level_of(result)
        assert level is not None
        tags = final_tags(cell, publish, result, level)
        if tags is None:
            refused.append(
                Refusal(
                    cell.id,
                    "the build report does not say which day the build dated its tags (a report of an"
                    " earlier release); run `imagekit build` again, which re-tags it without rebuilding",
                )
            )
            continue
        admitted.append(
            Candidate(
                cell.id,
                result.image_id,
                result.input_digest,
                level,
                tags,
                result.verification,
                result.staged,
                result.base_image,
                result.base_digest,
            )
        )
    return admitted, refused


# -- pushing and promoting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Staged:
    """A candidate with its manifest in the registry: where (repository, digest), how long it took."""

    candidate: Candidate
    source: str  # repository (without the registry) that holds the staged manifest
    digest: str
    seconds: float


@dataclass(frozen=True)
class _Ready:
    staged: _Staged
    manifest: Manifest
    children: tuple[Manifest, ...]  # an index's manifests, PUT by digest before the index
    labels: Mapping[str, str]


class Publisher:
    def __init__(
        self,
        api: docker.APIClient | None,
        registry: Registry,
        options: PublishOptions,
        policy: PublishPolicy,
        say: Callable[[str], None],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api  # None: every candidate is staged, no engine is needed
        self.registry = registry
        self.options = options
        self.policy = policy
        self.say = say
        self.sleep = sleep
        self.target = naming.repository(options.registry, options.repository)
        self.staging = options.staging_repository or options.repository

    def _engine(self) -> docker.APIClient:
        if self.api is None:
            raise EnvironmentProblem("publishing an image that was not staged needs the Docker engine")
        return self.api

    def present(self, candidates: Sequence[Candidate]) -> tuple[list[Candidate], list[Refusal]]:
        """Split off the unstaged cells whose image the engine no longer has (pruned since the build)."""
        here: list[Candidate] = []
        gone: list[Refusal] = []
        for candidate in candidates:
            if (
                not registry_side(candidate, self.options.registry)
                and inspect_image(self._engine(), candidate.image_id) is None
            ):
                gone.append(Refusal(candidate.cell, f"image {candidate.image_id} is gone; build again"))
            else:
                here.append(candidate)
        return here, gone

    def stage(self, candidate: Candidate) -> str:
        """Push the image under its staging tag; returns the manifest digest docker reports."""
        name = naming.repository(self.options.registry, self.staging)
        tag = naming.staging_tag(candidate.input_digest)
        try:
            return push_as(
                self._engine(),
                candidate.image_id,
                name,
                tag,
                self.options.backoff.delays(),
                docker_auth_config(self.options.registry),
                say=lambda m: self.say(f"push {candidate.cell}: {m}"),
                sleep=self.sleep,
            )
        except PushFailed as failed:
            where = naming.reference(name, tag)
            raise EnvironmentProblem(f"pushing {candidate.cell} to {where} failed: {failed}") from None

    def prepare(self, staged: _Staged) -> _Ready:
        """Everything short of a final tag: the manifest by digest, its image, its blobs in place."""
        candidate = staged.candidate
        where = naming.by_digest(naming.repository(self.options.registry, staged.source), staged.digest)
        manifest = self.registry.get_manifest(staged.source, staged.digest)
        manifest.check_promotable(where)  # before any blob or tag moves: what is promoted is checked
        children: list[Manifest] = []
        images = [manifest]
        for child in manifest.children:
            images.append(self.registry.get_manifest(staged.source, child))
            images[-1].check_promotable(f"{where} (its manifest {child})", image_only=True)
            children.append(images[-1])
        configs = [c for c in (m.config_digest for m in images) if c]
        if candidate.image_id not in configs and configs:
            raise RegistryError(f"{where} holds image {configs[0]}, not the verified {candidate.image_id}")
        if staged.source != self.options.repository:
            for image in images:
                sizes = image.blob_sizes  # a blob copied (where a mount is declined) reads no more
                for blob in image.blobs:
                    target = self.options.repository
                    self.registry.mount_blob(target, blob, staged.source, size=sizes.get(blob))
        labels: Mapping[str, str] = {}
        if candidate.image_id in configs:
            config = json.loads(self.registry.get_blob(staged.source, candidate.image_id))
            found = (config.get("config") or {}).get("Labels") if isinstance(config, dict) else None
            labels = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        built_from = labels.get(naming.INPUT_DIGEST_LABEL)
        if built_from != candidate.input_digest:
            raise RegistryError(
                f"the image staged as {staged.digest} was built from inputs {(built_from or 'unknown')[:12]}"
                f" (its {naming.INPUT_DIGEST_LABEL} label), the report says {candidate.input_digest[:12]};"
                " build and verify again"
            )
        return _Ready(staged, manifest, tuple(children), labels)

    def promote(self, ready: _Ready) -> Manifest:
        """Every final tag -> the staged manifest, by digest; the bytes (and digest) never change."""
        repository = self.options.repository
        for child in ready.children:
            self.registry.put_manifest(repository, child.digest, child)
        tags = ready.staged.candidate.tags
        # Immutable tags first, the moving readable tag last: it moves only once the rest exist.
        for tag in (*tags[1:], tags[0]):
            self.registry.put_manifest(repository, tag, ready.manifest)
        return ready.manifest

    def carry_referrers(self, ready: _Ready) -> int:
        """Promotion by digest into another repository takes the staged digest's referrers along
        (attestations attached where it was staged): each artifact manifest, its blobs mounted
        across, and the target's referrers tag. Returns how many were carried."""
        source, target = ready.staged.source, self.options.repository
        digest = ready.manifest.digest
        if source == target:
            return 0
        found = self.registry.referrers(source, digest)
        for referrer in found:
            artifact = self.registry.get_manifest(source, referrer.digest)
            sizes = artifact.blob_sizes
            for blob in artifact.blobs:
                self.registry.mount_blob(target, blob, source, size=sizes.get(blob))
            self.registry.attach(target, artifact, digest)
        if found:
            self.say(f"carried {len(found)} referrer(s) of {digest[:19]} from {source} to {target}")
        return len(found)

    def attach(self, ready: _Ready, entry: LockEntry) -> tuple[str, ...]:
        """Sign and attach the verification attestation and the SBOM of the promoted digest;
        the predicate types attached (none without a signing key)."""
        from imagekit import attach, attest

        key = self.options.signing_key
        candidate = ready.staged.candidate
        if key is None:
            return ()
        verification = candidate.verification
        made = None
        provenance = entry.provenance
        if verification is not None:
            subject = attest.Subject(
                entry.repository,
                entry.digest,
                entry.cell,
                entry.input_digest,
                entry.image_id,
                candidate.base_image,
                candidate.base_digest,
                provenance.gpus if provenance else (),
                provenance.driver if provenance else None,
                provenance.cuda_driver if provenance else None,
            )
            made = attest.verification_predicate(subject, verification)
        statements: list[dict[str, Any]] = []
        if made is not None:
            statements.append(attest.statement(entry.repository, entry.digest, *made))
        inventory = verification.inventory if verification is not None else None
        if inventory is not None:
            from imagekit.sbom import build_sbom

            bom = build_sbom(
                entry.repository,
                entry.digest,
                inventory,
                candidate.base_image,
                candidate.base_digest,
                entry.cell,
            )
            statements.append(attest.statement(entry.repository, entry.digest, attest.SBOM_PREDICATE, bom))
        kinds = attach.attach_statements(
            self.registry, self.options.repository, ready.manifest, statements, key
        )
        missing = []
        if made is None:
            missing.append("no verification attestation (never verified)")
        if inventory is None:
            missing.append("no SBOM (its verification has no inventory: verify it again)")
        attached = ", ".join(attest.short_type(k) for k in kinds) or "nothing"
        self.say(
            f"signed and attached to {entry.reference}: {attached}"
            + (f"; {'; '.join(missing)}" if missing else "")
            + f" (key {key.keyid[:16]})"
        )
        return kinds

    def entry(self, ready: _Ready) -> LockEntry:
        candidate = ready.staged.candidate
        digest = ready.manifest.digest
        staged = candidate.staged.digest if candidate.staged is not None else ready.staged.digest
        labels = ready.labels
        # The image's labels say what it promises; only values the lock's reader accepts are kept
        # (they become a Job's command): an odd label is left out, never written.
        expect = {k: v for k, v in naming.expectations(labels).items() if EXPECTATION.problem(v) is None}
        script = labels.get(naming.CHECK_SCRIPT_LABEL)
        served = labels.get(naming.FRONTEND_LABEL)
        frontend = cast(ServedFrontend, served) if served in get_args(ServedFrontend) else None
        return LockEntry(
            cell=candidate.cell,
            registry=self.options.registry,
            repository=self.target,
            digest=digest,
            tags=candidate.tags,
            image_id=candidate.image_id,
            input_digest=candidate.input_digest,
            policy=self.policy,
            level=candidate.level,
            published_at=timestamp(),
            verification=verified_by(candidate.verification),
            expect=expect,
            check_script=script if script and SCRIPT_PATH.problem(script) is None else None,
            frontend=frontend,
            provenance=provenance(candidate.verification, staged, digest),
        )

    def run(
        self,
        candidates: Sequence[Candidate],
        on_published: Callable[[Published], None] = lambda _: None,
        on_refused: Callable[[Refusal], None] = lambda _: None,
    ) -> tuple[list[Published], list[Refusal]]:
        self.registry.ping()
        staged: list[_Staged] = []
        for candidate in candidates:
            started = time.monotonic()
            if registry_side(candidate, self.options.registry):
                assert candidate.staged is not None
                staged.append(_Staged(candidate, candidate.staged.repository, candidate.staged.digest, 0.0))
                continue
            digest = self.stage(candidate)
            where = naming.by_digest(naming.repository(self.options.registry, self.staging), digest)
            self.say(f"staged {candidate.cell} as {where}")
            staged.append(_Staged(candidate, self.staging, digest, time.monotonic() - started))
        ready: list[_Ready] = []
        refused: list[Refusal] = []
        for pending in staged:
            try:
                ready.append(self.prepare(pending))
            except RegistryError as exc:
                refusal = Refusal(pending.candidate.cell, f"{exc}; nothing promoted for this cell")
                refused.append(refusal)
                on_refused(refusal)
        published: list[Published] = []
        for item in ready:
            started = time.monotonic()
            try:
                self.promote(item)
                entry = self.entry(item)
                self.carry_referrers(item)
                self.attach(item, entry)
            except RegistryError as exc:
                raise EnvironmentProblem(str(exc)) from None
            # After each cell, so the lock names every tag that exists even if a later cell fails.
            merge_lock(self.options.lock_path, {entry.cell: entry})
            done = Published(entry, item.staged.seconds + time.monotonic() - started)
            published.append(done)
            on_published(done)
        return published, refused


def connect_registry(host: str, backoff: Backoff, say: Callable[[str], None]) -> Registry:
    return open_registry(host, backoff, say)


@dataclass(frozen=True)
class PublishRun:
    """What one ``imagekit publish`` did (or, dry, would do)."""

    candidates: tuple[Candidate, ...]
    published: tuple[Published, ...]
    refused: tuple[Refusal, ...]


def publish_cells(
    plan: Plan,
    cells: Sequence[Cell],
    report: BuildReport,
    options: PublishOptions,
    say: Callable[[str], None],
    on_retry: Callable[[str], None],
    on_refused: Callable[[Refusal], None],
    on_published: Callable[[Published], None],
) -> PublishRun:
    """Decide from the report, then (unless dry) push, stage and promote what was admitted.

    ``say`` hears progress, ``on_retry`` each retried registry request, ``on_refused`` and
    ``on_published`` each cell's outcome as it is known.
    """
    candidates, refused = select(plan, cells, report)
    for refusal in refused:
        on_refused(refusal)
    if options.dry_run or not candidates:
        return PublishRun(tuple(candidates), (), tuple(refused))
    client = connect_registry(options.registry, options.backoff, on_retry)
    try:
        # The engine only when some image was not staged by `build --push`: with every cell
        # staged, publishing runs where there is no Docker at all.
        engine_needed = not all(registry_side(c, options.registry) for c in candidates)
        publisher = Publisher(
            connect() if engine_needed else None, client, options, plan.matrix.publish.policy, say
        )
        candidates, missing = publisher.present(candidates)
        for refusal in missing:
            on_refused(refusal)
        published, unready = publisher.run(candidates, on_published, on_refused)
    finally:
        client.close()
    done = {p.entry.cell for p in published}
    return PublishRun(
        tuple(c for c in candidates if c.cell in done), tuple(published), (*refused, *missing, *unready)
    )
