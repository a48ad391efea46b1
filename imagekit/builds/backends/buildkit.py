"""The BuildKit builder: one image through ``docker buildx build``, then loaded, or pushed by
BuildKit itself.

``Builder`` keeps everything else (scheduling, no-change, tagging only once finished, staging, the
report); this module runs one image and hands back its digest. Its Dockerfiles take BuildKit's
syntax (RUN --network/--mount), its cache is a registry cache of every stage (nothing pulled), and
a cell staged by another runner is reused from its config blob alone (nothing pulled). A local build
writes the image as an OCI tar, which docker-py loads into the engine: dockerd 26 and 28.5.2 refuse
rewritten timestamps for an image the engine stores (``--load``, ``type=docker``, ``type=image``
without ``store=false``: "conflicts with unpack"; see ``imagekit.engine.buildx``). On the containerd
image store the image id is then the manifest digest the tar names, which a push keeps, so the
staged digest is the one built and verified. With ``--push`` (``push_image``) BuildKit pushes the
image straight to its staging tag (``store=false``): no tar, no load, and the digest buildx reports
is recorded only once the registry serves it there (``imagekit.builds.registry_use``).

Secrets: the index credentials of ``sources.pip.credentials`` reach the build as one netrc file
(``PIP_NETRC_SECRET``), written 0600 into a private directory of the state directory for the run and
removed after it, and passed as ``--secret id=...,src=FILE``: never in argv, the environment of
buildx, the Dockerfile or a label. Every value is checked before any build starts, because BuildKit
does not: a secret is not part of its cache key, and an unset source mounts an empty file. Every
value is registered with ``imagekit.core.secret_values`` as it is read: a step that prints the netrc
(or pip, or the engine) prints it into no log, progress line, report or error line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar

import docker

from imagekit.builds.backends.base import BuildCache, Built, RegistryReuse, Running, Setup, Write
from imagekit.builds.jobs import JobFailed
from imagekit.builds.read_recorder import unrecorded
from imagekit.builds.registry_use import BuildRegistry
from imagekit.core import secret_values
from imagekit.core.build_kinds import Compression
from imagekit.core.clock import REPRODUCIBLE_EPOCH
from imagekit.core.errors import EnvironmentProblem, ImagekitError, InputError, one_line
from imagekit.core.limits import SECRET_FILE_BYTES, SECRET_MIN_CHARS
from imagekit.core.paths import read_regular_text
from imagekit.core.safetypes import secret_env_name
from imagekit.core.text import counted, elided
from imagekit.engine import buildx
from imagekit.engine.buildx import (
    Buildx,
    BuildxRequest,
    BuildxRun,
    BuiltOci,
    PlainText,
    StepCached,
    StepFailed,
    StepOutput,
    StepStarted,
    build_argv,
    push_refusal,
    read_metadata,
)
from imagekit.engine.client import BuildRequest, engine_info, load
from imagekit.engine.oci_archive import check_archive
from imagekit.plan.cells import Plan
from imagekit.plan.schema import BuildSettings
from imagekit.registry.credentials import USER_ENV, docker_auth_config
from imagekit.render.contract import PIP_NETRC_SECRET
from imagekit.render.dockerfile import RenderedCell

_SECRET_VALUE = re.compile(r"[!-~]{1,4096}")  # one netrc token: printable, no white space


def engine_holds_oci(api: docker.APIClient) -> None:
    """Refuse an engine that cannot take what buildx writes (its containerd image store)."""
    info = engine_info(api)
    store = " ".join(" ".join(map(str, pair)) for pair in info.get("DriverStatus") or ())
    if "io.containerd.snapshotter" not in store:
        raise EnvironmentProblem(
            f"--builder buildkit needs the engine's containerd image store (zstd layers, rewritten"
            f" timestamps, registry cache), and this engine stores images with {info.get('Driver')}:"
            ' set {"features": {"containerd-snapshotter": true}} in its daemon.json'
            " (scripts/engine.sh docker does) or use --builder classic"
        )


@dataclass(frozen=True)
class Credential:
    host: str
    login: str
    secret: str  # the secret's id; the value is read from ``env`` or a file


def _secret_value(credential: Credential, files: Mapping[str, Path], env: Mapping[str, str]) -> str:
    where = files.get(credential.secret)
    variable = secret_env_name(credential.secret)
    if where is not None:
        what = f"the file holding secret {credential.secret}'s token (--secret {credential.secret}=FILE)"
        try:
            # a regular file of a token's size only: a FIFO would hold the run, /dev/zero fill memory
            value = read_regular_text(where, SECRET_FILE_BYTES, what).strip()
        except FileNotFoundError:
            raise InputError(f"--secret {credential.secret}={where}: cannot read it: no such file") from None
        source = f"--secret {credential.secret}={where}"
    else:
        value = env.get(variable, "").strip()
        source = f"${variable}"
    if not value:
        raise InputError(
            f"secret {credential.secret} (index credentials for {credential.host}) is not given: set"
            f" {variable} or pass --secret {credential.secret}=FILE; nothing was built"
        )
    if not _SECRET_VALUE.fullmatch(value):
        raise InputError(
            f"secret {credential.secret} from {source} holds white space or a control character,"
            " which a netrc token cannot: give the token itself"
        )
    if len(value) < SECRET_MIN_CHARS:
        raise InputError(
            f"secret {credential.secret} from {source} is {counted(len(value), 'character')} long:"
            f" imagekit masks it in everything it prints or writes, and a value under"
            f" {SECRET_MIN_CHARS} characters would mask ordinary words of the output; give a token"
            f" of at least {SECRET_MIN_CHARS}"
        )
    # From here on it is masked wherever it shows: a step that prints the netrc, pip, an error.
    secret_values.register(value, login=credential.login)
    return value


@contextlib.contextmanager
def pip_netrc(
    credentials: tuple[Credential, ...], files: Mapping[str, Path], state_dir: Path, env: Mapping[str, str]
) -> Iterator[Path | None]:
    """The netrc of ``credentials`` as a private file for the run (None without credentials);
    every value is checked first, so a missing one stops the run before anything is built."""
    if not credentials:
        yield None
        return
    # A netrc `machine` is a host name alone: pip (requests) looks the URL's host up without its
    # port, so a credential written as in the index URL (`host:8080`) would never match.
    lines = [
        f"machine {c.host.partition(':')[0]} login {c.login} password {_secret_value(c, files, env)}"
        for c in credentials
    ]
    state_dir.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix=".secrets-", dir=state_dir))  # 0700
    try:
        path = directory / "netrc"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def with_secrets(
    settings: BuildkitSettings,
    credentials: tuple[Credential, ...],
    files: Mapping[str, Path],
    state_dir: Path,
    env: Mapping[str, str],
) -> Iterator[BuildkitSettings]:
    """``settings`` with the run's index credentials mounted as a secret (``pip_netrc``)."""
    with pip_netrc(credentials, files, state_dir, env) as netrc:
        yield (
            settings if netrc is None else dataclasses.replace(settings, secrets=((PIP_NETRC_SECRET, netrc),))
        )


