"""Stage 3: build the selected cells (and the local bases they derive from) on a Docker engine.

The order of work: resolve every base reference (mirror, pull when missing, record its digest,
optionally pin it), render every cell, then run a dependency graph on a bounded thread pool. A
job starts when what it derives from has finished; a failure fails only its dependents unless
``fail_fast``. Images are built untagged and tagged only after the engine reports the finished
image, so an interrupted, timed-out or failed build never carries a cell's tag.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import IO, Any, Literal

import docker
import requests
from docker.errors import APIError, DockerException

from imagekit.context import cell_context, local_base_context
from imagekit.contract import LABEL_PREFIX
from imagekit.engine import (
    BuildAborted,
    BuildRequest,
    BuildStream,
    EngineFailure,
    alive,
    engine_address,
    inspect_image,
    is_engine_failure,
    pull,
    repo_digest,
    split_reference,
    unreachable,
)
from imagekit.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.matrix import Cell, LocalBase, Plan
from imagekit.progress import Progress
from imagekit.render import RenderedCell, Renderer, local_base_digest
from imagekit.report import LOGS_DIR, BuildReport, CellResult, Status, read_report

CONTEXT_DIGEST_LABEL = f"{LABEL_PREFIX}context-digest"
INPUT_DIGEST_LABEL = f"{LABEL_PREFIX}input-digest"
BASE_DIGEST_LABEL = f"{LABEL_PREFIX}base-digest"
TAIL_LINES = 20
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the classic builder colours a step's stderr
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class BuildOptions:
    state_dir: Path
    today: date
    jobs: int = 1
    force: bool = False
    timeout_s: float | None = None
    fail_fast: bool = False
    pin_base_digests: bool = False
    mirrors: tuple[tuple[str, str], ...] = ()  # prefix -> replacement; the command line's first
    cache_from: bool = True
    network_mode: str | None = None
    extra_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BuildOutcome:
    report: BuildReport
    interrupted: bool


# -- base references --------------------------------------------------------------------------------


def parse_mapping(pairs: list[str], what: str) -> tuple[tuple[str, str], ...]:
    """``SRC=DST`` strings from the command line as pairs."""
    out = []
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if not sep or not source or not target or any(c.isspace() for c in pair):
            raise InputError(
                f"{what} {pair!r}: expected SRC=DST (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"
            )
        if what == "--label" and source.startswith(LABEL_PREFIX):
            raise InputError(
                f"--label {pair!r}: labels under {LABEL_PREFIX}* are imagekit's own (what it checks,"
                " skips and publishes by); choose another key"
            )
        out.append((source, target))
    return tuple(out)


def apply_mirrors(ref: str, mirrors: tuple[tuple[str, str], ...]) -> str:
    """Replace the longest matching name prefix (at a path, tag or digest boundary)."""
    name, _ = split_reference(ref)
    best: tuple[str, str] | None = None
    for source, target in mirrors:
        if (name == source or name.startswith(source + "/")) and (best is None or len(source) > len(best[0])):
            best = (source, target)
    if best is None:
        return ref
    return best[1] + ref[len(best[0]) :]


@dataclass(frozen=True)
class ResolvedBase:
    reference: str  # after mirroring, before pinning: what the report records
    build_from: str  # what the Dockerfile's FROM says (pinned when asked)
    digest: str | None  # name@sha256:... or the image id
    error: str | None


def _previous_report(state_dir: Path) -> BuildReport | None:
    """The last report in ``state_dir``, or None when there is none (or it is unreadable)."""
    try:
        return read_report(state_dir)
    except InputError:
        return None


def _recorded_digests(state_dir: Path) -> dict[str, str]:
    """base reference -> repo digest from the previous report, for reproducible pinning."""
    try:
        report = read_report(state_dir)
    except InputError:
        return {}
    return {
        r.base_image: r.base_digest for r in report.cells if r.base_digest and "@sha256:" in r.base_digest
    }


def resolve_base(
    api: docker.APIClient, reference: str, pin: bool, recorded: Mapping[str, str], log: Callable[[str], None]
) -> ResolvedBase:
    """Make sure the base is in the engine (pulling with retries) and learn its digest."""
    wanted = recorded.get(reference) if pin else None
    target = wanted or reference
    try:
        image = inspect_image(api, target)
        if image is None:
            log(f"pulling {target}")
            pull(api, target)
            image = inspect_image(api, target)
        if image is None:
            return ResolvedBase(reference, reference, None, f"{target} is not in the engine after pulling it")
    except (APIError, requests.RequestException, OSError) as exc:
        if is_engine_failure(exc) and not alive(api):
            raise unreachable(exc) from None
        return ResolvedBase(reference, reference, None, f"cannot pull base {target}: {_one_line(exc)}")
    digest = wanted or repo_digest(image, reference)
    if pin and digest is None:
        log(f"{reference} has no registry digest (a local image); built from its name, not pinned")
    return ResolvedBase(
        reference=reference,
        build_from=digest if pin and digest else reference,
        digest=digest or str(image["Id"]),
        error=None,
    )


_RUNNING_IN = re.compile(r"---> Running in ([0-9a-f]{12,64})\s*$", re.MULTILINE)


def sweep_crashed_steps(api: docker.APIClient, state_dir: Path) -> list[str]:
    """Remove the build-step containers that an engine crash left in the previous run.

    The classic builder removes a step's container itself (forcerm), unless the engine dies under
    it; then the container is still there when the engine comes back. It carries none of
    imagekit's labels (they land on the image at the end), but the cell's log names it
    (``---> Running in <id>``) and the report says which cells the engine failed under.
    """
    try:
        report = read_report(state_dir)
    except InputError:
        return []
    removed: list[str] = []
    for result in (*report.bases, *report.cells):
        if result.status != "failed" or "stopped answering" not in (result.error or ""):
            continue
        try:
            text = (state_dir / LOGS_DIR / f"{result.id}.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for container in _RUNNING_IN.findall(text):
            try:
                if api.inspect_container(container)["State"].get("Running"):
                    continue  # not a crash's leftover: something is using it
                api.remove_container(container, force=True)
            except (APIError, requests.RequestException):
                continue  # gone already (the usual case), or refused: nothing of ours to do
            removed.append(container)
    return removed


def _one_line(exc: BaseException) -> str:
    text = exc.explanation if isinstance(exc, APIError) and exc.explanation else str(exc)
    return " ".join(str(text).split()) or type(exc).__name__


# -- the job graph -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    kind: Literal["cell", "base"]
    depends_on: tuple[str, ...]
    base_reference: str
    rendered: RenderedCell | None = None
    local_base: LocalBase | None = None
    base_error: str | None = None
    external_digest: str | None = None  # for cells on a pulled base
    context_digest: str | None = None  # for local bases


def _base_job_name(base: LocalBase) -> str:
    return f"base-{base.name}"


def local_base_froms(base: LocalBase) -> tuple[str, ...]:
    try:
        text = (base.context / base.dockerfile).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"base {base.name}: cannot read {base.context / base.dockerfile}: {exc.strerror}"
        ) from None
    return tuple(_FROM.findall(text))


def plan_jobs(
    plan: Plan,
    cells: tuple[Cell, ...],
    renderer: Renderer,
    resolved: Mapping[str, ResolvedBase],
    options: BuildOptions,
) -> list[Job]:
    """Bases first in dependency order, then the cells; each job names the jobs it waits for."""
    by_image = {base.image: base for base in plan.local_bases}
    needed: dict[str, LocalBase] = {}

    def need(base: LocalBase, chain: tuple[str, ...]) -> None:
        if base.name in chain:
            raise InputError(
                f"local bases derive from each other in a loop: {' -> '.join((*chain, base.name))}"
            )
        for parent in local_base_froms(base):
            if parent in by_image:
                need(by_image[parent], (*chain, base.name))
        needed.setdefault(base.name, base)

    for cell in cells:
        if cell.local_base is not None:
            need(cell.local_base, ())

    jobs: list[Job] = []
    for base in needed.values():
        parents = tuple(_base_job_name(by_image[p]) for p in local_base_froms(base) if p in by_image)
        jobs.append(
            Job(
                name=_base_job_name(base),
                kind="base",
                depends_on=parents,
                base_reference=", ".join(local_base_froms(base)),
                local_base=base,
                context_digest=local_base_digest(base, renderer.hasher),
            )
        )
    repository = image_repository(plan)
    rendered_cells = []
    for cell in cells:
        resolution = resolved.get(cell.base_image)
        built_from = cell.base_image if resolution is None else resolution.build_from
        rendered_cells.append((renderer.render(cell, build_from=built_from), resolution))
    produced = {
        f"{repository}:{tag}": item.cell.id
        for item, _ in rendered_cells
        for tag in item.tags(plan.matrix, options.today)
    }
    for item, resolution in rendered_cells:
        cell = item.cell
        depends: tuple[str, ...] = ()
        if cell.local_base is not None:
            depends = (_base_job_name(cell.local_base),)
        elif cell.base_image in produced:  # a cell built on another cell of this matrix
            depends = (produced[cell.base_image],)
        jobs.append(
            Job(
                name=cell.id,
                kind="cell",
                depends_on=depends,
                base_reference=resolution.reference if resolution else cell.base_image,
                rendered=item,
                base_error=resolution.error if resolution else None,
                external_digest=resolution.digest if resolution else None,
            )
        )
    return jobs


def image_repository(plan: Plan) -> str:
    publish = plan.matrix.publish
    return f"{publish.registry}/{publish.repository}" if publish.registry else publish.repository


# -- running one job ---------------------------------------------------------------------------------


@dataclass
class _RunState:
    """Shared between the scheduler and the workers; guarded by ``lock``."""

    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    engine_error: str | None = None
    active: set[BuildStream] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, reason: str, engine_error: str | None = None) -> None:
        with self.lock:
            if not self.cancel.is_set():
                self.cancel_reason = reason
                if engine_error:
                    self.engine_error = engine_error
            self.cancel.set()
            streams = list(self.active)
        for stream in streams:
            stream.abort(reason)


class _JobFailed(Exception):
    def __init__(self, message: str, tail: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.tail = tail


class Builder:
    def __init__(self, api: docker.APIClient, plan: Plan, options: BuildOptions, progress: Progress) -> None:
        self.api = api
        self.plan = plan
        self.options = options
        self.progress = progress
        self.repository = image_repository(plan)
        self.state = _RunState()
        self.results: dict[str, CellResult] = {}
        self.logs = options.state_dir / LOGS_DIR
        self._by_input_digest: dict[str, dict[str, Any]] | None = None
        self._index_lock = threading.Lock()

    # -- the whole run

    def run(self, cells: tuple[Cell, ...]) -> BuildOutcome:
        started = datetime.now(tz=timezone.utc)
        clock = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        interrupted = False
        jobs: list[Job] = []
        previous = _previous_report(self.options.state_dir)
        try:
            for container in sweep_crashed_steps(self.api, self.options.state_dir):
                self.progress.event("engine", "removed", f"build step container {container} a crash left")
            jobs = self.prepare(cells)
            self.progress.planned([j.name for j in jobs])
            self.schedule(jobs)
        except KeyboardInterrupt:
            interrupted = True
            self.state.stop("interrupted (Ctrl-C)")
            self.progress.event("build", "interrupted", "running builds stopped")
        report = BuildReport(
            matrix=self.plan.source_name,
            started=started.isoformat(timespec="seconds"),
            duration_s=round(time.monotonic() - clock, 2),
            engine=engine_address(),
            cells=tuple(self._final(c.id, "cell", c.base_image) for c in cells),
            bases=tuple(self._final(j.name, "base", j.base_reference) for j in jobs if j.kind == "base"),
        ).keeping_verifications(previous)
        return BuildOutcome(report, interrupted)

    def _final(self, name: str, kind: Literal["cell", "base"], base: str) -> CellResult:
        found = self.results.get(name)
        if found is not None:
            return found
        reason = self.state.engine_error or self.state.cancel_reason or "not started"
        status: Status = "failed" if self.state.engine_error else "cancelled"
        return _result(name, kind, status, base, error=reason)

    def prepare(self, cells: tuple[Cell, ...]) -> list[Job]:
        options = self.options
        mirrors = options.mirrors + tuple(self.plan.matrix.mirrors.items())
        mirrored = tuple(
            c
            if c.local_base is not None
            else dataclasses.replace(c, base_image=apply_mirrors(c.base_image, mirrors))
            for c in cells
        )
        recorded = _recorded_digests(options.state_dir) if options.pin_base_digests else {}
        local_images = {c.local_base.image for c in self.plan.cells if c.local_base is not None}
        produced_prefix = self.repository + ":"
        resolved: dict[str, ResolvedBase] = {}
        for cell in mirrored:
            ref = cell.base_image
            if (
                cell.local_base is not None
                or ref in resolved
                or ref in local_images
                or ref.startswith(produced_prefix)  # built by this run
            ):
                continue
            self.progress.event(ref, "resolving base")
            resolved[ref] = resolve_base(
                self.api, ref, options.pin_base_digests, recorded, functools.partial(self.progress.event, ref)
            )
        return plan_jobs(self.plan, mirrored, Renderer(self.plan), resolved, options)

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
                self.state.stop(f"stopped: imagekit failed ({type(exc).__name__}: {_one_line(exc)})")
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
            return self._final(job.name, job.kind, job.base_reference)
        for parent in job.depends_on:
            result = self.results.get(parent)
            if result is None:
                return "wait"
            if result.status in ("failed", "cancelled"):
                status: Status = "cancelled" if result.status == "cancelled" else "failed"
                return _result(
                    job.name,
                    job.kind,
                    status,
                    job.base_reference,
                    error=f"{parent} {result.status}; not built",
                )
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
            log = log_path.open("w", encoding="utf-8")
        except OSError as exc:
            message = f"cannot write the build log {log_path}: {exc.strerror or _one_line(exc)}"
            return _result(job.name, job.kind, "failed", job.base_reference, error=message)
        with log:

            def write(line: str) -> None:
                log.write(line if line.endswith("\n") else line + "\n")
                log.flush()
                tail.append(line.rstrip("\n"))
                self.progress.output(job.name, line)

            def done(status: Status, **values: Any) -> CellResult:
                return _result(
                    job.name,
                    job.kind,
                    status,
                    job.base_reference,
                    duration_s=round(time.monotonic() - clock, 2),
                    log=str(log_path),
                    **values,
                )

            try:
                if self.state.cancel.is_set():
                    write(f"not started: {self.state.cancel_reason}")
                    return self._final(job.name, job.kind, job.base_reference)
                if job.base_error:
                    raise _JobFailed(job.base_error)
                if job.kind == "base":
                    return self._build_base(job, write, done)
                return self._build_cell(job, write, done)
            except _JobFailed as failure:
                write(f"FAILED: {failure.message}")
                return done("failed", error=failure.message, error_tail=failure.tail or tuple(tail))
            except ImagekitError as exc:  # an unreadable context file, an unwritable log, ...
                if isinstance(exc, EnvironmentProblem):
                    self.state.stop(exc.message, engine_error=exc.message)
                write(f"FAILED: {exc.message}")
                return done("failed", error=exc.message, error_tail=tuple(tail))
            except BuildAborted as aborted:
                reason = self.state.engine_error or str(aborted)
                write(f"STOPPED: {reason}")
                status: Status = (
                    "cancelled" if self.state.cancel.is_set() and not self.state.engine_error else "failed"
                )
                return done(status, error=reason, error_tail=tuple(tail))
            except (EngineFailure, DockerException, requests.RequestException, OSError) as exc:
                message = _one_line(exc)
                if is_engine_failure(exc) and not alive(self.api):
                    message = f"the Docker engine at {engine_address()} stopped answering: {message}"
                    self.state.stop(message, engine_error=message)
                write(f"FAILED: {message}")
                return done("failed", error=message, error_tail=tuple(tail))

    def _existing(self, input_digest: str) -> dict[str, Any] | None:
        """The newest image already built from ``input_digest`` (its image-list summary).

        One listing of the engine's labelled images serves every cell of the run: a no-change
        rebuild then costs one engine query, not one (plus an inspect) per cell.
        """
        with self._index_lock:
            if self._by_input_digest is None:
                index: dict[str, dict[str, Any]] = {}
                for image in self.api.images(filters={"label": INPUT_DIGEST_LABEL}):
                    digest = (image.get("Labels") or {}).get(INPUT_DIGEST_LABEL)
                    if digest and image.get("Created", 0) >= index.get(digest, {}).get("Created", -1):
                        index[digest] = image
                self._by_input_digest = index
            return self._by_input_digest.get(input_digest)

    def _build_cell(
        self, job: Job, write: Callable[[str], None], done: Callable[..., CellResult]
    ) -> CellResult:
        rendered = job.rendered
        assert rendered is not None
        tags = tuple(f"{self.repository}:{t}" for t in rendered.tags(self.plan.matrix, self.options.today))
        base_digest = job.external_digest
        if rendered.cell.local_base is not None:
            image = inspect_image(self.api, rendered.cell.local_base.image)
            base_digest = str(image["Id"]) if image else None
        existing = None if self.options.force else self._existing(rendered.input_digest)
        if existing is not None:
            write(f"skipped: image {existing['Id']} already has input digest {rendered.input_digest}")
            present = set(existing.get("RepoTags") or ())
            self._tag(str(existing["Id"]), tuple(t for t in tags if t not in present), write)
            # The base the existing image was built from, not the one the engine holds now.
            built_from = (existing.get("Labels") or {}).get(BASE_DIGEST_LABEL)
            return done(
                "skipped",
                image_id=str(existing["Id"]),
                tags=tags,
                size=existing.get("Size"),
                input_digest=rendered.input_digest,
                base_digest=built_from or base_digest,
            )
        labels = {**rendered.build_labels(), **dict(self.options.extra_labels)}
        if base_digest:
            labels[BASE_DIGEST_LABEL] = base_digest
        request = BuildRequest(
            dockerfile="Dockerfile",
            labels=tuple(labels.items()),
            build_args=rendered.build_args,
            cache_from=self._cache_from(rendered, write),
            network_mode=self.options.network_mode,
        )
        return self._build_and_tag(
            job,
            request,
            lambda: cell_context(rendered),
            tags,
            write,
            done,
            input_digest=rendered.input_digest,
            base_digest=base_digest,
        )

    def _build_base(
        self, job: Job, write: Callable[[str], None], done: Callable[..., CellResult]
    ) -> CellResult:
        base = job.local_base
        assert base is not None and job.context_digest is not None
        tags = (base.image,)
        current = inspect_image(self.api, base.image)
        labels = ((current or {}).get("Config") or {}).get("Labels") or {}
        if (
            not self.options.force
            and current is not None
            and labels.get(CONTEXT_DIGEST_LABEL) == job.context_digest
        ):
            write(f"skipped: {base.image} already has context digest {job.context_digest}")
            return done(
                "skipped",
                image_id=str(current["Id"]),
                tags=tags,
                size=current.get("Size"),
                input_digest=job.context_digest,
            )
        request = BuildRequest(
            dockerfile=base.dockerfile,
            labels=((CONTEXT_DIGEST_LABEL, job.context_digest), *self.options.extra_labels),
            build_args=base.args,
            cache_from=(),
            network_mode=self.options.network_mode,
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
        with context() as tar:
            image_id = self._stream(job, request, tar, write)
        self._tag(image_id, tags, write)
        image = inspect_image(self.api, image_id)
        return done(
            "built", image_id=image_id, tags=tags, size=image.get("Size") if image else None, **fields
        )

    def _cache_from(self, rendered: RenderedCell, write: Callable[[str], None]) -> tuple[str, ...]:
        """The cell's last published image, so a fresh runner reuses its layers (torch).

        Only with a registry: locally the engine's own layer cache already serves, and the
        classic builder consults *only* the cache-from images once any is given.
        """
        if not self.options.cache_from or not self.plan.matrix.publish.registry:
            return ()
        reference = f"{self.repository}:{rendered.cell.readable_tag}"
        if inspect_image(self.api, reference) is None:
            try:
                pull(self.api, reference)
                write(f"cache: pulled {reference}")
            except (APIError, requests.RequestException, OSError) as exc:
                write(f"cache: {reference} not available ({_one_line(exc)}); building without it")
                return ()
        return (reference,)

    def _stream(
        self, job: Job, request: BuildRequest, context: IO[bytes], write: Callable[[str], None]
    ) -> str:
        """Run one build to its image id; raises _JobFailed with the step's error."""
        stream = BuildStream(self.api, request, context)
        with self.state.lock:
            if self.state.cancel.is_set():
                raise BuildAborted(self.state.cancel_reason)
            self.state.active.add(stream)
        timer = None
        if self.options.timeout_s:
            timer = threading.Timer(
                self.options.timeout_s, stream.abort, (f"timed out after {self.options.timeout_s:g}s",)
            )
            timer.daemon = True
            timer.start()
        image_id: str | None = None
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        try:
            for line in stream.lines():
                if "stream" in line:
                    text = _ANSI.sub("", str(line["stream"]))
                    for part in text.splitlines():
                        write(part)
                        tail.append(part)
                if "error" in line:
                    message = " ".join(str(line["error"]).split())
                    write(f"ERROR: {message}")
                    raise _JobFailed(message, tuple(tail))
                aux = line.get("aux")
                if isinstance(aux, dict) and aux.get("ID"):
                    image_id = str(aux["ID"])
        except BuildAborted as aborted:
            if timer is not None and str(aborted).startswith("timed out"):
                raise _JobFailed(str(aborted), tuple(tail)) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
            with self.state.lock:
                self.state.active.discard(stream)
        if image_id is None:
            raise _JobFailed("the engine ended the build without an image id", tuple(tail))
        return image_id

    def _tag(self, image_id: str, tags: tuple[str, ...], write: Callable[[str], None]) -> None:
        for reference in tags:
            repository, tag = split_reference(reference)
            self.api.tag(image_id, repository, tag, force=True)
            write(f"tagged {reference}")


def _result(
    name: str,
    kind: Literal["cell", "base"],
    status: Status,
    base_image: str,
    *,
    image_id: str | None = None,
    tags: tuple[str, ...] = (),
    size: int | None = None,
    input_digest: str | None = None,
    base_digest: str | None = None,
    duration_s: float = 0.0,
    log: str | None = None,
    error: str | None = None,
    error_tail: tuple[str, ...] = (),
) -> CellResult:
    return CellResult(
        id=name,
        kind=kind,
        status=status,
        image_id=image_id,
        tags=tags,
        size=size,
        input_digest=input_digest,
        base_image=base_image,
        base_digest=base_digest,
        duration_s=duration_s,
        log=log,
        error=error,
        error_tail=error_tail,
    )
