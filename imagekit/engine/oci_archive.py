"""The OCI tar a build wrote, checked against what buildx's metadata file says it built.

imagekit tags the image id that ``--metadata-file`` names (``containerimage.digest``), and the
engine names the image it loads from the tar by the tar's own ``io.containerd.image.name``
annotation. Neither is taken on trust: a metadata file that names an image the engine already
held, or a tar of another image (a stale or swapped file, a wrapper on IMAGEKIT_DOCKER_CLI, a
remote builder answering for another build), would move a cell's tags onto an image that was not
built from its inputs, and the build would pass. So before anything is loaded or tagged, the tar
must hold what the metadata says: every entry of its index.json is the manifest the metadata names,
under no name but the one asked for; the manifest and its config hash to their digests; the config
is the one the metadata names and carries every label the build was given (the cell's input digest,
a base's context digest, imagekit's version, each --label).

The reader of such a tar (``read_member``, ``read_blob``, ``open_blob``: bounded, a blob checked
against its digest) is the one every reader of buildx's OCI tars uses (``imagekit.builds.rebuild_check``
too), each saying what did not happen when it fails (``consequence``).

What buildx 0.13 writes (``--output type=oci,name=NAME``): index.json with one entry per name, the
image manifest's descriptor annotated with the name as BuildKit normalizes it
(``docker.io/library/x:tag``); the descriptor is the one whose digest the metadata reports.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from imagekit.core import naming
from imagekit.core.errors import ImagekitError, one_line
from imagekit.core.limits import CONFIG_BYTES, MANIFEST_BYTES
from imagekit.core.safetypes import parse_json
from imagekit.core.text import shown

# The annotations `docker load` names an image by: containerd's, else the OCI one (BuildKit
# writes the tag alone there, but the engine takes a whole reference in it as a name too).
IMAGE_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
_NOTHING_DONE = "nothing was loaded or tagged"


class ArchiveMismatch(ImagekitError):
    """The OCI tar is not (only) the image buildx's metadata names, or not this build's image."""


def docker_normalized(name: str) -> str:
    """``name`` as Docker's reference parser normalizes it (BuildKit annotates the tar with this):
    a name with no registry is Docker Hub's, and one with no namespace is in ``library/``."""
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        domain, path = ("docker.io" if first == "index.docker.io" else first), rest
    else:
        domain, path = "docker.io", name
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    if ":" not in path.rsplit("/", 1)[-1] and "@" not in path:
        path += ":latest"
    return f"{domain}/{path}"


def check_archive(
    path: Path, manifest_digest: str, config_digest: str, name: str, labels: Sequence[tuple[str, str]]
) -> None:
    """Raise ArchiveMismatch unless the OCI tar ``path`` holds the image buildx's metadata names
    (``manifest_digest``, ``config_digest``), named ``name`` and nothing else, with ``labels``."""
    try:
        with tarfile.open(path) as tar:
            _check(tar, manifest_digest, config_digest, name, labels)
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise ArchiveMismatch(
            f"the OCI tar buildx wrote cannot be read ({one_line(exc)}); {_NOTHING_DONE}"
        ) from None


