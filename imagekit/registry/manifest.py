"""The manifest record: OCI and Docker media types, what a manifest names, and the check that a
manifest is one promotion can vouch for; OCI 1.1 artifacts and their referrers; an image
config read as a JSON object and its labels (``image_config``, ``config_labels``), for every reader.

The bytes are the registry's, trusted no more than a file: every property reads them through
``parse_json`` and answers nothing (not a traceback) for a shape the API does not promise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from imagekit.core import platforms
from imagekit.core.errors import RegistryError, one_line
from imagekit.core.limits import MAX_INDEX_MANIFESTS
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
    def blobs(self) -> list[str]:
        """The config and layer digests of a single-image manifest (none for an index)."""
        data = self._json()
        found = [data.get("config"), *(data.get("layers") or ())]
        return [
            str(b["digest"]) for b in found if isinstance(b, dict) and DIGEST.fullmatch(str(b.get("digest")))
        ]

    @property
    def blob_sizes(self) -> dict[str, int]:
        """The sizes the manifest gives its blobs, by digest: a copy of one reads no more."""
        data = self._json()
        found = [data.get("config"), *(data.get("layers") or ())]
        return {
            str(b["digest"]): b["size"]
            for b in found
            if isinstance(b, dict) and type(b.get("size")) is int and b["size"] >= 0 and b.get("digest")
        }

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

    def check_promotable(self, where: str, image_only: bool = False) -> None:
        """Refuse (RegistryError, one line) what promotion cannot vouch for: a body that is not a
        JSON object, a mediaType that is not a string or not a manifest's, a single image naming
        no config (no image id to compare with the verified one), an index naming no manifest,
        or one naming an index or anything but image manifests. ``image_only``: an index's child,
        which must itself be an image."""

        def refuse(problem: str) -> NoReturn:
            raise RegistryError(f"{where}: {problem}; nothing promoted from it")

        try:
            data: Any = parse_json(self.body)
        except ValueError as exc:
            refuse(f"the manifest is not JSON ({one_line(exc, 120)})")
        problem = _promotion_problem(data, self.media_type, image_only)
        if problem is not None:
            refuse(problem)


# What promotion cannot vouch for, checked in this order; each returns the problem or None.


def _promotion_problem(data: Any, media_type: str, image_only: bool) -> str | None:
    if not isinstance(data, dict):
        return f"the manifest is a JSON {type(data).__name__}, not an object"
    problem = _media_type_problem(data, media_type)
    if problem is not None:
        return problem
    if media_type in INDEX_TYPES:
        return _index_problem(data, image_only)
    return _image_problem(data)


def _media_type_problem(data: Mapping[str, Any], media_type: str) -> str | None:
    declared = data.get("mediaType")
    if declared is not None and not isinstance(declared, str):
        return f"its mediaType is a JSON {type(declared).__name__}, not a string"
    if media_type not in MANIFEST_TYPES or (declared is not None and declared != media_type):
        return f"its mediaType {shown(str(declared or media_type))} is not the manifest type it came as"
    return None


def _index_problem(data: Mapping[str, Any], image_only: bool) -> str | None:
    if image_only:
        return "an index inside an index; only an index of image manifests is promoted"
    entries = data.get("manifests")
    if "config" in data or not isinstance(entries, list) or not entries:
        return "an index that names no manifest"
    if len(entries) > MAX_INDEX_MANIFESTS:  # each would be fetched, its blobs mounted
        return f"an index of {len(entries):,} manifests, more than the {MAX_INDEX_MANIFESTS:,} promoted"
    return next(
        (problem for i, entry in enumerate(entries) if (problem := _index_entry_problem(i, entry))), None
    )


def _index_entry_problem(i: int, entry: Any) -> str | None:
    kind = entry.get("mediaType") if isinstance(entry, dict) else None
    if not isinstance(kind, str):
        return f"manifests[{i}] has no mediaType string"
    if kind in INDEX_TYPES:
        return f"manifests[{i}] is itself an index; an index of an index is not promoted"
    if kind not in IMAGE_TYPES:
        return f"manifests[{i}] is a {shown(kind)}, not an image manifest"
    if not _is_digest(entry.get("digest")):
        return f"manifests[{i}] names no sha256 digest"
    return None


def _image_problem(data: Mapping[str, Any]) -> str | None:
    config = data.get("config")
    if "manifests" in data or not isinstance(config, dict):
        return "a single-image manifest that names no config (no image id)"
    if not _is_digest(config.get("digest")):
        return "its config names no sha256 digest (no image id)"
    layers = data.get("layers", [])
    if not isinstance(layers, list) or not all(
        isinstance(layer, dict) and _is_digest(layer.get("digest")) for layer in layers
    ):
        return "its layers are not a list of sha256 descriptors"
    return None


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


def image_config(body: bytes, where: str) -> dict[str, Any]:
    """An image config's bytes, as a registry holds them, as a JSON object: strict JSON, nesting
    bounded (``parse_json``); RegistryError (one line naming ``where``) for anything else. Never
    ``json.loads``: bad UTF-8, a raw control character in a string or deep nesting would be a
    traceback from it."""
    try:
        data: Any = parse_json(body)
    except ValueError as exc:
        raise RegistryError(f"{where}: its image config is not JSON ({one_line(exc, 120)})") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{where}: its image config is a JSON {type(data).__name__}, not an object")
    return data


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
