"""The manifest record: OCI and Docker media types, what a manifest names, and the check that a
manifest is one promotion can vouch for; the image record every reader of an image manifest and
its config takes (``ImageRecord``, ``ImageConfig``); an image config's labels
(``config_labels``); OCI 1.1 artifacts and their
referrers.

The bytes are the registry's (or an engine's, or buildx's), trusted no more than a file: every
property reads them through ``parse_json`` and answers nothing (not a traceback) for a shape the
API does not promise; ``Manifest.image`` and ``ImageRecord.read_config`` refuse, in one line, what
no image is, before anything is compared, counted, mounted or promoted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from imagekit.core import platforms
from imagekit.core.errors import RegistryError, one_line
from imagekit.core.limits import LAYER_BYTES_MAX, MANIFEST_BYTES, MAX_IMAGE_LAYERS, MAX_INDEX_MANIFESTS
from imagekit.core.naming import DIGEST
from imagekit.core.platforms import Platform
from imagekit.core.safetypes import parse_json
from imagekit.core.text import shown

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
IMAGE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join(MANIFEST_TYPES)
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
CONFIG_TYPES = frozenset({OCI_CONFIG, DOCKER_CONFIG})
# The layers an engine unpacks: containerd's images.IsLayerType (the OCI image-spec's, with its
# deprecated non-distributable ones, and Docker's schema 2 ones, foreign and zstd included).
LAYER_TYPES = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.diff.tar.zstd",
        "application/vnd.docker.image.rootfs.foreign.diff.tar",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    }
)
# An artifact's media types (OCI image-spec descriptor.md: RFC 6838's type/subtype, 127 each).
MEDIA_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")
# BuildKit's attestation manifests in an image index (``docker buildx build``'s provenance, on by
# default in bake): an entry so annotated is an artifact about an image, never an image to run.
REFERENCE_TYPE_ANNOTATION = "vnd.docker.reference.type"
ATTESTATION_MANIFEST = "attestation-manifest"
# OCI 1.1 artifacts: the empty config an artifact manifest names, and the referrers tag schema.
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    def _json(self) -> dict[str, Any]:
        try:
            data: Any = parse_json(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def config_digest(self) -> str | None:
        """The image id (config digest) a single-image manifest names; None for an index."""
        config = self._json().get("config")
        return str(config["digest"]) if isinstance(config, dict) and config.get("digest") else None

    @property
    def children(self) -> list[str]:
        """An index's (manifest list's) image manifests, by digest; none for a single image."""
        return [
            str(m["digest"])
            for m in self._json().get("manifests") or ()
            if isinstance(m, dict)
            and m.get("mediaType") in MANIFEST_TYPES
            and DIGEST.fullmatch(str(m.get("digest")))
        ]

    def child_for(self, platform: Platform) -> str | None:
        """The digest of an index's image manifest for ``platform`` (its ``platform``'s
        architecture and os; a variant is not compared); None when it names none."""
        entries = self._json().get("manifests")
        for entry in entries[:MAX_INDEX_MANIFESTS] if isinstance(entries, list) else ():
            described = entry.get("platform") if isinstance(entry, dict) else None
            if (
                isinstance(described, dict)
                and (described.get("architecture"), described.get("os")) == (platform.arch, platform.os)
                and entry.get("mediaType") in IMAGE_TYPES
                and _is_digest(entry.get("digest"))
            ):
                return str(entry["digest"])
        return None

    @property
    def attestations(self) -> frozenset[str]:
        """The digests of an index's entries that BuildKit marks as attestation manifests."""
        entries = self._json().get("manifests")
        return frozenset(
            str(entry.get("digest"))
            for entry in (entries[:MAX_INDEX_MANIFESTS] if isinstance(entries, list) else ())
            if isinstance(entry, dict)
            and isinstance(entry.get("annotations"), dict)
            and entry["annotations"].get(REFERENCE_TYPE_ANNOTATION) == ATTESTATION_MANIFEST
        )

    def check_promotable(self, where: str, image_only: bool = False, artifact: bool = False) -> None:
        """Refuse (RegistryError, one line) what promotion cannot vouch for: a body that is not a
        JSON object, a mediaType that is not a string or not a manifest's, a single image that is
        not the image record ``image`` reads (no config, so no image id to compare with the
        verified one; a blob that is no image's or of no size), an index naming no manifest, or
        one naming an index or anything but image manifests. ``image_only``: an index's child,
        which must itself be an image; ``artifact``: one its index marks an attestation."""

        def refuse(problem: str) -> NoReturn:
            raise RegistryError(f"{where}: {problem}; nothing promoted from it")

        try:
            data: Any = parse_json(self.body)
        except ValueError as exc:
            refuse(f"the manifest is not JSON ({one_line(exc, 120)})")
        try:
            _check_promotion(self, data, image_only, artifact)
        except _Malformed as malformed:
            refuse(str(malformed))

    def image(self, where: str, then: str, artifact: bool = False) -> ImageRecord:
        """This manifest as the image record every reader takes; RegistryError ``{where}: {the
        problem}; {then}`` for a body that is no image manifest (``artifact``: no OCI artifact
        manifest, whose blobs may be of any media type)."""
        try:
            data: Any = parse_json(self.body)
        except ValueError as exc:
            raise RegistryError(f"{where}: the manifest is not JSON ({one_line(exc, 120)}); {then}") from None
        try:
            return _image_record(self, data, artifact)
        except _Malformed as malformed:
            raise RegistryError(f"{where}: {malformed}; {then}") from None


