"""Stage 5: publish the cells that pass the matrix's policy, promoted by manifest digest.

Order of work, chosen so that a failure leaves nothing half-done:

1. decide, from the build report alone, which cells (and groups of platforms) may be published
   (``imagekit.publish.policy``: policy, freshness, the verified image is the built one, the
   verified digest is the staged one) before anything moves (``imagekit.publish.publish_run``);
2. check the registry answers. A cell that ``build --push`` staged already has its manifest in the
   registry: nothing to push, and no Docker engine is needed. Any other admitted image is pushed
   from the engine that holds it to its staging tag (docker moves the layers, once);
3. prepare every cell before any final tag is written: GET the staged manifest by digest, check it
   names the verified image, and where staging is another repository mount its blobs across. A
   cell whose staged manifest is gone or is not the verified image is refused here, and so is a
   cell (or group) one of whose immutable tags already names another digest: an immutable tag is
   written once, so only the readable tag ever moves, and only to an image that proved itself;
   and a cell its scanners' findings refuse (``imagekit.publish.scan_gate``);
4. promote each by digest (PUT the same bytes under each immutable tag, the moving readable tag
   last) and add it to the lock only when all its tags are written. No layer moves and the digest
   is identical, so a tag can only ever name an image that passed. A group of platforms: each
   image by digest (no tag of its own), one OCI image index of them PUT by digest and read back,
   then its tags, readable last; then each platform's attestations and the index's own (signed
   with ``--signing-key``, ``imagekit.publish.attestations``), then the lock (its entries and the index,
   in one write).

A registry that stays down stops the run with exit 3; before step 4 nothing final was written, and
a cell in the lock is always a cell whose every tag names its verified digest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast, get_args

import docker

from imagekit.attest.attach import Attached
from imagekit.attest.statements import SigningKey
from imagekit.core import naming, platforms
from imagekit.core.clock import timestamp
from imagekit.core.errors import EnvironmentProblem, RegistryError
from imagekit.core.limits import DEFAULT_MAX_LAYER_BYTES, TEXT_CHARS
from imagekit.core.safetypes import EXPECTATION, SCRIPT_PATH
from imagekit.engine.client import PushFailed, inspect_image, push_as
from imagekit.plan.schema_values import PublishPolicy, ServedFrontend
from imagekit.publish.attestations import Proofs
from imagekit.publish.policy import (
    Candidate,
    Group,
    Refusal,
    check_platform,
    counted_cost,
    settle,
)
from imagekit.publish.scan_gate import ScanGate, ScanRefused
from imagekit.registry.client import Backoff, Registry
from imagekit.registry.credentials import docker_auth_config
from imagekit.registry.manifest import INDEX_TYPES, Manifest, image_index
from imagekit.report.lockfile import (
    IndexPlatform,
    LeftOut,
    LockEntry,
    LockIndex,
    merge_lock,
    provenance,
    verified_by,
)
from imagekit.report.pullcost import PullCost
from imagekit.report.scans import ScanSummary
from imagekit.report.verification import clipped


@dataclass(frozen=True)
class Published:
    entry: LockEntry
    duration_s: float


@dataclass(frozen=True)
class PublishedIndex:
    """A group published as one image index, with each of its platforms' entries."""

    index: LockIndex
    entries: tuple[LockEntry, ...]
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
    max_layer_size: int = DEFAULT_MAX_LAYER_BYTES  # publish.max_layer_size: a larger layer is refused
    scan_gate: ScanGate | None = None  # the scanners' findings each staged digest is held to