def pushing(settings: BuildkitSettings, registry: str, say: Write) -> BuildkitSettings:
    """``settings`` for a ``--push`` run: BuildKit pushes each cell itself where this buildx can
    and the registry login is one buildx reads; otherwise (said once) through the archive."""
    refusal = push_refusal(settings.buildx)
    if refusal is None and docker_auth_config(registry) is not None:
        refusal = (
            f"the login to {registry} comes from ${USER_ENV}, which buildx does not read (it reads the"
            " Docker config): each image goes through an OCI archive and the engine, then is pushed"
        )
    if refusal is not None:
        say(refusal)
        return settings
    return dataclasses.replace(settings, pushes=True)


@dataclass(frozen=True)
class BuildkitSettings:
    buildx: Buildx
    compression: Compression
    work_dir: Path  # OCI tars and metadata files, one pair per running build
    secrets: tuple[tuple[str, Path], ...] = ()  # (secret id, file) every build mounts
    # `--push` straight from BuildKit (``push_image``); False: through the tar and the engine
    pushes: bool = False


class BuildkitBackend:
    """``BuildBackend`` of ``docker buildx build`` (``imagekit.builds.backends.base``)."""

    pushes_past_the_engine: ClassVar[bool] = True  # type=image,push=true,store=false: never loaded

    def __init__(self, setup: Setup) -> None:
        self.api = setup.api
        self.render = BuildSettings(builder="buildkit", compression=setup.compression)
        engine_holds_oci(setup.api)
        with unrecorded():  # which buildx runs the builds is no input of an image
            found = buildx.find(setup.buildx_builder)
        # found and checked once; ``session`` adds the run's secrets (it owns their files)
        self.settings = BuildkitSettings(found, setup.compression, setup.state_dir / "buildx")
        self.state_dir = setup.state_dir
        if setup.push_registry:
            self.settings = pushing(self.settings, setup.push_registry, setup.say)

    @contextlib.contextmanager
    def session(self, plan: Plan, secret_files: Mapping[str, Path], env: Mapping[str, str]) -> Iterator[None]:
        credentials = tuple(
            Credential(c.host, c.login, c.secret) for c in plan.matrix.sources.pip.credentials
        )
        settings = self.settings
        with with_secrets(settings, credentials, secret_files, self.state_dir, env) as for_run:
            self.settings = for_run
            try:
                yield
            finally:
                self.settings = settings

    def registry_reuse(
        self,
        rendered: RenderedCell,
        registry: BuildRegistry,
        required_labels: tuple[tuple[str, str], ...],
        write: Write,
    ) -> RegistryReuse:
        # nothing pulled: verify --pull and publish work from the registry
        return RegistryReuse(staged=registry.staged_unpulled(rendered, required_labels, write))

    def cache(
        self, rendered: RenderedCell, source: BuildRegistry | None, target: BuildRegistry | None, write: Write
    ) -> BuildCache:
        # the registry cache of every stage, nothing pulled
        return BuildCache(
            registry_from=source.build_cache(rendered) if source else None,
            registry_to=target.build_cache(rendered) if target else None,
        )

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
        registry_cache = (cache.registry_from, cache.registry_to)
        if push_to is not None and self.settings.pushes:
            # no archive, no load, no tag here: staged once the registry serves what buildx reports
            with context() as tar:
                digest = push_image(self.settings, request, tar, push_to, registry_cache, write, running)
            return Built(digest, pushed=push_to)
        with context() as tar:
            return Built(
                build_image(self.api, self.settings, request, tar, name, registry_cache, write, running)
            )


