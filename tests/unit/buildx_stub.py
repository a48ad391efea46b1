"""A stand-in for `docker buildx` (on IMAGEKIT_DOCKER_CLI) that writes what buildx 0.13 writes for
``build --output type=oci,dest=TAR,name=NAME --metadata-file FILE``: an OCI tar of one image (its
config carrying every --label) and the metadata naming its digests. ``STUB_BUILDX_MODE`` makes it
lie the ways a hostile or broken builder could:

- ``held``: the metadata names another image (one the engine already holds);
- ``other-image``: the tar, and the metadata with it, are of an image built from other inputs;
- ``renamed``: the tar names its image as another reference than the one asked for;
- ``runaway``: the build fails at a step whose error, and buildx's last line, are runaway lines
  (a compiler's, a pip resolver's: one line of 100,000 characters).

``oci_archive`` writes such a tar for the tests themselves."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path

from imagekit.core import naming

MODE = "STUB_BUILDX_MODE"
HELD = "sha256:" + "e" * 64  # the image a lying metadata file names
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def buildkit_name(name: str) -> str:
    """The name as BuildKit annotates it (Docker's normalized form), for the names tests use: a
    registry host has a '.' or a ':' in it; Docker Hub's official images are in ``library/``."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def oci_archive(dest: Path, name: str, labels: Mapping[str, str]) -> tuple[str, str]:
    """An OCI tar at ``dest`` as BuildKit writes one: one image named ``name``; its
    (manifest digest, config digest)."""
    layer = b"one layer's bytes"
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": dict(labels)},
            "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest_of(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest_of(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    tag = name.rsplit("/", 1)[-1].rpartition(":")[2]
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest_of(manifest),
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": buildkit_name(name),
                        "org.opencontainers.image.created": "2024-01-01T00:00:00Z",
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
    ).encode()
    with tarfile.open(dest, "w") as tar:
        for blob in (layer, config, manifest):
            _add(tar, f"blobs/sha256/{digest_of(blob).removeprefix('sha256:')}", blob)
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", index)
    return digest_of(manifest), digest_of(config)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


RUNAWAY = "x" * 100_000


def fail_at_a_runaway_step() -> int:
    """What buildx 0.13 prints for a failed step (rawjson progress, then plain text), runaway."""
    step = {"digest": "sha256:" + "1" * 64, "name": f"[2/2] RUN --network=none {RUNAWAY}"}
    sys.stderr.write(json.dumps({"vertexes": [{**step, "started": "2024-01-01T00:00:00Z"}]}, indent=2))
    sys.stderr.write(json.dumps({"vertexes": [{**step, "error": f"process failed: {RUNAWAY}"}]}, indent=2))
    sys.stderr.write(f"\nERROR: failed to solve: {RUNAWAY}\n")
    return 1


def build(argv: list[str], mode: str) -> int:
    """``buildx build ...``: the context (stdin) read, the tar and the metadata written."""
    sys.stdin.buffer.read()
    if mode == "runaway":
        return fail_at_a_runaway_step()
    metadata = Path(argv[argv.index("--metadata-file") + 1])
    output = dict(part.split("=", 1) for part in argv[argv.index("--output") + 1].split(",")[1:])
    labels = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--label")
    name = output["name"]
    if mode == "other-image":
        labels[naming.INPUT_DIGEST_LABEL] = "f" * 64
    if mode == "renamed":
        name = naming.reference("example/someone-else", "latest")
    manifest, config = oci_archive(Path(output["dest"]), name, labels)
    said = {
        "containerimage.digest": HELD if mode == "held" else manifest,
        "containerimage.config.digest": config,
    }
    metadata.write_text(json.dumps(said))
    return 0


def stub_cli(directory: Path) -> Path:
    """A `docker` in ``directory`` that is this stub, for IMAGEKIT_DOCKER_CLI (with the repository
    on PYTHONPATH): a test of the BuildKit path then needs no buildx on the machine that runs it (a
    fresh machine's fast tier has none)."""
    cli = directory / "docker"
    cli.write_text(f'#!/bin/sh\nexec {sys.executable} -m tests.unit.buildx_stub "$@"\n')
    cli.chmod(0o755)
    return cli


def main(argv: list[str]) -> int:
    if argv[:2] == ["buildx", "version"]:
        print("github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1")
        return 0
    if argv[:2] == ["buildx", "build"]:
        return build(argv, os.environ.get(MODE, "honest"))
    print(f"buildx stub: {argv} is not a command it answers", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
