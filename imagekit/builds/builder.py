"""Stage 3: build the selected cells (and the local bases they derive from) on a Docker engine.

The order of work: resolve every base reference (``imagekit.builds.bases``: mirror, pull when missing,
record its digest, optionally pin it), render every cell, then run the job graph
(``imagekit.builds.jobs``) on a bounded thread pool. A job starts when what it derives from has
finished; a failure fails only its dependents unless ``fail_fast``. Images are built untagged and
tagged only after the engine reports the finished image, so an interrupted, timed-out or failed
build never carries a cell's tag.

With ``push``, each cell built or unchanged is staged under ``staging-<input digest, 12 hex>``
(never a final tag) and its manifest digest goes into the report, so verify and publish work from
the registry alone; a staging tag that names the image already is not pushed again. A builder that
can pushes a cell itself, never held by the engine, unless a job is built FROM it.

What differs between builders (the Dockerfiles, secrets, cache, building, where the image goes) is
the run's ``BuildBackend`` (``imagekit.builds.backends``), chosen once from ``--builder``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import IO, Any, Literal

import docker
import requests
from docker.errors import DockerException

from imagekit.builds.backends.base import BuildCache, Setup
from imagekit.builds.backends.choose import backend_for
from imagekit.builds.backends.classic import sweep_crashed_steps
from imagekit.builds.bases import ResolvedBase, apply_mirrors, recorded_digests, resolve_base
from imagekit.builds.jobs import (
    TAIL_LINES,
    BaseJob,
    CellJob,
    Job,
    JobFailed,
    base_jobs,
    built_from,
    cell_jobs,
    pulled_bases,
)
from imagekit.builds.options import BuildOptions
from imagekit.builds.outcome import BuildOutcome
from imagekit.builds.progress import Progress
from imagekit.builds.registry_use import BuildRegistry, StagingFailed
from imagekit.builds.reuse import EngineImages, reusable, skipped
from imagekit.builds.run_state import Abortable, RunState
from imagekit.core import naming, platforms
from imagekit.core.atomic import open_new
from imagekit.core.clock import timestamp
from imagekit.core.errors import EnvironmentProblem, ImagekitError, one_line
from imagekit.core.safetypes import IMAGE_REFERENCE
from imagekit.core.text import elided, redact
from imagekit.engine.client import (
    BuildAborted,
    BuildRequest,
    EngineFailure,
    alive,
    inspect_image,
    is_engine_failure,
)
from imagekit.engine.raw_socket import engine_address
from imagekit.plan.cells import Cell, FrontendCell, Plan, local_base_of
from imagekit.render.context import FileHasher, local_base_context
from imagekit.render.dockerfile import RenderedCell, Renderer
from imagekit.report.store import BuildReport, CellResult, ReportStore, Status


class Builder:
    def __init__(
        self,
        api: docker.APIClient,
        plan: Plan,
        options: BuildOptions,
        progress: Progress,
        store: ReportStore,
    ) -> None:
        self.api = api
        self.plan = plan
        self.options = options
        self.progress = progress
        self.previous = store.previous  # read once, by the store
        self.state = RunState()
        self.results: dict[str, CellResult] = {}
        self.logs = store.logs
        self.state_dir = store.state_dir
        # Digests of context files the last run hashed, by stat: a no-change run reads no file.
        self.hasher = FileHasher.from_state(store.state_dir)
        self.images = EngineImages(api, self.previous)
        self._cache: dict[str, BuildCache] = {}  # a cell job's, decided with its request
        self.remote: BuildRegistry | None = None
        self.backend = backend_for(
            options.builder,
            Setup(
                api=api,
                compression=options.compression,
                buildx_builder=options.buildx_builder,
                push_registry=options.registry if options.push else None,
                state_dir=store.state_dir,
                say=functools.partial(progress.event, "build", "push"),
            ),
        )
        self._built_on: set[str] = set()  # the jobs another job is built FROM: those are loaded
        if options.registry and (options.push or options.cache_from):
            self.remote = BuildRegistry(
                api, options.registry, plan.matrix.publish, options.backoff, self.previous
            )

    # -- the whole run

    def run(self, cells: tuple[Cell, ...]) -> BuildOutcome:
        cells = self.plan.with_parents(cells)  # a front end is built FROM its cell: that one first
        started = timestamp()
        clock = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        interrupted = False
        jobs: list[Job] = []
        try:
            for container in sweep_crashed_steps(self.api, self.previous, self.logs):
                self.progress.event("engine", "removed", f"build step container {container} a crash left")
            with self.backend.session(self.plan, dict(self.options.secret_files), os.environ):
                jobs = self.prepare(cells)
                self.progress.planned([j.name for j in jobs])
                self.schedule(jobs)
        except KeyboardInterrupt:
            interrupted = True
            self.state.stop("interrupted (Ctrl-C)")
            self.progress.event("build", "interrupted", "running builds stopped")
        finally:
            if self.remote is not None:
                self.remote.close()
            # A cache that cannot be written costs the next run its re-hash, nothing else.
            with contextlib.suppress(ImagekitError):
                self.hasher.save(self.state_dir)
        local_bases = [j for j in jobs if isinstance(j, BaseJob)]
        report = BuildReport(
            matrix=self.plan.source_name,
            started=started,
            duration_s=round(time.monotonic() - clock, 2),
            engine=engine_address(),
            cells=tuple(self._final(c.id, "cell", c.base_image) for c in cells),
            bases=tuple(self._final(j.name, "base", j.base_reference) for j in local_bases),
        ).keeping_verifications(self.previous)
        report = report.with_pull_costs({})  # each cell's shared bytes, against this report's cells
        return BuildOutcome(report, interrupted, external_bases=pulled_bases(jobs))

    def _final(self, name: str, kind: Literal["cell", "base"], base: str) -> CellResult:
        found = self.results.get(name)
        if found is not None:
            return found
        reason = self.state.engine_error or self.state.cancel_reason or "not started"
        status: Status = "failed" if self.state.engine_error else "cancelled"
        return CellResult(id=name, kind=kind, status=status, base_image=base, error=reason)

    def prepare(self, cells: tuple[Cell, ...]) -> list[Job]:
        options = self.options
        mirrors = options.mirrors + tuple(self.plan.matrix.mirrors.items())
        mirrored = tuple(
            c
            if local_base_of(c) is not None
            else dataclasses.replace(c, base_image=apply_mirrors(c.base_image, mirrors))
            for c in cells
        )
        recorded = recorded_digests(self.previous) if options.pin_base_digests else {}
        local_images = {local.image for c in self.plan.cells if (local := local_base_of(c)) is not None}
        produced_prefix = naming.reference(self.plan.repository, "")
        resolved: dict[tuple[str, str], ResolvedBase] = {}
        # one base pulled for two platforms: each cell builds FROM its platform's image id
        by_id = {c.platform for c in self.plan.cells} != {platforms.DEFAULT}
        for cell in mirrored:
            ref = cell.base_image
            if (
                local_base_of(cell) is not None
                or (ref, cell.platform) in resolved
                or ref in local_images
                or ref.startswith(produced_prefix)  # built by this run
            ):
                continue
            self.progress.event(ref, "resolving base")
            resolved[ref, cell.platform] = resolve_base(
                self.api,
                ref,
                options.pin_base_digests,
                recorded,
                functools.partial(self.progress.event, ref),
                platforms.get(cell.platform),
                by_id,
            )
        bases = base_jobs(self.plan, mirrored, self.hasher)  # a loop between bases: refused before rendering
        renderer = Renderer(self.plan, hasher=self.hasher, build=self.backend.render)
        rendered = [renderer.render(cell, build_from=built_from(cell, resolved)) for cell in mirrored]
        jobs: list[Job] = [*bases, *cell_jobs(self.plan, mirrored, rendered, resolved, options.today)]
        self._built_on = {parent for job in jobs for parent in job.depends_on}
        return jobs

    def schedule(self, jobs: list[Job]) -> None:
        waiting = {j.name: j for j in jobs}
        running: dict[Future[CellResult], Job] = {}
        with ThreadPoolExecutor(
            max_workers=max(1, self.options.jobs), thread_name_prefix="imagekit-build"
        ) as pool:
            try:
                while waiting or running:
                    for job in list(waiting.values()):
                        verdict = self._ready(job)
                        if verdict == "wait":
                            continue
                        del waiting[job.name]
                        if isinstance(verdict, CellResult):
                            self._record(verdict)
                        else:
                            running[pool.submit(self._run_job, job)] = job
                    if not running:
                        if waiting:  # nothing can start: a dependency never finishes (a bug)
                            raise RuntimeError(f"unschedulable jobs: {', '.join(waiting)}")
                        break
                    done, _ = wait(running, timeout=0.25, return_when=FIRST_COMPLETED)
                    for future in done:
                        running.pop(future)
                        self._record(future.result())
            except KeyboardInterrupt:
                self.state.stop("interrupted (Ctrl-C)")
                for future in list(running):
                    future.cancel()
                self._wait_quietly(running)
                raise
            except Exception as exc:
                # A bug (a worker's unexpected exception): stop the other builds before it
                # propagates, so nothing more starts or gets tagged while the pool winds down.
                self.state.stop(f"stopped: imagekit failed ({type(exc).__name__}: {one_line(exc)})")
                for future in list(running):
                    future.cancel()
                raise

    def _wait_quietly(self, running: dict[Future[CellResult], Job]) -> None:
        """Let the workers see the cancellation and finish; a second Ctrl-C is ignored here so
        no worker is abandoned with a half-tagged image."""
        while running:
            try:
                done, _ = wait(running, timeout=0.25)
            except KeyboardInterrupt:
                continue
            for future in done:
                running.pop(future)
                if not future.cancelled():
                    self._record(future.result())

    def _ready(self, job: Job) -> Literal["wait", "go"] | CellResult:
        if self.state.cancel.is_set():
            return self._final(job.name, job.report_kind, job.base_reference)
        for parent in job.depends_on:
            result = self.results.get(parent)
            if result is None:
                return "wait"
            if result.status in ("failed", "cancelled"):
                status: Status = "cancelled" if result.status == "cancelled" else "failed"
                return job.result(status, error=f"{parent} {result.status}; not built")
        return "go"

    def _record(self, result: CellResult) -> None:
        self.results[result.id] = result
        detail = result.error or (result.tags[0] if result.tags else "")
        self.progress.event(result.id, result.status, detail)
        if result.status == "failed" and self.options.fail_fast and not self.state.cancel.is_set():
            self.state.stop(f"cancelled by --fail-fast after {result.id} failed")

    # -- one job

    def _run_job(self, job: Job) -> CellResult:
        clock = time.monotonic()
        log_path = self.logs / f"{job.name}.log"
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        try:
            log = open_new(log_path, self.logs)
        except ImagekitError as exc:
            return job.result("failed", error=f"cannot write the build log: {exc.message}")
        with log:

            def write(line: str) -> None:
                line = redact(line)  # whoever printed it (a step, pip, the engine): no secret
                log.write(line if line.endswith("\n") else line + "\n")
                log.flush()
                tail.append(line.rstrip("\n"))
                self.progress.output(job.name, line)

            def done(status: Status, **values: Any) -> CellResult:
                return job.result(
                    status, duration_s=round(time.monotonic() - clock, 2), log=str(log_path), **values
                )

            try:
                if self.state.cancel.is_set():
                    write(f"not started: {self.state.cancel_reason}")
                    return self._final(job.name, job.report_kind, job.base_reference)
                if isinstance(job, BaseJob):
                    return self._build_base(job, write, done)
                return self._build_cell(job, write, done)
            except JobFailed as failure:
                write(elided(f"FAILED: {failure.message}"))
                return done("failed", error=failure.message, error_tail=failure.tail or tuple(tail))
            except ImagekitError as exc:  # an unreadable context file, an unwritable log, ...
                if isinstance(exc, EnvironmentProblem):
                    self.state.stop(exc.message, engine_error=exc.message)
                write(elided(f"FAILED: {exc.message}"))
                return done("failed", error=exc.message, error_tail=tuple(tail))
            except BuildAborted as aborted:
                reason = self.state.engine_error or str(aborted)
                write(elided(f"STOPPED: {reason}"))
                status: Status = (
                    "cancelled" if self.state.cancel.is_set() and not self.state.engine_error else "failed"
                )
                return done(status, error=reason, error_tail=tuple(tail))
            except (EngineFailure, DockerException, requests.RequestException, OSError) as exc:
                message = one_line(exc)
                if is_engine_failure(exc) and not alive(self.api):
                    message = f"the Docker engine at {engine_address()} stopped answering: {message}"
                    self.state.stop(message, engine_error=message)
                write(elided(f"FAILED: {message}"))
                return done("failed", error=message, error_tail=tuple(tail))

    def _build_cell(
        self, job: CellJob, write: Callable[[str], None], done: Callable[..., CellResult]
    ) -> CellResult:
        if job.base_error:
            raise JobFailed(job.base_error)
        rendered = job.rendered
        tags = rendered.names(self.plan.matrix.publish, self.options.today).references()
        base_digest = job.external_digest
        cell = rendered.cell
        # built on this engine (a local base, or a front end's parent cell): its image id
        local = local_base_of(cell)
        built_here = local.image if local else cell.base_image if isinstance(cell, FrontendCell) else None
        if built_here is not None:
            image = inspect_image(self.api, built_here)
            base_digest = str(image["Id"]) if image else None
        cache_registry = self.remote if self.options.cache_from else None  # --no-cache-from: none
        if not self.options.force:
            reused = self._reuse(rendered, tags, cache_registry, base_digest, write, done)
            if reused is not None:
                return reused
        if rendered.wheel_note:
            write(f"context: {rendered.wheel_note}")
        labels = {
            **rendered.build_labels(self.options.source, base_digest),
            **dict(self.options.extra_labels),
        }
        cache_target = self.remote if self.options.push else None
        self._cache[job.name] = self.backend.cache(rendered, cache_registry, cache_target, write)
        request = BuildRequest(
            dockerfile="Dockerfile",
            labels=tuple(labels.items()),
            build_args=rendered.build_args,
            cache_from=(),  # the backend's cache (``BuildCache``) says which
            network_mode=self.options.network_mode,
            platform=rendered.cell.platform,
        )
        built = self._build_and_tag(
            job,
            request,
            rendered.context_tar,
            tags,
            write,
            done,
            input_digest=rendered.input_digest,
            base_digest=base_digest,
            built_on=self.options.today,
        )
        return self._stage(built, write, rendered.cell.platform)

    def _reuse(
        self,
        rendered: RenderedCell,
        tags: tuple[str, ...],
        cache_registry: BuildRegistry | None,
        base_digest: str | None,
        write: Callable[[str], None],
        done: Callable[..., CellResult],
    ) -> CellResult | None:
        """The record of a cell whose image exists already (here, or staged in the registry from
        the same inputs); None when it is to be built."""
        existing = reusable(self.images.cell_image(rendered, tags), self.options.extra_labels, write)
        if existing is None and cache_registry is not None:
            found = self.backend.registry_reuse(rendered, cache_registry, self.options.extra_labels, write)
            if found.staged is not None:  # nothing pulled: verify --pull and publish work from the registry
                return done(
                    "skipped",
                    image_id=found.staged.digest,
                    tags=(),
                    input_digest=rendered.input_digest,
                    base_digest=base_digest,
                    built_on=self.options.today,
                    staged=found.staged,
                )
            existing = reusable(found.image, self.options.extra_labels, write)
        if existing is None:
            return None
        write(f"skipped: image {existing['Id']} already has input digest {rendered.input_digest}")
        present = set(existing.get("RepoTags") or ())
        self._tag(str(existing["Id"]), tuple(t for t in tags if t not in present), write)
        # The base the existing image was built from, not the one the engine holds now; its label
        # (perhaps a staged image's) only as a reference the report's reader takes back.
        built_from = (existing.get("Labels") or {}).get(naming.BASE_DIGEST_LABEL)
        if not isinstance(built_from, str) or IMAGE_REFERENCE.problem(built_from):
            built_from = None
        return self._stage(
            skipped(
                done,
                existing,
                tags,
                rendered.input_digest,
                base_digest=built_from or base_digest,
                built_on=self.options.today,  # the day of the dated tags just put on it
            ),
            write,
            rendered.cell.platform,
        )

    def _stage(
        self, result: CellResult, write: Callable[[str], None], platform: str, pushed: bool = False
    ) -> CellResult:
        """With --push: the cell's image staged in the registry (its digest and pull cost recorded);
        ``pushed``: the builder pushed it already, recorded once the registry serves it."""
        if not self.options.push or result.staged is not None:
            return result
        assert self.remote is not None, "push needs a registry (the CLI asks for one)"
        stage = self.remote.pushed_by_buildkit if pushed else self.remote.stage
        try:
            return stage(result, write, platforms.get(platform))
        except StagingFailed as failed:
            raise JobFailed(failed.message) from None

    def _build_base(
        self, job: BaseJob, write: Callable[[str], None], done: Callable[..., CellResult]
    ) -> CellResult:
        base = job.local_base
        tags = (base.image,)
        current = inspect_image(self.api, base.image)
        labels = ((current or {}).get("Config") or {}).get("Labels") or {}
        if (
            not self.options.force
            and current is not None
            and labels.get(naming.CONTEXT_DIGEST_LABEL) == job.context_digest
        ):
            write(f"skipped: {base.image} already has context digest {job.context_digest}")
            return skipped(done, current, tags, job.context_digest)
        request = BuildRequest(
            dockerfile=base.dockerfile,
            labels=((naming.CONTEXT_DIGEST_LABEL, job.context_digest), *self.options.extra_labels),
            build_args=base.args,
            cache_from=(),
            network_mode=self.options.network_mode,
            platform=base.platform,
        )
        return self._build_and_tag(
            job, request, lambda: local_base_context(base), tags, write, done, input_digest=job.context_digest
        )

    def _build_and_tag(
        self,
        job: Job,
        request: BuildRequest,
        context: Callable[[], IO[bytes]],
        tags: tuple[str, ...],
        write: Callable[[str], None],
        done: Callable[..., CellResult],
        **fields: Any,
    ) -> CellResult:
        """Build untagged, then tag: an image carries its tags only once the engine finished it."""
        self.progress.event(job.name, "building")
        push_to = None
        if self.options.push and job.name not in self._built_on:  # a cell's: bases are built FROM
            assert self.remote is not None and fields.get("input_digest")
            push_to = naming.reference(self.remote.staging_name, naming.staging_tag(fields["input_digest"]))
        cache = self._cache.get(job.name, BuildCache())
        built = self.backend.build(request, context, tags[0], push_to, cache, write, self._running_build)
        if built.pushed is not None:  # no tag here: staged once the registry serves what was pushed
            pushed = done("built", image_id=built.image_id, tags=(), **fields)
            return self._stage(pushed, write, request.platform or platforms.DEFAULT, pushed=True)
        self._tag(built.image_id, tags, write)
        image = inspect_image(self.api, built.image_id)
        return done(
            "built", image_id=built.image_id, tags=tags, size=image.get("Size") if image else None, **fields
        )

    def _running_build(self, build: Abortable) -> contextlib.AbstractContextManager[None]:
        return self.state.running(build, self.options.timeout_s)

    def _tag(self, image_id: str, tags: tuple[str, ...], write: Callable[[str], None]) -> None:
        for reference in tags:
            repository, tag = naming.split_reference(reference)
            self.api.tag(image_id, repository, tag, force=True)
            write(f"tagged {reference}")