def build_image(
    api: docker.APIClient,
    settings: BuildkitSettings,
    request: BuildRequest,
    context: IO[bytes],
    name: str,
    cache: tuple[str | None, str | None],
    write: Write,
    running: Running,
) -> str:
    """Build ``request`` with buildx, load it into the engine as ``name``; its image id there.

    ``cache``: the registry cache to read and to write (None: none). Raises StepError naming the
    failed step, BuildAborted when stopped (``running`` registers the process for that)."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=settings.work_dir))
    try:
        output = work / "image.oci.tar"
        built = build_oci(settings, request, context, output, name, cache, write, running)
        write(f"built {built.manifest_digest} (config {built.config_digest}); loading it into the engine")
        # The tar was found to hold that very image (build_oci), and the engine's store is
        # content-addressed: the id the tags move to is the image built here.
        _load(api, output)
        return built.manifest_digest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_oci(
    settings: BuildkitSettings,
    request: BuildRequest,
    context: IO[bytes],
    output: Path,
    name: str,
    cache: tuple[str | None, str | None],
    write: Write,
    running: Running,
) -> BuiltOci:
    """Build ``request`` with buildx into the OCI tar ``output`` (and nothing else: no engine image,
    no push); the digests buildx reports, once the tar is found to hold that image, named ``name``,
    with ``request``'s labels (ArchiveMismatch when not). Raises JobFailed naming the failed step."""
    metadata = output.with_name(output.name + ".metadata.json")
    built = _run(settings, request, context, (output, name), metadata, cache, write, running)
    check_archive(output, built.manifest_digest, built.config_digest, name, request.labels)
    return built


