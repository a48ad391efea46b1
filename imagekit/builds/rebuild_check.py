"""``imagekit rebuild-check REF@DIGEST``: rebuild a published (or staged) cell and say whether the
digest is the same, and where it parts when not (issue 36, design D.1).

The steps: the image's manifest (an index: its platform's child) and config from the registry; the
cell its ``imagekit.cell`` label names, rendered from the matrix as ``imagekit build --builder
buildkit`` renders it; its input digest against the image's label (other inputs cannot give the same
image: nothing is built unless ``anyway``); one BuildKit build, without the cache, to an OCI tar in
a temporary directory, never loaded into the engine nor pushed (a check moves no tag and leaves no
image); then ``imagekit.builds.layer_diff``'s comparison, and for a layer whose content differs the
first differing entries of the published blob and the rebuilt one, both streamed from disk.

BuildKit images only: the classic builder writes the build's own file times into every layer, so its
layers are never the same twice (design D.2); such an image is refused with one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from imagekit import __version__
from imagekit.builds.backends import buildkit
from imagekit.builds.bases import apply_mirrors
from imagekit.builds.jobs import JobFailed
from imagekit.builds.layer_diff import (
    Difference,
    Image,
    LayerUnreadable,
    built_by_buildkit,
    compare,
    first_differences,
    list_entries,
    read_image,
    uncompressed,
)
from imagekit.builds.run_state import RunState
from imagekit.core import naming, platforms
from imagekit.core.build_kinds import Compression
from imagekit.core.errors import ImagekitError, InputError, InputsChanged, one_line
from imagekit.core.limits import CONFIG_BYTES, MANIFEST_BYTES
from imagekit.core.safetypes import parse_json
from imagekit.core.text import printable, shown
from imagekit.engine import buildx
from imagekit.engine.client import BuildAborted, BuildRequest
from imagekit.engine.oci_archive import blob_member, open_blob, read_blob, read_member
from imagekit.plan.cells import Cell, Plan, local_base_of
from imagekit.plan.schema import BuildSettings
from imagekit.registry.client import Registry
from imagekit.registry.manifest import INDEX_TYPES, Manifest, config_labels
from imagekit.render.contract import PIP_NETRC_SECRET
from imagekit.render.dockerfile import RenderedCell, Renderer

Write = Callable[[str], None]
_NOTHING_COMPARED = "nothing compared"  # what a rebuild's unreadable OCI tar stops


@dataclass(frozen=True)
class Target:
    """An image by digest in a registry: ``host/repository@sha256:...``."""

    host: str
    repository: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.host}/{self.repository}@{self.digest}"


def parse_target(ref: str) -> Target:
    """``REGISTRY/REPOSITORY[:TAG]@sha256:...``; InputError (one line) for anything else."""
    return Target(
        *naming.pinned_reference(
            ref,
            "rebuild-check takes an image by digest (REGISTRY/REPOSITORY@sha256:...); a tag can move,"
            " and the digest is what is checked",
        )
    )


# -- the published image ------------------------------------------------------------------------------


def published_image(registry: Registry, target: Target, platform: str | None) -> Image:
    """The image ``target`` names (an index: ``platform``'s child, or its only one) and its config,
    checked as the image record (``read_image``): a malformed one is refused before anything is
    built or compared."""
    manifest = registry.get_manifest(target.repository, target.digest)
    if manifest.media_type in INDEX_TYPES:
        # BuildKit's attestation manifests (bake's provenance) are no image to rebuild
        images = [child for child in manifest.children if child not in manifest.attestations]
        if platform is not None:
            child = manifest.child_for(platforms.get(platform))
            if child is None:
                raise InputError(f"{target.reference}: an index with no image for --platform {platform}")
        elif len(images) == 1:
            child = images[0]
        else:
            raise InputError(
                f"{target.reference}: an index of {len(images)} images; pass --platform"
                " (like linux/amd64) to say which one to rebuild"
            )
        manifest = registry.get_manifest(target.repository, child)
    record = manifest.image(target.reference, "nothing compared")
    config = registry.get_blob(target.repository, record.config.digest)
    image = read_image(manifest, config, target.reference)
    if not built_by_buildkit(image.config):
        raise InputError(
            f"{target.reference}: built by the classic builder, whose layers hold the build's own file"
            " times and are never the same twice; rebuild-check takes images of --builder buildkit"
        )
    # The rebuild passes each of the image's labels as `buildx build --label KEY=VALUE`: an
    # argument holds no NUL byte (the process would not start: a traceback), and a key holding
    # '=' (or none) would come back as another label. Such a label was not set by a build.
    for key, value in config_labels(image.config).items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InputError(
                f"{target.reference}: its label {shown(key)}={shown(value)} cannot be passed to a"
                " build (`--label KEY=VALUE`: no NUL byte, a name without '='), so no rebuild could be"
                " this image; nothing was built"
            )
    return image


def find_cell(plan: Plan, image: Image, where: str) -> Cell:
    """The cell the image's ``imagekit.cell`` label names, in ``plan``."""
    cell_id = config_labels(image.config).get(naming.CELL_LABEL)
    if not cell_id:
        raise InputError(
            f"{where}: the image has no {naming.CELL_LABEL} label (not built by imagekit); nothing says"
            " which cell to rebuild"
        )
    try:
        return plan.cell(cell_id)
    except InputError:
        raise InputError(
            f"{where}: its {naming.CELL_LABEL} label names {shown(cell_id)}, no cell of {plan.source_name};"
            " pass the matrix it was built from (--matrix)"
        ) from None


def render(plan: Plan, cell: Cell, image: Image) -> RenderedCell:
    """``cell`` as ``imagekit build --builder buildkit`` rendered it for this image: the matrix's
    mirrors, the image's compression, FROM the base it names (the input digest keeps the base's
    name either way)."""
    layers = image.layers
    compression: Compression = "zstd" if layers and "zstd" in layers[-1].media_type else "gzip"
    if local_base_of(cell) is None:
        mirrored = apply_mirrors(cell.base_image, tuple(plan.matrix.mirrors.items()))
        cell = dataclasses.replace(cell, base_image=mirrored)
    # FROM the base's digest only where the build was (--pin-base-digests): the OCI labels name
    # the FROM reference, so an unpinned build's image says the base's name, a pinned one its digest.
    found = config_labels(image.config)
    recorded = found.get(naming.BASE_DIGEST_LABEL, "")
    pinned = (
        recorded
        if "@sha256:" in recorded
        and naming.is_reference(recorded)
        and any(recorded in value for key, value in found.items() if key != naming.BASE_DIGEST_LABEL)
        else None
    )
    renderer = Renderer(plan, build=BuildSettings(builder="buildkit", compression=compression))
    return renderer.render(cell, build_from=pinned)


def check_inputs(rendered: RenderedCell, image: Image, where: str) -> None:
    """InputsChanged unless the image was built from what the matrix renders now."""
    found = config_labels(image.config)
    recorded = found.get(naming.INPUT_DIGEST_LABEL, "")
    version = found.get(naming.VERSION_LABEL, "")
    if recorded != rendered.input_digest:
        raise InputsChanged(
            f"{where}: built from input digest {shown(recorded) or 'none'}, and cell {rendered.cell.id}"
            f" renders {rendered.input_digest} now: its inputs changed (templates, wheelhouse, build"
            " args, base, imagekit's version), so a rebuild cannot be that image; nothing was built"
            " (--anyway rebuilds it all the same)"
        )
    if version != __version__:
        raise InputsChanged(
            f"{where}: built by imagekit {shown(version) or 'unknown'}, and this is {__version__}: its"
            " version label would differ; nothing was built (--anyway rebuilds it all the same)"
        )


# -- the rebuild ----------------------------------------------------------------------------------------


@contextmanager
def rebuilt_image(
    plan: Plan, rendered: RenderedCell, image: Image, target: Target, write: Write
) -> Iterator[tuple[Image, tarfile.TarFile]]:
    """The cell built again, without the cache, into an OCI tar of a temporary directory (removed
    afterwards, whatever happens); its image and the tar its blobs are read from."""
    found = buildx.find(None)
    found_labels = config_labels(image.config)
    settings = buildkit.BuildkitSettings(found, rendered.build.layer_compression, Path())
    # The image's own labels (--label, the base digest, created, revision, source: what it was
    # built at, not this checkout), then the ones rendering gives (input digest, version).
    labels_given = {**found_labels, **rendered.build_labels()}
    request = BuildRequest(
        dockerfile="Dockerfile",
        labels=tuple(labels_given.items()),
        build_args=rendered.build_args,
        cache_from=(),
        network_mode=None,  # a step without its own RUN --network= gets none, as in `imagekit build`
        nocache=True,
        platform=rendered.cell.platform,
    )
    credentials = tuple(
        buildkit.Credential(c.host, c.login, c.secret) for c in plan.matrix.sources.pip.credentials
    )
    work = Path(tempfile.mkdtemp(prefix="imagekit-rebuild-check-"))
    try:
        with buildkit.pip_netrc(credentials, {}, work, os.environ) as netrc:
            if netrc is not None:
                settings = dataclasses.replace(settings, secrets=((PIP_NETRC_SECRET, netrc),))
            output = work / "image.oci.tar"
            write(f"rebuilding {rendered.cell.id} with buildx {found.version}, without the cache")
            _build(
                settings, request, rendered, output, f"{target.host}/{target.repository}:rebuild-check", write
            )
        try:
            oci = tarfile.open(output)  # noqa: SIM115 (closed below, after the caller read its blobs)
        except (tarfile.TarError, OSError) as exc:
            raise ImagekitError(f"buildx wrote no readable OCI tar: {one_line(exc)}") from None
        with oci:
            yield _oci_image(oci, rendered.cell.platform, target.reference), oci
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build(
    settings: buildkit.BuildkitSettings,
    request: BuildRequest,
    rendered: RenderedCell,
    output: Path,
    name: str,
    write: Write,
) -> None:
    """One build in a worker thread, so that Ctrl-C here stops buildx (its own process group)."""
    state = RunState()
    with (
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="imagekit-rebuild") as pool,
        rendered.context_tar() as tar,
    ):
        future = pool.submit(
            buildkit.build_oci,
            settings,
            request,
            tar,
            output,
            name,
            (None, None),
            write,
            lambda run: state.running(run, None),
        )
        try:
            future.result()
        except KeyboardInterrupt:
            state.stop("interrupted (Ctrl-C)")
            raise
        except JobFailed as failed:
            raise ImagekitError(f"the rebuild of {rendered.cell.id} failed: {failed.message}") from None
        except BuildAborted as aborted:
            raise ImagekitError(f"the rebuild of {rendered.cell.id} was stopped: {aborted}") from None


