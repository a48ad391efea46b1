"""The BuildKit builder: one ``docker buildx build`` per image, run as a child process.

Why the CLI and not a library: BuildKit's own protocol is gRPC over a session the CLI negotiates
(the issue rules out a home-made client), and python-on-whales, the one well-kept wrapper, has no
``rawjson`` progress and blocks in ``subprocess.run`` with no handle to cancel one build (Ctrl-C,
``--timeout``, ``--fail-fast``). The CLI is driven here the way ``BuildStream`` drives the engine's
build endpoint: a process in its own group, its machine-readable progress read as it comes, cut
with SIGTERM (BuildKit then cancels the solve and removes the step's container).

Pinned to what buildx 0.13.1 (Debian 13's, the engine of record) does, measured on dockerd 26:
- ``--progress rawjson`` writes pretty-printed JSON objects (one per solve status) to stderr, then
  plain text on failure; a vertex error is not always fatal (a missing cache ref is one), so the
  exit status decides and the failing step is the last errored vertex that is not a cache import;
- dockerd 26's image exporter always unpacks, which conflicts with ``rewrite-timestamp``
  (moby#51493, fixed in Docker 29): images go out as an OCI tar (``--output type=oci``) that the
  caller loads with docker-py, keeping the manifest digest; dockerd 28.5.2 still refuses it
  ("conflicts with unpack") for ``--load``, ``type=docker`` and ``type=image`` without
  ``store=false``, so a local build keeps the tar;
- a push goes straight to the registry (``type=image,push=true,store=false``, ``BuildxRequest.push``):
  nothing is unpacked, so ``rewrite-timestamp`` holds, and there is no tar and no load. Measured
  with buildx 0.29.1 on dockerd 28.5.2; buildx 0.13.1 pushed and then failed ("tag does not
  exist"), so an older buildx than MIN_PUSH_BUILDX keeps the tar and loads (``push_refusal``);
- a docker-driver builder of another Docker context is chosen with ``docker --context NAME``;
  ``--builder NAME`` refuses it ("use `docker --context=NAME buildx`").
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from imagekit.core import naming
from imagekit.core.build_kinds import Compression
from imagekit.core.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.core.limits import BUILDX_EVENT_BYTES, BUILDX_QUERY_DEADLINE_S, STATE_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.secret_values import Lines
from imagekit.core.text import printable, redact, safe_line
from imagekit.engine.client import BuildAborted

# The oldest buildx whose behaviour this module is written against: rawjson progress and the
# metadata file's keys (0.13.0).
MIN_BUILDX = (0, 13, 0)
# The oldest buildx measured to push with store=false and rewrite-timestamp and exit 0 (0.29.1;
# 0.13.1 pushed, then failed "tag does not exist"; the versions between were not measured, so
# they keep the archive round trip, which works on each).
MIN_PUSH_BUILDX = (0, 29, 0)
ABORT_GRACE_S = 10.0  # SIGTERM lets BuildKit cancel the solve; past this, SIGKILL
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)")
_BUILDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Buildx:
    """Which buildx runs the builds, found once per run (``find``)."""

    cli: str  # the docker CLI's path
    version: str
    context: str | None = None  # `docker --context NAME`: a docker-driver builder of another engine
    builder: str | None = None  # `--builder NAME`: a docker-container, remote or kubernetes builder

    def command(self, *args: str) -> list[str]:
        context = ("--context", self.context) if self.context else ()
        return [self.cli, *context, "buildx", *(("--builder", self.builder) if self.builder else ()), *args]


def _query(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=BUILDX_QUERY_DEADLINE_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"`{' '.join(argv[1:])}` gave no answer within {BUILDX_QUERY_DEADLINE_S:g}s: is the builder"
            " reachable? (or use --builder classic)"
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run {argv[0]}: {exc.strerror}") from None


def _shown(text: str, limit: int) -> str:
    """Text buildx printed as a line may show it: masked first (a secret cut in two would pass)."""
    return printable(redact(text))[:limit]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _shown(lines[-1], 300) if lines else "no output"


def find(selection: str | None) -> Buildx:
    """The buildx to build with, checked: present, new enough, and (``selection``) answering."""
    cli = shutil.which(os.environ.get("IMAGEKIT_DOCKER_CLI") or "docker")
    if cli is None:
        raise EnvironmentProblem(
            "--builder buildkit needs the docker CLI with its buildx plugin, and there is no `docker`"
            " on PATH: install them (scripts/engine.sh docker) or use --builder classic"
        )
    done = _query([cli, "buildx", "version"])
    found = _VERSION.search(done.stdout) if done.returncode == 0 else None
    if found is None:
        raise EnvironmentProblem(
            f"--builder buildkit needs docker buildx, and `docker buildx version` failed"
            f" ({_last_line(done.stderr or done.stdout)}): install it (Debian: docker-buildx;"
            " scripts/engine.sh docker) or use --builder classic"
        )
    version = tuple(int(part) for part in found.groups())
    shown = ".".join(found.groups())
    if version < MIN_BUILDX:
        raise EnvironmentProblem(
            f"buildx {shown} is older than {'.'.join(map(str, MIN_BUILDX))}, the oldest imagekit's"
            " BuildKit builder reads (rawjson progress, metadata file): upgrade it or use --builder classic"
        )
    if selection is None:
        return Buildx(cli, shown)
    if not _BUILDER_NAME.fullmatch(selection):
        raise InputError(f"--buildx-builder {selection!r}: not a builder or Docker context name")
    done = _query([cli, "buildx", "inspect", selection])
    if done.returncode != 0:
        message = _last_line(done.stderr or done.stdout)
        if "no builder" in message:
            raise InputError(
                f"--buildx-builder {selection}: buildx knows no builder or Docker context of that name"
                " (`docker buildx ls` lists them; `docker context create` or `docker buildx create` adds one)"
            )
        raise EnvironmentProblem(f"--buildx-builder {selection}: {message}")
    driver = re.search(r"^Driver:\s*(\S+)", done.stdout, re.MULTILINE)
    status = re.search(r"^Status:\s*(\S+)", done.stdout, re.MULTILINE)
    if status is not None and status.group(1) not in ("running", "inactive"):
        raise EnvironmentProblem(f"--buildx-builder {selection}: the builder's status is {status.group(1)}")
    if driver is not None and driver.group(1) == "docker":
        buildx = Buildx(cli, shown, context=selection)
        reached = _query([cli, "--context", selection, "version", "--format", "{{.Server.Version}}"])
        if reached.returncode != 0:
            raise EnvironmentProblem(
                f"--buildx-builder {selection}: its engine does not answer ({_last_line(reached.stderr)})"
            )
        return buildx
    return Buildx(cli, shown, builder=selection)


# -- one build ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildxRequest:
    """One image, as ``docker buildx build`` arguments (the context comes as a tar on stdin)."""

    dockerfile: str
    labels: tuple[tuple[str, str], ...]
    build_args: tuple[tuple[str, str], ...]
    platform: str | None
    output: Path | None  # the OCI tar written here; None with ``push``
    name: str  # the reference the OCI tar names the image by (one of its own tags), or pushed to
    compression: Compression
    # The network of a RUN step without its own --network= (a user's template or local base):
    # none unless --network says otherwise; the engines run without a bridge to default to.
    network: str = "none"
    host_network: bool = False  # a step of the Dockerfile says RUN --network=host
    secrets: tuple[tuple[str, Path], ...] = ()  # (id, file): never the value
    cache_from: str | None = None  # a registry cache reference
    cache_to: str | None = None
    no_cache: bool = False
    push: bool = False  # straight to the registry as ``name``: no tar, nothing in the engine


def push_refusal(buildx: Buildx) -> str | None:
    """Why ``buildx`` cannot push a build straight to the registry (None: it can)."""
    found = _VERSION.search(buildx.version)
    version = tuple(int(part) for part in found.groups()) if found else (0, 0, 0)
    if version >= MIN_PUSH_BUILDX:
        return None
    return (
        f"buildx {buildx.version} is older than {'.'.join(map(str, MIN_PUSH_BUILDX))}, the oldest measured"
        " to push with rewrite-timestamp and store=false: each image goes through an OCI archive and"
        " the engine, then is pushed"
    )


def image_output(request: BuildxRequest) -> str:
    """The ``--output`` of ``request``: pushed by BuildKit itself, or written as an OCI tar."""
    if request.push:
        # store=false: the engine neither stores nor unpacks it, so rewrite-timestamp is allowed
        where: tuple[str, ...] = ("type=image", f"name={request.name}", "push=true", "store=false")
    else:
        where = ("type=oci", f"dest={request.output}", f"name={request.name}")
    return ",".join((*where, *compression_options(request.compression), "rewrite-timestamp=true"))


def compression_options(compression: Compression) -> tuple[str, ...]:
    """An image exporter's layer options: the build's layers in ``compression``, in OCI media
    types (without them dockerd 26 writes zstd layers into a Docker v2 manifest). zstd is forced
    onto the base's layers too (a node then needs zstd alone); gzip keeps a base's layers as they
    are: recompressing a multi-GB base on every export cost ~100 s of a 430 s cold build."""
    forced = ("force-compression=true",) if compression == "zstd" else ()
    return (f"compression={compression}", *forced, "oci-mediatypes=true")


def registry_cache(ref: str) -> tuple[str, str]:
    """(--cache-from, --cache-to) of the registry cache ``ref``: every step's layers (mode=max),
    so a changed last step finds the earlier ones there. A failed cache write fails no build
    (ignore-error, BuildKit 0.11+): the image is built and, in bake, already pushed; the next build
    of the cell only starts colder. Distribution's filesystem driver (Debian's docker-registry,
    ``registry:2``) can refuse the cache manifest when two targets upload one layer at once: it
    rewrites the layer's link file in place and the other's manifest PUT reads it empty
    (distribution/distribution#4489); CI's bake test failed on it."""
    return (
        f"type=registry,ref={ref}",
        f"type=registry,ref={ref},mode=max,oci-mediatypes=true,ignore-error=true",
    )


def build_argv(buildx: Buildx, request: BuildxRequest, metadata: Path) -> list[str]:
    output = image_output(request)
    args = [
        "build",
        "--progress",
        "rawjson",
        "--metadata-file",
        str(metadata),
        # provenance holds the build's start time and invocation id: the platform manifest keeps
        # its digest, but the index around it changes on every build (README: Provenance)
        "--provenance=false",
        "--sbom=false",
        "--file",
        request.dockerfile,
        "--output",
        output,
    ]
    if request.platform:
        args += ["--platform", request.platform]
    for key, value in request.labels:
        args += ["--label", f"{key}={value}"]
    for key, value in request.build_args:
        args += ["--build-arg", f"{key}={value}"]
    args += ["--network", request.network]
    if request.host_network or request.network == "host":
        args += ["--allow", "network.host"]
    for secret_id, path in request.secrets:
        args += ["--secret", f"id={secret_id},src={path}"]
    if request.cache_from:
        args += ["--cache-from", registry_cache(request.cache_from)[0]]
    if request.cache_to:
        args += ["--cache-to", registry_cache(request.cache_to)[1]]
    if request.no_cache:
        args.append("--no-cache")
    return buildx.command(*args, "-")


@dataclass(frozen=True)
class StepStarted:
    step: str


@dataclass(frozen=True)
class StepCached:
    step: str


@dataclass(frozen=True)
class StepOutput:
    """One line a step printed (without its line end), masked (``imagekit.core.text.redact``)."""

    step: str
    text: str


@dataclass(frozen=True)
class StepFailed:
    step: str
    error: str


@dataclass(frozen=True)
class PlainText:
    """What buildx printed that is not progress (its final ERROR line, a warning)."""

    text: str


BuildxEvent = StepStarted | StepCached | StepOutput | StepFailed | PlainText


@dataclass
class _Vertices:
    """Vertex digest -> name, and which were reported started, cached, failed; and the unfinished
    last line of each step's output streams (stdout, stderr), by vertex."""

    names: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    output: dict[str, dict[str, Lines]] = field(default_factory=dict)

    def lines(self, digest: str, stream: str, text: str) -> Iterator[StepOutput]:
        """What a step printed, a whole line at a time: BuildKit sends output in chunks as the
        process wrote them, and a value split over two chunks is masked only on the whole line."""
        lines = self.output.setdefault(digest, {}).setdefault(stream, Lines()).feed(text)
        for line in lines:
            yield StepOutput(self.names.get(digest, ""), redact(line))

    def ended(self, digest: str | None) -> Iterator[StepOutput]:
        """The unfinished last lines of a step that has ended (of every step: ``digest`` None)."""
        vertices = [*self.output] if digest is None else [digest] if digest in self.output else []
        for vertex in vertices:
            for stream in self.output.pop(vertex).values():
                for line in stream.flush():
                    yield StepOutput(self.names.get(vertex, ""), redact(line))


def _events(status: Mapping[str, object], seen: _Vertices) -> Iterator[BuildxEvent]:
    # A step's end is told after the output in the same object, and after its unfinished last line.
    ended: list[tuple[str, BuildxEvent | None]] = []
    for vertex in status.get("vertexes") or ():  # type: ignore[attr-defined]
        if not isinstance(vertex, dict):
            continue
        # A step's name (its Dockerfile line) and error are repeated in the log and the error line.
        digest, name = str(vertex.get("digest", "")), safe_line(str(vertex.get("name", "")))
        seen.names[digest] = name
        if digest in seen.finished:
            continue
        if vertex.get("error"):
            seen.finished.add(digest)
            ended.append((digest, StepFailed(name, safe_line(str(vertex["error"])))))
        elif vertex.get("cached"):
            seen.finished.add(digest)
            ended.append((digest, StepCached(name)))
        else:
            if vertex.get("started") and digest not in seen.started:
                seen.started.add(digest)
                yield StepStarted(name)
            if vertex.get("completed"):
                ended.append((digest, None))
    for log in status.get("logs") or ():  # type: ignore[attr-defined]
        if not isinstance(log, dict):
            continue
        try:
            text = base64.b64decode(str(log.get("data", "")), validate=True).decode("utf-8", "replace")
        except ValueError:
            continue
        yield from seen.lines(str(log.get("vertex", "")), str(log.get("stream")), text)
    for digest, event in ended:
        yield from seen.ended(digest)
        if event is not None:
            yield event


def read_progress(stream: IO[bytes]) -> Iterator[BuildxEvent]:
    """The events of a rawjson progress stream, as they come; text between objects as PlainText.

    Bounded: an object (or a run of text) past BUILDX_EVENT_BYTES is cut off and read as text."""
    decoder = json.JSONDecoder()
    seen = _Vertices()
    buffer = ""
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        buffer += chunk.decode("utf-8", "replace") if chunk else ""
        while buffer:
            stripped = buffer.lstrip()
            if not stripped:
                buffer = ""
                break
            if stripped[0] == "{":
                try:
                    value, end = decoder.raw_decode(stripped)
                except json.JSONDecodeError:
                    if chunk and len(stripped) < BUILDX_EVENT_BYTES:
                        buffer = stripped
                        break  # an object still arriving
                    value, end = None, len(stripped.split("\n", 1)[0]) + 1
                    yield PlainText(_shown(stripped[: end - 1], 2000))
                buffer = stripped[end:]
                if isinstance(value, dict):
                    yield from _events(value, seen)
                continue
            line, newline, rest = stripped.partition("\n")
            if not newline and chunk and len(line) < BUILDX_EVENT_BYTES:
                buffer = stripped
                break  # a line still arriving
            buffer = rest
            yield PlainText(_shown(line, 2000))
        if not chunk:
            yield from seen.ended(None)
            return


class BuildxRun:
    """One ``docker buildx build`` process; ``abort`` (any thread) stops it and its builds."""

    def __init__(self, argv: list[str], context: IO[bytes], env: Mapping[str, str]) -> None:
        self._argv = argv
        self._context = context
        self._env = dict(env)
        self._lock = threading.Lock()
        self._aborted: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None

    def events(self) -> Iterator[BuildxEvent]:
        """The build's events until it ends; then ``returncode`` is set. BuildAborted after ``abort``."""
        with self._lock:
            if self._aborted:
                raise BuildAborted(self._aborted)
            try:
                process = subprocess.Popen(
                    self._argv,
                    stdin=self._context,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env={**os.environ, **self._env},
                    start_new_session=True,  # its own group: abort reaches the plugin too
                )
            except OSError as exc:
                raise EnvironmentProblem(f"cannot run {self._argv[0]}: {exc.strerror}") from None
            self._process = process
        assert process.stderr is not None
        try:
            yield from read_progress(process.stderr)
        finally:
            process.stderr.close()
            self.returncode = process.wait()
        if self._aborted:
            raise BuildAborted(self._aborted)

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._aborted:
                return
            self._aborted = reason
            process = self._process
        if process is None or process.poll() is not None:
            return
        _signal(process, signal.SIGTERM)
        timer = threading.Timer(ABORT_GRACE_S, _signal, (process, signal.SIGKILL))
        timer.daemon = True
        timer.start()


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


@dataclass(frozen=True)
class BuiltOci:
    """What the metadata file says buildx made."""

    manifest_digest: str
    config_digest: str


def read_metadata(path: Path) -> BuiltOci:
    """The digests of the image buildx wrote (its ``--metadata-file``), checked."""
    try:
        raw = read_regular_file(path, STATE_BYTES, "the buildx metadata file")
        document = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ImagekitError(f"buildx wrote no readable metadata file at {path}: {exc}") from None
    if not isinstance(document, dict):
        raise ImagekitError(f"{path}: the buildx metadata is not a JSON object")
    manifest = document.get("containerimage.digest")
    config = document.get("containerimage.config.digest")
    for key, value in (("containerimage.digest", manifest), ("containerimage.config.digest", config)):
        if not isinstance(value, str) or not naming.DIGEST.fullmatch(value):
            raise ImagekitError(f"{path}: the buildx metadata has no {key} digest")
    assert isinstance(manifest, str) and isinstance(config, str)
    return BuiltOci(manifest, config)