def push_image(
    settings: BuildkitSettings,
    request: BuildRequest,
    context: IO[bytes],
    reference: str,
    cache: tuple[str | None, str | None],
    write: Write,
    running: Running,
) -> str:
    """Build ``request`` with buildx and let BuildKit push it to ``reference`` (a staging tag),
    with nothing stored in the engine and no archive; the manifest digest buildx's metadata file
    reports, which the caller checks against the registry before recording it. JobFailed as
    build_oci; ImagekitError (one line) when the metadata file names no digest."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="push-", dir=settings.work_dir))
    try:
        metadata = work / "metadata.json"
        built = _run(settings, request, context, (None, reference), metadata, cache, write, running)
        write(
            f"built {built.manifest_digest} (config {built.config_digest}); BuildKit pushed it to {reference}"
        )
        return built.manifest_digest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(
    settings: BuildkitSettings,
    request: BuildRequest,
    context: IO[bytes],
    target: tuple[Path | None, str],  # (the OCI tar, the name in it) or (None, the reference pushed)
    metadata: Path,
    cache: tuple[str | None, str | None],
    write: Write,
    running: Running,
) -> BuiltOci:
    """One ``docker buildx build``, its progress written as it comes; what its metadata file says."""
    output, name = target
    host_network = "--network=host" in _dockerfile_text(context, request.dockerfile)
    context.seek(0)
    argv = build_argv(
        settings.buildx,
        BuildxRequest(
            dockerfile=request.dockerfile,
            labels=request.labels,
            build_args=request.build_args,
            platform=request.platform,
            output=output,
            name=name,
            compression=settings.compression,
            network=request.network_mode or "none",
            host_network=host_network,
            secrets=settings.secrets,
            cache_from=cache[0],
            cache_to=cache[1],
            no_cache=request.nocache,
            push=output is None,
        ),
        metadata,
    )
    run = BuildxRun(argv, context, {"SOURCE_DATE_EPOCH": str(REPRODUCIBLE_EPOCH)})
    failed: StepFailed | None = None
    text: list[str] = []
    with running(run):
        for event in run.events():
            if isinstance(event, StepStarted):
                write(f"#{event.step}")
            elif isinstance(event, StepCached):
                write(f"#{event.step}: CACHED")
            elif isinstance(event, StepOutput):
                write(event.text)  # one whole line
            elif isinstance(event, StepFailed):
                write(elided(f"#{event.step}: ERROR {event.error}"))
                # A missing cache is no failure, nor a failed cache write (registry_cache).
                if not event.step.startswith(("importing cache", "exporting cache")):
                    failed = event
            elif isinstance(event, PlainText):
                write(event.text)
                text.append(event.text)
    if run.returncode != 0:
        if failed is not None:
            step = failed.step if len(failed.step) <= 100 else failed.step[:97] + "..."
            raise JobFailed(f"step {step}: {failed.error}")
        last = next((line for line in reversed(text) if line.strip()), f"exit status {run.returncode}")
        raise JobFailed(f"docker buildx build failed: {last}")
    return read_metadata(metadata)


def _load(api: docker.APIClient, tar: Path) -> None:
    try:
        with tar.open("rb") as handle:
            for line in load(api, handle):
                if line.get("error"):
                    raise ImagekitError(f"the engine refused the built image: {line['error']}")
    except (OSError, docker.errors.DockerException) as exc:
        raise ImagekitError(f"loading the built image into the engine failed: {one_line(exc)}") from None


def _dockerfile_text(context: IO[bytes], name: str) -> str:
    """The Dockerfile ``name`` of a context tar (imagekit wrote it; read to see its step networks)."""
    with tarfile.open(fileobj=context, mode="r|") as tar:
        for member in tar:
            if member.name.lstrip("./") == name and member.isfile():
                handle = tar.extractfile(member)
                return handle.read(1 << 20).decode("utf-8", "replace") if handle else ""
    return ""