def _oci_image(oci: tarfile.TarFile, platform: str, where: str) -> Image:
    """The image buildx wrote (index.json's manifest; an index inside: ``platform``'s child)."""
    try:
        return _oci_manifest(oci, platform, where)
    except (ValueError, tarfile.TarError, OSError) as exc:
        raise ImagekitError(f"buildx's OCI tar cannot be read: {one_line(exc)}") from None


def _oci_manifest(oci: tarfile.TarFile, platform: str, where: str) -> Image:
    index: Any = parse_json(read_member(oci, "index.json", MANIFEST_BYTES, _NOTHING_COMPARED))
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise ImagekitError("buildx's OCI tar names no manifest in its index.json")
    entry: Any = entries[0]
    for _ in range(2):  # the manifest, or an index of one per platform around it
        digest, media_type = str(entry.get("digest", "")), str(entry.get("mediaType", ""))
        if not naming.DIGEST.fullmatch(digest):
            raise ImagekitError("buildx's OCI tar names a manifest by no sha256 digest")
        body = read_blob(oci, digest, MANIFEST_BYTES, _NOTHING_COMPARED)
        manifest = Manifest(digest, media_type, body)
        if media_type not in INDEX_TYPES:
            rebuilt = f"the rebuild of {where}"
            record = manifest.image(rebuilt, "nothing compared")
            # read_image checks it against its digest and size, saying which image's it is
            member = blob_member(record.config.digest, _NOTHING_COMPARED)
            config = read_member(oci, member, CONFIG_BYTES, _NOTHING_COMPARED)
            return read_image(manifest, config, rebuilt)
        wanted = platforms.get(platform)
        entry = next(
            (
                c
                for c in manifest._json().get("manifests") or ()
                if isinstance(c, dict)
                and isinstance(c.get("platform"), dict)
                and (c["platform"].get("architecture"), c["platform"].get("os")) == (wanted.arch, wanted.os)
            ),
            {},
        )
    raise ImagekitError("buildx's OCI tar nests indexes; no image manifest found")