def _check(
    tar: tarfile.TarFile,
    manifest_digest: str,
    config_digest: str,
    name: str,
    labels: Sequence[tuple[str, str]],
) -> None:
    index = parse_json(read_member(tar, "index.json", MANIFEST_BYTES, _NOTHING_DONE))
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ArchiveMismatch(f"the OCI tar buildx wrote names no image in its index.json; {_NOTHING_DONE}")
    names = {name, docker_normalized(name)}
    allowed = {IMAGE_NAME: names, REF_NAME: {*names, name.rsplit("/", 1)[-1].rpartition(":")[2]}}
    for listed in entries:
        entry = listed if isinstance(listed, dict) else {}
        digest = entry.get("digest")
        if digest != manifest_digest:
            raise ArchiveMismatch(
                f"buildx's metadata file says it built {manifest_digest}, but the OCI tar it wrote"
                f" holds {shown(str(digest))}: the metadata names another image; {_NOTHING_DONE}"
            )
        annotations = entry.get("annotations")
        annotations = annotations if isinstance(annotations, Mapping) else {}
        for key, known in allowed.items():
            named = annotations.get(key)
            if named is not None and named not in known:
                raise ArchiveMismatch(
                    f"the OCI tar buildx wrote names its image {shown(str(named))}, not {name}:"
                    f" loading it would move that name; {_NOTHING_DONE}"
                )
    manifest: Any = parse_json(read_blob(tar, manifest_digest, MANIFEST_BYTES, _NOTHING_DONE))
    config = manifest.get("config") if isinstance(manifest, dict) else None
    held = config.get("digest") if isinstance(config, dict) else None
    if held != config_digest:
        raise ArchiveMismatch(
            f"buildx's metadata file says {manifest_digest} has config {config_digest}, but the"
            f" manifest in its OCI tar names {shown(str(held))}; {_NOTHING_DONE}"
        )
    document: Any = parse_json(read_blob(tar, config_digest, CONFIG_BYTES, _NOTHING_DONE))
    inner = document.get("config") if isinstance(document, dict) else None
    found = inner.get("Labels") if isinstance(inner, dict) else None
    found = found if isinstance(found, dict) else {}
    problem = _label_problem(found, labels)
    if problem is not None:
        raise ArchiveMismatch(
            f"the image buildx's metadata names ({manifest_digest}) {problem}: it is not the image"
            f" built from these inputs; {_NOTHING_DONE}"
        )


def _label_problem(found: Mapping[str, Any], labels: Sequence[tuple[str, str]]) -> str | None:
    """What an image's labels ``found`` lack of the ``labels`` its build was given; None: nothing."""
    for key, value in labels:
        if found.get(key) != value:
            held = f"it has {shown(str(found[key]))}" if key in found else "it has none"
            return f"does not carry this build's label {key}={shown(value)} ({held})"
    return None


def read_member(tar: tarfile.TarFile, member: str, limit: int, consequence: str) -> bytes:
    """The file ``member`` of the tar, of at most ``limit`` bytes (ArchiveMismatch, saying
    ``consequence``, when absent or larger)."""
    handle = _open(tar, member, consequence)
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise ArchiveMismatch(
            f"the OCI tar buildx wrote holds a {member} over {limit:,} bytes; {consequence}"
        )
    return data


def read_blob(tar: tarfile.TarFile, digest: str, limit: int, consequence: str) -> bytes:
    """The blob ``digest`` of the tar, checked to hash to it: its name alone proves nothing."""
    data = read_member(tar, blob_member(digest, consequence), limit, consequence)
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ArchiveMismatch(
            f"the OCI tar buildx wrote holds a blob {digest} whose content has another digest; {consequence}"
        )
    return data


def open_blob(tar: tarfile.TarFile, digest: str, consequence: str) -> IO[bytes]:
    """The blob ``digest`` of the tar to stream (a layer: its reader bounds and checks what it reads)."""
    return _open(tar, blob_member(digest, consequence), consequence)


def blob_member(digest: str, consequence: str) -> str:
    """The tar's file of the blob ``digest`` (refused when ``digest`` is no sha256 digest)."""
    if not naming.DIGEST.fullmatch(digest):
        raise ArchiveMismatch(f"{shown(digest)} is no sha256 digest; {consequence}")
    return f"blobs/sha256/{digest.removeprefix('sha256:')}"


def _open(tar: tarfile.TarFile, member: str, consequence: str) -> IO[bytes]:
    try:
        handle = tar.extractfile(member)
    except KeyError:
        handle = None
    if handle is None:
        raise ArchiveMismatch(f"the OCI tar buildx wrote has no file {member}; {consequence}")
    return handle
