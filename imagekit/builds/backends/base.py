"""What ``imagekit.builds.builder.Builder`` asks of the builder that turns a job into an image.

``Builder`` schedules the jobs, decides what is reused, tags an image only once it is finished and
stages it; a backend is everything that differs between builders: the Dockerfiles it takes, the run
it needs (secrets), the cache it builds with, how it builds and where the image ends up (the
engine, or the registry straight away). ``imagekit.builds.backends.choose.backend_for`` picks one,
once a run, from ``BuilderKind`` (``imagekit.core.build_kinds``: the one spelling of the builders).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol

import docker

from imagekit.builds.registry_use import BuildRegistry
from imagekit.builds.run_state import Abortable
from imagekit.core.build_kinds import Compression
from imagekit.engine.client import BuildRequest
from imagekit.plan.cells import Plan
from imagekit.plan.schema import BuildSettings
from imagekit.render.dockerfile import RenderedCell
from imagekit.report.store import Staged

Write = Callable[[str], None]
# Registers a running build with the run (``RunState.running``): Ctrl-C, --timeout and an engine
# failure stop it through the Abortable.
Running = Callable[[Abortable], contextlib.AbstractContextManager[None]]


@dataclass(frozen=True)
class Setup:
    """What a backend is opened with: the run's resolved options that concern the builder."""

    api: docker.APIClient
    compression: Compression  # of the images it writes (zstd: a BuildKit builder's only)
    buildx_builder: str | None  # a buildx builder, or a Docker context, to build on
    push_registry: str | None  # the registry --push stages cells in; None: no --push
    state_dir: Path  # the run's state directory (a backend's work files go below it)
    say: Write  # one progress event of the run ("build push: ...")


@dataclass(frozen=True)
class BuildCache:
    """Where one build takes cached steps from and writes them to."""

    engine_images: tuple[str, ...] = ()  # images pulled into the engine to take steps from
    registry_from: str | None = None  # a registry cache read (BuildKit's, every stage)
    registry_to: str | None = None  # a registry cache written


@dataclass(frozen=True)
class RegistryReuse:
    """A cell's image another runner staged from the same inputs: ``staged`` (read in the registry,
    nothing pulled) or ``image`` (pulled into the engine: its image-list summary); neither: none."""

    staged: Staged | None = None
    image: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Built:
    """A finished build: ``image_id`` in the engine, or with ``pushed``, the manifest digest the
    builder pushed to that staging reference itself (nothing in the engine to tag)."""

    image_id: str
    pushed: str | None = None


class BuildBackend(Protocol):
    """One builder. A new one (a remote BuildKit, say) is one module of this package and its tests,
    plus its name: a value of ``BuilderKind`` (``imagekit.core.build_kinds``) and a line of ``BACKENDS``
    (``imagekit.builds.backends.choose``; a test holds the two equal). The module's class provides:

    - ``__init__(setup: Setup)``: opened once a run; an unfit engine or tool is refused there, as
      one ImagekitError line, before anything is built;
    - ``render``: what the renderer is told (``BuildSettings``: its kind, in every input digest
      but the classic builder's, and the compression); every builder but the classic one takes
      BuildKit's Dockerfiles (``BuildSettings.on_buildkit``);
    - ``session``: what the whole run needs (the index credentials as a secret), checked first;
    - ``registry_reuse``: how an image staged by another runner from the same inputs is reused;
    - ``cache``: where a cell's build takes cached steps from and writes them to;
    - ``build``: one image, built untagged (JobFailed naming the failed step; BuildAborted when
      stopped through ``running``), in the engine, or pushed by the builder itself when given a
      staging reference and it can.
    """

    render: BuildSettings
    # Whether ``build --push`` can leave the engine without the image (pushed by the builder
    # itself, or reused from the registry unpulled): a check that follows pulls the staged digest.
    pushes_past_the_engine: ClassVar[bool]

    def __init__(self, setup: Setup) -> None: ...

    def session(
        self, plan: Plan, secret_files: Mapping[str, Path], env: Mapping[str, str]
    ) -> contextlib.AbstractContextManager[None]:
        """The run's builds happen inside it; raises InputError before any build if a secret is
        unusable."""
        ...

    def registry_reuse(
        self,
        rendered: RenderedCell,
        registry: BuildRegistry,
        required_labels: tuple[tuple[str, str], ...],
        write: Write,
    ) -> RegistryReuse:
        """The image of ``rendered``'s input digest staged in ``registry``, if any."""
        ...

    def cache(
        self, rendered: RenderedCell, source: BuildRegistry | None, target: BuildRegistry | None, write: Write
    ) -> BuildCache:
        """The cache of ``rendered``'s build: read from ``source`` (None: --no-cache-from or no
        registry), written to ``target`` (None: no --push)."""
        ...

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
        """``request`` built (``name``: what the image is called while it is built and loaded);
        ``push_to``: the staging reference a cell may be pushed to straight away (None: the image
        is wanted in the engine)."""
        ...