# -- the image record ----------------------------------------------------------------------------


class _Malformed(Exception):
    """What no image (or artifact) manifest or config is: the problem, in words, for one line."""


@dataclass(frozen=True)
class Descriptor:
    """A blob as a manifest names it, checked: a media type, a sha256 digest, a size in bounds."""

    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class ImageRecord:
    """An image manifest as every reader takes it (rebuild-check, the pull cost, promotion, the
    attestations it carries): ``schemaVersion`` 2, a manifest media type (the one it came as),
    a config descriptor and at most ``MAX_IMAGE_LAYERS`` layer descriptors, each with a sha256
    digest and a size from 0 to ``LAYER_BYTES_MAX``, and, for an image, media types an engine
    pulls (``CONFIG_TYPES``, ``LAYER_TYPES``). A layer may repeat (one blob, two places)."""

    manifest: Manifest
    document: Mapping[str, Any]  # the manifest's JSON object
    config: Descriptor
    layers: tuple[Descriptor, ...]

    @property
    def blobs(self) -> dict[str, Descriptor]:
        """The config and the layers, each digest once: what a pull (or a mount) fetches."""
        return {blob.digest: blob for blob in (self.config, *self.layers)}

    def read_config(self, raw: bytes, where: str, then: str) -> ImageConfig:
        """The config blob ``raw`` of this image, checked against the manifest: the bytes its
        descriptor names (digest and size), a JSON object whose ``rootfs`` is ``layers`` with one
        sha256 ``diff_id`` for each layer. RegistryError ``{where}: {the problem}; {then}``."""
        try:
            return _image_config(self, raw)
        except _Malformed as malformed:
            raise RegistryError(f"{where}: {malformed}; {then}") from None


@dataclass(frozen=True)
class ImageConfig:
    """An image's config, checked against its manifest (``ImageRecord.read_config``)."""

    document: Mapping[str, Any]  # the config's JSON object
    raw: bytes
    diff_ids: tuple[str, ...]  # one per layer, in order: the sha256 of each layer's tar

    @property
    def labels(self) -> dict[str, str]:
        """The image's labels (``config_labels``)."""
        return config_labels(self.document)


def _check_promotion(manifest: Manifest, data: Any, image_only: bool, artifact: bool) -> None:
    """What promotion cannot vouch for, in this order; raises _Malformed."""
    if not isinstance(data, dict):
        raise _Malformed(f"the manifest is a JSON {type(data).__name__}, not an object")
    _check_media_type(data, manifest.media_type)
    if manifest.media_type in INDEX_TYPES:
        _check_index(data, image_only)
    else:
        _image_record(manifest, data, artifact)


def _check_media_type(data: Mapping[str, Any], media_type: str) -> None:
    declared = data.get("mediaType")
    if declared is not None and not isinstance(declared, str):
        raise _Malformed(f"its mediaType is a JSON {type(declared).__name__}, not a string")
    if media_type not in MANIFEST_TYPES or (declared is not None and declared != media_type):
        raise _Malformed(
            f"its mediaType {shown(str(declared or media_type))} is not the manifest type it came as"
        )