def registry_side(candidate: Candidate, registry: str) -> bool:
    """Whether the candidate's manifest is already in ``registry`` (staged by ``build --push``)."""
    return candidate.staged is not None and candidate.staged.registry == registry


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
        self.costs: dict[str, PullCost] = {}  # each prepared cell's pull cost, for the report
        self.scans: dict[str, tuple[ScanSummary, ...]] = {}  # what its scanners found, likewise
        self.proofs = Proofs(
            registry, options.registry, options.repository, self.target, options.signing_key, say
        )

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

    def prepare(self, staged: _Staged, in_index: bool = False) -> _Ready:
        """Everything short of a final tag: the manifest by digest, its image, its blobs in place.
        ``in_index``: a platform of a group's index, which must be a single image."""
        candidate = staged.candidate
        where = naming.by_digest(naming.repository(self.options.registry, staged.source), staged.digest)
        manifest = self.registry.get_manifest(staged.source, staged.digest)
        # before any blob or tag moves: what is promoted is checked, each image as the image
        # record every reader takes (BuildKit's attestation manifests in an index as artifacts)
        then = "nothing promoted from it"
        manifest.check_promotable(where, image_only=in_index)
        children: list[Manifest] = []
        attestations = manifest.attestations
        records = [] if manifest.media_type in INDEX_TYPES else [manifest.image(where, then)]
        for child in manifest.children:
            children.append(self.registry.get_manifest(staged.source, child))
            about = f"{where} (its manifest {child})"
            children[-1].check_promotable(about, image_only=True, artifact=child in attestations)
            records.append(children[-1].image(about, then, artifact=child in attestations))
        # The engine's image id is the config digest (overlay2 store) or the manifest digest
        # (containerd store): either names the image of the staged manifest.
        ours = next((r for r in records if candidate.image_id in (r.manifest.digest, r.config.digest)), None)
        if ours is None:
            held = records[0].config.digest if records else "no image"
            raise RegistryError(f"{where} holds image {held}, not the verified {candidate.image_id}")
        raw = self.registry.get_blob(staged.source, ours.config.digest)
        config = ours.read_config(raw, where, then)
        check_platform(where, config.document, platforms.get(candidate.platform))
        labels = config.labels
        built_from = labels.get(naming.INPUT_DIGEST_LABEL)
        if built_from != candidate.input_digest:
            raise RegistryError(
                f"the image staged as {staged.digest} was built from inputs {(built_from or 'unknown')[:12]}"
                f" (its {naming.INPUT_DIGEST_LABEL} label), the report says {candidate.input_digest[:12]};"
                " build and verify again"
            )
        gate = self.options.scan_gate  # a scan may name the image by any of these digests
        if gate is not None:  # before any blob or tag moves
            names = (ours.manifest.digest, ours.config.digest, candidate.image_id)
            self.scans[candidate.cell] = gate.judge(candidate.cell, staged.digest, names)
        if staged.source != self.options.repository:
            for record in records:
                # each blob once, with its size: a blob copied (where a mount is declined) reads no more
                for blob in record.blobs.values():
                    target = self.options.repository
                    self.registry.mount_blob(target, blob.digest, staged.source, size=blob.size)
        cap = self.options.max_layer_size  # before any tag moves: a layer over it is refused
        self.costs[candidate.cell] = counted_cost(self.registry, staged.source, staged.digest, candidate, cap)
        return _Ready(staged, manifest, tuple(children), labels)

    def check_unmoved(self, tags: Sequence[str], digest: str) -> None:
        """Before any tag of a cell (or group) moves: each immutable tag (all but the readable
        first) is free or already names ``digest``. An immutable tag is written once; one that
        names another image refuses the whole cell (a rerun of the same image is fine)."""
        for tag in tags[1:]:
            found = self.registry.tag_digest(self.options.repository, tag)
            if found is not None and found != digest:
                raise RegistryError(
                    f"immutable tag {naming.reference(self.target, tag)} already names {found}, not"
                    f" this build's {digest}; an immutable tag never moves (publish the image it names,"
                    " or change the cell's inputs)"
                )

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

    def _carry_and_attach(self, ready: _Ready, entry: LockEntry) -> tuple[Attached, ...]:
        """The staged digest's referrers carried along, then the promoted digest's signed
        attestations attached (``imagekit.publish.attestations``); what was attached."""
        self.proofs.carry_referrers(ready.staged.source, ready.manifest)
        scans = self.scans.get(ready.staged.candidate.cell, ())
        return self.proofs.attach(ready.staged.candidate, ready.manifest, entry, scans)

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
            platform=candidate.platform,
            advisories=candidate.advisories,
        )

    def publish_one(self, ready: _Ready) -> Published:
        """A group of one: its image under its final tags, then its lock entry."""
        started = time.monotonic()
        try:
            self.promote(ready)
            entry = self.entry(ready)
            self._carry_and_attach(ready, entry)
        except RegistryError as exc:
            raise EnvironmentProblem(str(exc)) from None
        # After each cell, so the lock names every tag that exists even if a later cell fails.
        merge_lock(self.options.lock_path, {entry.cell: entry})
        return Published(entry, ready.staged.seconds + time.monotonic() - started)

    def publish_group(self, group: Group, ready: Mapping[str, _Ready]) -> PublishedIndex:
        """A group of platforms: each image by digest in the target repository (no tag of its
        own), then one index of them, read back and checked by digest before any tag names it;
        the immutable tags, then the readable one, then the lock. An index that does not read
        back as written moves no tag."""
        started = time.monotonic()
        members = [ready[m.cell] for m in group.members]
        repository = self.options.repository
        index, expected = _index_of(group, ready)
        tags = group.tags
        try:
            for item in members:
                self.registry.put_manifest(repository, item.manifest.digest, item.manifest)
            self.registry.put_manifest(repository, index.digest, index)
            self.registry.read_back_index(repository, index.digest, index, expected)
            for tag in (*tags[1:], tags[0]):  # the moving readable tag last, as for one image
                self.registry.put_manifest(repository, tag, index)
            self.registry.read_back_index(repository, tags[0], index, expected)
            entries = tuple(self.entry(item) for item in members)
            attached = []
            for item, entry in zip(members, entries, strict=True):
                attached.append(self._carry_and_attach(item, entry))
            # After the index read back and each platform's proof is in place, the index's own.
            self.proofs.attach_index(group, index, entries, attached)
        except RegistryError as exc:
            raise EnvironmentProblem(str(exc)) from None
        record = LockIndex(
            group=group.tag,
            registry=self.options.registry,
            repository=self.target,
            digest=index.digest,
            tags=tags,
            input_digest=group.input_digest,
            policy=self.policy,
            level=group.level,
            published_at=timestamp(),
            platforms={e.platform: IndexPlatform(e.cell, e.digest, e.level) for e in entries},
            missing={x.platform: LeftOut(x.cell, clipped(x.reason, TEXT_CHARS)) for x in group.missing},
        )
        merge_lock(self.options.lock_path, {e.cell: e for e in entries}, {group.tag: record})
        seconds = max(item.staged.seconds for item in members)
        return PublishedIndex(record, entries, seconds + time.monotonic() - started)

    def run(
        self,
        candidates: Sequence[Candidate],
        on_published: Callable[[Published | PublishedIndex], None] = lambda _: None,
        on_refused: Callable[[Refusal], None] = lambda _: None,
        groups: Sequence[Group] = (),
    ) -> tuple[list[Published | PublishedIndex], list[Refusal]]:
        """Stage and prepare every image (``candidates`` alone, each group's platforms), then
        publish: each single image, then each group whose platforms are ready (all of them, or
        with ``partial`` those that are)."""
        self.registry.ping()
        members = [m for g in groups for m in g.members]
        here, gone = self.present([*candidates, *members])
        failed = {r.cell: r.reason for r in gone}
        staged = [self._staged(c) for c in here]
        in_index = {m.cell for m in members}
        ready: dict[str, _Ready] = {}
        for pending in staged:
            cell = pending.candidate.cell
            try:
                prepared = self.prepare(pending, in_index=cell in in_index)
                self.check_unmoved(pending.candidate.tags, prepared.manifest.digest)
                ready[cell] = prepared
            except (RegistryError, ScanRefused) as exc:
                failed[cell] = f"{exc}; nothing promoted for this cell"
        refused = [Refusal(c.cell, failed[c.cell]) for c in candidates if c.cell in failed]
        for refusal in refused:
            on_refused(refusal)
        published: list[Published | PublishedIndex] = []
        for candidate in candidates:
            if candidate.cell in ready:
                published.append(self.publish_one(ready[candidate.cell]))
                on_published(published[-1])
        for group in groups:
            settled, turned = settle(group, failed)
            moved = self._unmoved(settled, ready)
            for refusal in (*turned, *moved):
                refused.append(refusal)
                on_refused(refusal)
            if settled is not None and not moved:
                published.append(self.publish_group(settled, ready))
                on_published(published[-1])
        return published, refused

    def _unmoved(self, group: Group | None, ready: Mapping[str, _Ready]) -> list[Refusal]:
        """A group whose immutable tags name another index than the one it would publish: each
        of its platforms refused (nothing of it promoted); none when the tags are free or its own."""
        if group is None:
            return []
        try:
            self.check_unmoved(group.tags, _index_of(group, ready)[0].digest)
        except RegistryError as exc:
            why = f"{exc}; nothing promoted for this group"
            return [Refusal(m.cell, f"group {group.tag}, {m.platform}: {why}") for m in group.members]
        return []

    def _staged(self, candidate: Candidate) -> _Staged:
        """The candidate's manifest in the registry: staged by `build --push`, or pushed now."""
        if registry_side(candidate, self.options.registry):
            assert candidate.staged is not None
            return _Staged(candidate, candidate.staged.repository, candidate.staged.digest, 0.0)
        started = time.monotonic()
        digest = self.stage(candidate)
        where = naming.by_digest(naming.repository(self.options.registry, self.staging), digest)
        self.say(f"staged {candidate.cell} as {where}")
        return _Staged(candidate, self.staging, digest, time.monotonic() - started)


def _index_of(group: Group, ready: Mapping[str, _Ready]) -> tuple[Manifest, dict[str, Manifest]]:
    """The image index a group publishes (its bytes, hence its digest, fixed by its platforms'
    manifests) and each platform's manifest."""
    expected: dict[str, Manifest] = {m.platform: ready[m.cell].manifest for m in group.members}
    index = image_index([(platforms.get(name), manifest) for name, manifest in expected.items()])
    return index, expected