# -- the verdict -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    target: Target
    cell: str
    published: str  # the platform image's manifest digest
    rebuilt: str
    difference: Difference | None

    def lines(self) -> list[str]:
        if self.difference is None:
            return [f"matches {self.published}"]
        found = [self.difference.line()]
        found += [f"  {printable(entry.line())}" for entry in self.difference.entries]
        if self.difference.note:
            found.append(f"  ({printable(self.difference.note)})")
        return found

    def as_json(self) -> dict[str, Any]:
        difference = dataclasses.asdict(self.difference) if self.difference else None
        return {
            "reference": self.target.reference,
            "cell": self.cell,
            "verdict": "matches" if self.difference is None else "differs",
            "published": self.published,
            "rebuilt": self.rebuilt,
            "difference": difference,
        }

    def json_text(self) -> str:
        return json.dumps(self.as_json(), indent=2, sort_keys=True)


def entries_of(
    registry: Registry, target: Target, published: Image, oci: tarfile.TarFile, rebuilt: Image, layer: int
) -> tuple[tuple[Any, ...], str]:
    """The first differing entries of layer ``layer`` (published blob against rebuilt one) and a note."""
    theirs, ours = published.layers[layer], rebuilt.layers[layer]  # sizes in bounds: read_image's
    with tempfile.TemporaryFile() as mine, tempfile.TemporaryFile() as other:
        registry.read_blob(target.repository, theirs.digest, mine, theirs.size)
        shutil.copyfileobj(open_blob(oci, ours.digest, _NOTHING_COMPARED), other, 1 << 20)
        other.seek(0)
        try:
            with uncompressed(mine, theirs.media_type) as stream:
                a = list_entries(stream)
            with uncompressed(other, ours.media_type) as stream:
                b = list_entries(stream)
        except LayerUnreadable as unreadable:
            return (), str(unreadable)
    notes = [f"published: {a.stopped}" if a.stopped else "", f"rebuilt: {b.stopped}" if b.stopped else ""]
    return first_differences(a, b), "; ".join(n for n in notes if n)


def rebuild_check(
    api: docker.APIClient,
    plan: Plan,
    registry: Registry,
    target: Target,
    platform: str | None,
    anyway: bool,
    write: Write,
) -> Outcome:
    """Rebuild ``target``'s cell and compare; InputsChanged (nothing built) when its inputs moved."""
    image = published_image(registry, target, platform)
    cell = find_cell(plan, image, target.reference)
    rendered = render(plan, cell, image)
    try:
        check_inputs(rendered, image, target.reference)
    except InputsChanged as changed:
        if not anyway:
            raise
        write(f"{changed.message.split('; nothing was built')[0]}; rebuilding all the same (--anyway)")
    buildkit.engine_holds_oci(api)  # rewrite-timestamp and zstd need it (imagekit.engine.buildx)
    with rebuilt_image(plan, rendered, image, target, write) as (rebuilt, oci):
        difference = compare(image, rebuilt)
        if difference is not None and difference.kind == "content" and difference.layer is not None:
            entries, note = entries_of(registry, target, image, oci, rebuilt, difference.layer)
            difference = dataclasses.replace(difference, entries=entries, note=note)
    return Outcome(target, cell.id, image.manifest_digest, rebuilt.manifest_digest, difference)
