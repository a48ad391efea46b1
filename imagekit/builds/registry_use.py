"""What a build asks of the registry: an image staged elsewhere, a layer cache, and staging.

Used by ``imagekit.builds.builder`` when a registry is given with ``--push`` or ``--cache-from``; one
registry session, shared by the build threads under one lock. The two lookups only save work:
when the registry is down they say so once and the cells are built without them. Staging is the
cell's result (verify and publish on other runners work from it), so its failure fails the cell.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import docker
import requests
from docker.errors import APIError

from imagekit.builds.reuse import missing_labels
from imagekit.core import naming
from imagekit.core.errors import EnvironmentProblem, RegistryError, one_line
from imagekit.core.platforms import Platform
from imagekit.engine.client import PushFailed, inspect_image, pull, push_as
from imagekit.plan.schema import Publish
from imagekit.registry.client import Backoff, open_registry
from imagekit.registry.credentials import docker_auth_config
from imagekit.registry.manifest import INDEX_TYPES
from imagekit.render.dockerfile import RenderedCell
from imagekit.report.pullcost import gib, measure
from imagekit.report.store import BuildReport, CellResult, Staged

Write = Callable[[str], None]


class StagingFailed(Exception):
    """The cell was built, but its image could not be staged in the registry."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BuildRegistry:
    def __init__(
        self,
        api: docker.APIClient,
        host: str,
        publish: Publish,
        backoff: Backoff,
        previous: BuildReport | None,
    ) -> None:
        self.api = api
        self.host = host
        self.publish = publish
        self.backoff = backoff
        self.previous = previous  # the report before this run: where it staged each cell
        self.registry = open_registry(host, backoff)
        self._lock = threading.Lock()
        self._down: str | None = None  # the lookups stop asking once it is down
        # (repository, tag) -> digest for the lookups: reuse and cache source ask about the same
        # staging tag; staging itself asks afresh, after the build
        self._resolved: dict[tuple[str, str], str | None] = {}
        self.staging_name = naming.repository(host, publish.staging_repository)
        self.final_name = naming.repository(host, publish.repository)

    def close(self) -> None:
        self.registry.close()

    def stage(self, result: CellResult, write: Write, platform: Platform) -> CellResult:
        """Put the cell's image under its staging tag and record the manifest digest, and what a
        node pulls for it (``imagekit.report.pullcost``, from the manifests the registry now holds).

        A staging tag that already names this image is left as it is: an unchanged cell is never
        pushed twice. The engine's image id is the config digest on its overlay2 store, the manifest
        digest on its containerd store: either one matching is the same image.
        """
        if result.image_id is None or result.input_digest is None:
            return result
        repository = self.publish.staging_repository
        tag = naming.staging_tag(result.input_digest)
        where = naming.reference(self.staging_name, tag)
        try:
            with self._lock:
                digest = self.registry.head_manifest(repository, tag)
                staged_image = digest and self.registry.get_manifest(repository, digest).config_digest
                if result.image_id not in (digest, staged_image):
                    digest = None  # the tag names another image (a rebuild): push this one over it
            if digest is not None:
                write(f"staged: {where} already is this image ({digest}); not pushed again")
            else:
                digest = push_as(
                    self.api,
                    result.image_id,
                    self.staging_name,
                    tag,
                    self.backoff.delays(),
                    docker_auth_config(self.host),
                    say=lambda message: write(f"push: {message}"),
                )
                write(f"staged: pushed {where} as {digest}")
            return self._staged(result, tag, digest, write, platform)
        except (PushFailed, RegistryError) as exc:
            raise StagingFailed(
                f"built as {result.image_id}, but staging it at {where} failed: {exc}"
            ) from None

    def pushed_by_buildkit(self, result: CellResult, write: Write, platform: Platform) -> CellResult:
        """The cell BuildKit pushed to its staging tag itself (``buildkit.push_image``), recorded as
        its image id (the manifest digest buildx's metadata file reports) only once the registry
        serves that very manifest under the tag: the registry, not buildx's file, is what verify
        and publish pull. StagingFailed when it serves another or none; nothing is then recorded."""
        digest = result.image_id
        assert digest is not None and result.input_digest is not None
        tag = naming.staging_tag(result.input_digest)
        where = naming.reference(self.staging_name, tag)
        try:
            with self._lock:
                served = self.registry.tag_digest(self.publish.staging_repository, tag)
            if served != digest:
                raise StagingFailed(
                    f"buildx reports pushing {where} as {digest}, but the registry serves"
                    f" {served or 'no manifest'} there; nothing recorded: build it again with --push"
                )
            write(f"staged: BuildKit pushed {where} as {digest}")
            return self._staged(result, tag, digest, write, platform)
        except RegistryError as exc:
            raise StagingFailed(f"BuildKit pushed {where}, but reading it back failed: {exc}") from None

    def _staged(
        self, result: CellResult, tag: str, digest: str, write: Write, platform: Platform
    ) -> CellResult:
        """``result`` staged as ``digest`` under ``tag``, with what a node pulls for it."""
        repository = self.publish.staging_repository
        where = naming.reference(self.staging_name, tag)
        with self._lock:
            cost = measure(self.registry, repository, digest, platform, f"{where}@{digest[:19]}")
        largest = cost.largest
        if largest is not None:
            write(f"pull: {gib(cost.total)}; largest layer {gib(largest.size)}, made by {cost.largest_step}")
        staged = Staged(self.host, repository, tag, digest)
        return dataclasses.replace(result, staged=staged, pull_cost=cost)

    def staged_elsewhere(self, rendered: RenderedCell, write: Write) -> dict[str, Any] | None:
        """The image another runner staged from this very input digest, pulled by digest.

        An empty runner then builds nothing for an unchanged cell: the staging tag of its input
        digest names an image built from the same inputs (its label says so, checked here), which
        is what a build would produce. Returns its image-list summary, or None.
        """
        tag = naming.staging_tag(rendered.input_digest)
        digest = self._resolve(self.publish.staging_repository, tag, write)
        if digest is None:
            return None
        reference = naming.by_digest(self.staging_name, digest)
        try:
            pull(self.api, reference, auth_config=docker_auth_config(self.host))
        except (APIError, requests.RequestException, OSError) as exc:
            write(f"reuse: {reference} not available ({one_line(exc)}); building")
            return None
        image = inspect_image(self.api, reference)
        labels: Mapping[str, str] = ((image or {}).get("Config") or {}).get("Labels") or {}
        if image is None or labels.get(naming.INPUT_DIGEST_LABEL) != rendered.input_digest:
            write(f"reuse: {reference} was not built from this cell's inputs; building")
            return None
        write(f"reuse: pulled {reference}, staged from this input digest: nothing to build")
        return {
            "Id": image["Id"],
            "RepoTags": image.get("RepoTags"),
            "Labels": labels,
            "Size": image.get("Size"),
        }

    def staged_unpulled(
        self, rendered: RenderedCell, required_labels: tuple[tuple[str, str], ...], write: Write
    ) -> Staged | None:
        """Where another runner staged this very input digest, read from its config blob alone.

        The BuildKit path's reuse: no layer is pulled (the engine need not hold the image; verify
        --pull and publish work from the staged digest). None when absent, built from other
        inputs, or without one of ``required_labels`` (the run's ``--label``s)."""
        repository = self.publish.staging_repository
        tag = naming.staging_tag(rendered.input_digest)
        digest = self._resolve(repository, tag, write)
        if digest is None:
            return None
        where = naming.reference(self.staging_name, tag)
        try:
            # read as every image is (imagekit.registry.manifest): a staged image that no engine
            # could pull (a layer of an absurd size, a config that is not its manifest's) is no
            # image to reuse; an index (bake's provenance around it) has no labels of its own
            with self._lock:
                manifest = self.registry.get_manifest(repository, digest)
                labels: Mapping[str, str] = {}
                if manifest.media_type not in INDEX_TYPES:
                    record = manifest.image("its manifest", "not reused")
                    raw = self.registry.get_blob(repository, record.config.digest)
                    labels = record.read_config(raw, "its manifest", "not reused").labels
        except (EnvironmentProblem, RegistryError) as exc:
            write(f"reuse: {where} unreadable ({one_line(exc)}); building")
            return None
        if labels.get(naming.INPUT_DIGEST_LABEL) != rendered.input_digest:
            write(f"reuse: {where} was not built from these inputs; building")
            return None
        missing = missing_labels(labels, required_labels)
        if missing:
            write(f"reuse: {where} has these inputs but not --label {', '.join(missing)}; building")
            return None
        write(f"reuse: {where} is {digest}, built from these inputs")
        return Staged(self.host, repository, tag, digest)

    def build_cache(self, rendered: RenderedCell) -> str:
        """The BuildKit registry cache of ``rendered``'s cell (``naming.build_cache``)."""
        return naming.build_cache(self.staging_name, rendered.cell.image_tag)

    def cache_source(self, rendered: RenderedCell, write: Write) -> tuple[str, ...]:
        """The cell's last staged or published image, pulled by digest, so a fresh runner with an
        empty engine reuses its layers (torch) instead of building them again.

        Tried in order: the staging tag of this very input digest (``--force`` rebuilds an
        unchanged cell), the image the previous report staged for this cell, the last published
        readable tag. Only with a registry: locally the engine's own layer cache already serves,
        and the classic builder consults *only* the cache-from images once any is given. The
        classic builder matches steps on the image's history, so a multi-stage build (the
        wheelhouse stage) reuses only its last stage's steps.
        """
        sources: list[tuple[str, str, str]] = [  # (repository, tag or digest, engine name)
            (self.publish.staging_repository, naming.staging_tag(rendered.input_digest), self.staging_name)
        ]
        old = next(
            (r for r in (self.previous.cells if self.previous else ()) if r.id == rendered.cell.id), None
        )
        if old is not None and old.staged is not None and old.staged.registry == self.host:
            sources.append((old.staged.repository, old.staged.digest, old.staged.name))
        sources.append((self.publish.repository, rendered.cell.image_tag, self.final_name))
        for repository, ref, name in sources:
            digest = self._resolve(repository, ref, write)
            if digest is None:
                continue
            reference = naming.by_digest(name, digest)
            if inspect_image(self.api, reference) is None:
                try:
                    pull(self.api, reference, auth_config=docker_auth_config(self.host))
                except (APIError, requests.RequestException, OSError) as exc:
                    write(f"cache: {reference} not available ({one_line(exc)}); trying the next source")
                    continue
                write(f"cache: pulled {reference}")
            return (reference,)
        write("cache: no staged or published image of this cell; building without one")
        return ()

    def _resolve(self, repository: str, ref: str, write: Write) -> str | None:
        """The manifest digest ``repository:ref`` names now; None when absent or unreachable."""
        if naming.DIGEST.fullmatch(ref):
            return ref
        with self._lock:
            if self._down is not None:
                return None
            if (repository, ref) in self._resolved:
                return self._resolved[repository, ref]
            try:
                digest = self.registry.head_manifest(repository, ref)
            except (EnvironmentProblem, RegistryError) as exc:
                message = exc.message if isinstance(exc, EnvironmentProblem) else str(exc)
                self._down = message
                write(f"cache: {message}; building without a cache source")
                return None
            self._resolved[repository, ref] = digest
            return digest