def _check_index(data: Mapping[str, Any], image_only: bool) -> None:
    if image_only:
        raise _Malformed("an index inside an index; only an index of image manifests is promoted")
    entries = data.get("manifests")
    if "config" in data or not isinstance(entries, list) or not entries:
        raise _Malformed("an index that names no manifest")
    if len(entries) > MAX_INDEX_MANIFESTS:  # each would be fetched, its blobs mounted
        raise _Malformed(
            f"an index of {len(entries):,} manifests, more than the {MAX_INDEX_MANIFESTS:,} promoted"
        )
    for i, entry in enumerate(entries):
        kind = entry.get("mediaType") if isinstance(entry, dict) else None
        if not isinstance(kind, str):
            raise _Malformed(f"manifests[{i}] has no mediaType string")
        if kind in INDEX_TYPES:
            raise _Malformed(f"manifests[{i}] is itself an index; an index of an index is not promoted")
        if kind not in IMAGE_TYPES:
            raise _Malformed(f"manifests[{i}] is a {shown(kind)}, not an image manifest")
        _descriptor(entry, f"manifests[{i}]", IMAGE_TYPES, MANIFEST_BYTES)


def _image_record(manifest: Manifest, data: Any, artifact: bool) -> ImageRecord:
    if not isinstance(data, dict):
        raise _Malformed(f"the manifest is a JSON {type(data).__name__}, not an object")
    _check_media_type(data, manifest.media_type)
    if manifest.media_type not in IMAGE_TYPES or "manifests" in data:
        raise _Malformed(f"a {shown(manifest.media_type)}, not a single-image manifest")
    version = data.get("schemaVersion")
    if type(version) is not int or version != 2:
        raise _Malformed(f"its schemaVersion is {shown(str(version))}, not 2")
    if not isinstance(data.get("config"), dict):
        raise _Malformed("a single-image manifest that names no config (no image id)")
    config = _descriptor(data["config"], "its config", None if artifact else CONFIG_TYPES, LAYER_BYTES_MAX)
    entries = data.get("layers")
    if not isinstance(entries, list):
        raise _Malformed("its layers are not a list of descriptors")
    if len(entries) > MAX_IMAGE_LAYERS:
        raise _Malformed(
            f"it names {len(entries):,} layers, more than the {MAX_IMAGE_LAYERS:,} any engine runs"
        )
    layers = tuple(
        _descriptor(entry, f"layers[{i}]", None if artifact else LAYER_TYPES, LAYER_BYTES_MAX)
        for i, entry in enumerate(entries)
    )
    return ImageRecord(manifest, data, config, layers)


def _descriptor(
    entry: Any, what: str, types: frozenset[str] | tuple[str, ...] | None, bound: int
) -> Descriptor:
    """``entry`` as a checked descriptor: its media type one of ``types`` (None: any RFC 6838
    type, as an artifact's blobs are), its digest sha256, its size an integer from 0 to ``bound``."""
    if not isinstance(entry, dict):
        raise _Malformed(f"{what} is no descriptor (a JSON object)")
    media_type, digest, size = entry.get("mediaType"), entry.get("digest"), entry.get("size")
    if not isinstance(media_type, str) or not MEDIA_TYPE.fullmatch(media_type):
        raise _Malformed(f"{what} has no media type")
    if types is not None and media_type not in types:
        raise _Malformed(f"{what} is a {shown(media_type)}, which no image holds there")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise _Malformed(f"{what} names no sha256 digest")
    if type(size) is not int:  # a bool is an int to Python, never a size
        raise _Malformed(f"{what} has a size that is a JSON {type(size).__name__}, not an integer")
    if not 0 <= size <= bound:
        said = f"{size:,}" if abs(size) < 10**30 else "an absurd number of"
        raise _Malformed(f"{what} says it is {said} bytes; a size is between 0 and {bound:,}")
    return Descriptor(media_type, digest, size)


def _image_config(image: ImageRecord, raw: bytes) -> ImageConfig:
    described = image.config
    if len(raw) != described.size or "sha256:" + hashlib.sha256(raw).hexdigest() != described.digest:
        raise _Malformed(
            f"its config is {len(raw):,} bytes of another digest than the {described.size:,} bytes of"
            f" {described.digest} its manifest names"
        )
    try:
        data: Any = parse_json(raw)
    except ValueError as exc:
        raise _Malformed(f"its config is not JSON ({one_line(exc, 120)})") from None
    if not isinstance(data, dict):
        raise _Malformed(f"its config is a JSON {type(data).__name__}, not an object")
    rootfs = data.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or not isinstance(diff_ids, list):
        raise _Malformed("its config has no rootfs of type layers with a list of diff_ids")
    if not all(_is_digest(d) for d in diff_ids):
        raise _Malformed("its config's rootfs.diff_ids are not sha256 digests")
    if len(diff_ids) != len(image.layers):
        raise _Malformed(
            f"its config lists {len(diff_ids):,} diff_ids for the manifest's {len(image.layers):,}"
            " layers; each layer has one"
        )
    return ImageConfig(data, raw, tuple(diff_ids))


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and DIGEST.fullmatch(value) is not None


