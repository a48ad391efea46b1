"""The classic builder: one image through the engine's own build endpoint.

docker-py's build API (``imagekit.engine.client.BuildStream``), read line by line into the job's
log; the step's error ends it. Its Dockerfiles take no BuildKit syntax, its cache is the engine's
own layer cache, fed from a registry by pulling the cell's last staged or published image
(``BuildRegistry.cache_source``), and its images are in the engine, pushed from there when staged.
``Builder`` keeps everything else, as for the BuildKit backend (``imagekit.builds.backends.buildkit``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, ClassVar

import docker
import requests
from docker.errors import APIError

from imagekit.builds.backends.base import BuildCache, Built, RegistryReuse, Running, Setup, Write
from imagekit.builds.bases import holds_platform
from imagekit.builds.jobs import TAIL_LINES, JobFailed
from imagekit.builds.registry_use import BuildRegistry
from imagekit.core import platforms
from imagekit.core.errors import ImagekitError
from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.secret_values import Lines
from imagekit.core.text import elided
from imagekit.engine.client import BuildRequest, BuildStream, inspect_image
from imagekit.plan.cells import Plan
from imagekit.plan.schema import BuildSettings
from imagekit.render.dockerfile import RenderedCell
from imagekit.report.store import BuildReport

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the classic builder colours a step's stderr


class ClassicBackend:
    """``BuildBackend`` of the engine's build endpoint (``imagekit.builds.backends.base``)."""

    pushes_past_the_engine: ClassVar[bool] = False  # the engine builds it, holds it and pushes it

    def __init__(self, setup: Setup) -> None:
        self.api = setup.api
        self.render = BuildSettings(builder="classic", compression=setup.compression)

    @contextlib.contextmanager
    def session(self, plan: Plan, secret_files: Mapping[str, Path], env: Mapping[str, str]) -> Iterator[None]:
        yield  # no secrets: the plan's rules refuse index credentials for this builder

    def registry_reuse(
        self,
        rendered: RenderedCell,
        registry: BuildRegistry,
        required_labels: tuple[tuple[str, str], ...],
        write: Write,
    ) -> RegistryReuse:
        # pulled: the engine holds every image this builder builds FROM or tags
        return RegistryReuse(image=registry.staged_elsewhere(rendered, write))

    def cache(
        self, rendered: RenderedCell, source: BuildRegistry | None, target: BuildRegistry | None, write: Write
    ) -> BuildCache:
        # the engine's layer cache, from the cell's last image pulled; it writes no registry cache
        return BuildCache(engine_images=source.cache_source(rendered, write) if source else ())

    def build(
        self,
        request: BuildRequest,
        context: Callable[[], IO[bytes]],
        name: str,
        push_to: str | None,
        cache: BuildCache,
        write: Write,
        running: Running,
    ) -> Built:
        request = dataclasses.replace(request, cache_from=cache.engine_images)
        with context() as tar:
            image_id = build_image(self.api, request, tar, write, running)
        platform = platforms.get(request.platform) if request.platform else None
        if platform is not None and not holds_platform(inspect_image(self.api, image_id) or {}, platform):
            # the classic builder's cache does not key on the platform: a step with no
            # per-platform parent (FROM scratch, COPY) is answered from another platform's build
            write(f"the cache gave another platform's image; building again for {platform.name} without it")
            with context() as tar:
                again = dataclasses.replace(request, nocache=True)
                image_id = build_image(self.api, again, tar, write, running)
            if not holds_platform(inspect_image(self.api, image_id) or {}, platform):
                raise JobFailed(f"the engine built no {platform.name} image (is emulation registered?)")
        return Built(image_id)


def build_image(
    api: docker.APIClient,
    request: BuildRequest,
    context: IO[bytes],
    write: Write,
    running: Running,
) -> str:
    """Run one build to its image id; raises JobFailed with the step's error (``running`` makes
    it stoppable: BuildAborted then)."""
    stream = BuildStream(api, request, context)
    image_id: str | None = None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    # The engine sends a step's output in chunks as the step wrote it: whole lines are written, so
    # that a secret value split over two chunks is masked (by ``write``, by JobFailed) whole.
    output = Lines()

    def written(lines: list[str]) -> None:
        for part in lines:
            plain = _ANSI.sub("", part)
            write(plain)
            tail.append(plain)

    with running(stream):
        for line in stream.lines():
            if "stream" in line:
                written(output.feed(str(line["stream"])))
            if "error" in line:
                written(output.flush())
                failed = JobFailed(" ".join(str(line["error"]).split()), tuple(tail))
                write(elided(f"ERROR: {failed.message}"))
                raise failed
            aux = line.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = str(aux["ID"])
    written(output.flush())
    if image_id is None:
        raise JobFailed("the engine ended the build without an image id", tuple(tail))
    return image_id


_RUNNING_IN = re.compile(r"---> Running in ([0-9a-f]{12,64})\s*$", re.MULTILINE)


def sweep_crashed_steps(api: docker.APIClient, previous: BuildReport | None, logs: Path) -> list[str]:
    """Remove the build-step containers that an engine crash left in the previous run.

    The classic builder removes a step's container itself (forcerm), unless the engine dies under
    it; then the container is still there when the engine comes back. It carries none of
    imagekit's labels (they land on the image at the end), but the cell's log names it
    (``---> Running in <id>``) and the report says which cells the engine failed under.
    """
    if previous is None:
        return []
    removed: list[str] = []
    for result in (*previous.bases, *previous.cells):
        if result.status != "failed" or "stopped answering" not in (result.error or ""):
            continue
        try:  # a regular file, and not past the report's own size limit: never a FIFO to block on
            raw = read_regular_file(logs / f"{result.id}.log", STATE_BYTES, "the build log")
        except (OSError, ImagekitError):
            continue
        text = raw.decode("utf-8", errors="replace")
        for container in _RUNNING_IN.findall(text):
            try:
                if api.inspect_container(container)["State"].get("Running"):
                    continue  # not a crash's leftover: something is using it
                api.remove_container(container, force=True)
            except (APIError, requests.RequestException):
                continue  # gone already (the usual case), or refused: nothing of ours to do
            removed.append(container)
    return removed