@dataclass(frozen=True)
class Referrer:
    """One manifest whose ``subject`` is an image: its digest, artifact type and annotations, as
    the referrers API (or the referrers tag's index) lists it."""

    digest: str
    artifact_type: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    def descriptor(self, size: int) -> dict[str, Any]:
        return {
            "mediaType": OCI_MANIFEST,
            "digest": self.digest,
            "size": size,
            "artifactType": self.artifact_type,
            "annotations": dict(self.annotations),
        }


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: ``sha256-<hex>`` on the subject's repository."""
    return digest.replace(":", "-", 1)


def artifact_manifest(
    artifact_type: str,
    layer: tuple[str, str, int],
    subject: Manifest,
    annotations: Mapping[str, str],
    layer_annotations: Mapping[str, str] | None = None,
) -> Manifest:
    """An OCI 1.1 artifact: an image manifest with ``artifactType``, the empty config, one layer
    (media type, digest, size) and ``subject`` = the image manifest it is about."""
    media_type, digest, size = layer
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
        "layers": [
            {
                "mediaType": media_type,
                "digest": digest,
                "size": size,
                "annotations": dict(layer_annotations or {}),
            }
        ],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.body)},
        "annotations": dict(annotations),
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_MANIFEST, raw)


# -- the image index publish writes: one entry per platform ------------------------------------------


def image_index(entries: Sequence[tuple[Platform, Manifest]]) -> Manifest:
    """An OCI image index of ``entries``, in the order given: each platform's manifest as the
    registry holds it (its media type, digest and size, so the descriptor is exactly what a pull
    by digest verifies) with the ``platform`` a client selects it by."""
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": manifest.media_type,
                "digest": manifest.digest,
                "size": len(manifest.body),
                "platform": {"architecture": platform.arch, "os": platform.os},
            }
            for platform, manifest in entries
        ],
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_INDEX, raw)


def check_index(index: Manifest, expected: Mapping[str, Manifest], where: str) -> None:
    """Refuse (RegistryError, one line) an index read back that is not the one written: not an
    OCI index, another number of entries, an entry for a platform imagekit does not know or names
    twice, or one whose descriptor (media type, digest, size) is not the expected platform's
    manifest. ``expected``: platform name -> the manifest its entry must name."""

    def refuse(problem: str) -> NoReturn:
        raise RegistryError(f"{where}: {problem}; the index read back is not the one published")

    if index.media_type != OCI_INDEX:
        refuse(f"a {shown(index.media_type)}, not an OCI image index")
    entries = index._json().get("manifests")
    if not isinstance(entries, list) or len(entries) != len(expected):
        refuse(
            f"it names {len(entries) if isinstance(entries, list) else 'no'} manifests, not {len(expected)}"
        )
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        name = _entry_platform(entry)
        if name is None or name in seen or name not in expected:
            refuse(f"manifests[{i}] is for no expected platform, or for one named twice")
        seen.add(name)
        want = expected[name]
        found = (entry.get("mediaType"), entry.get("digest"), entry.get("size"))
        if found != (want.media_type, want.digest, len(want.body)) or type(entry.get("size")) is not int:
            refuse(f"manifests[{i}] ({name}) names {shown(str(found[1]))}, not its manifest {want.digest}")


def _entry_platform(entry: Any) -> str | None:
    """The platform name (``linux/arm64``) an index entry is for, when imagekit knows it."""
    described = entry.get("platform") if isinstance(entry, dict) else None
    if not isinstance(described, dict) or set(described) != {"architecture", "os"}:
        return None
    arch, os_name = described.get("architecture"), described.get("os")
    known = platforms.of_machine(arch) if isinstance(arch, str) else None
    return known.name if known is not None and known.arch == arch and known.os == os_name else None


# -- image configs -------------------------------------------------------------------------------


def config_labels(config: Mapping[str, Any]) -> dict[str, str]:
    """The labels an image config states (``config.Labels``): string keys to string values, the
    only kind a builder writes (a number, a list or null is no label and is left out); {} where it
    states none. A value is as the registry holds it, a NUL or a newline included: whoever passes
    one on (an argument, a line of output) checks or cleans it there."""
    inner = config.get("config")
    found = inner.get("Labels") if isinstance(inner, dict) else None
    if not isinstance(found, dict):
        return {}
    return {key: value for key, value in found.items() if isinstance(key, str) and isinstance(value, str)}
