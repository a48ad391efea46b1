"""What buildx's metadata file says it built, checked against the OCI tar it wrote (issue 45): a
metadata file naming an image the engine already held, or a tar of another image, moves no tag."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from imagekit.core import naming
from imagekit.engine.oci_archive import ArchiveMismatch, check_archive, docker_normalized
from tests.unit.buildx_stub import HELD, oci_archive

NAME = "registry.example:5000/imagekit/pytorch:2.4.1-cuda12.1"
LABELS = ((naming.INPUT_DIGEST_LABEL, "a" * 64), (naming.VERSION_LABEL, "0.9.0"), ("team", "ml"))


def written(tmp_path: Path, name: str = NAME, labels: dict[str, str] | None = None) -> tuple[Path, str, str]:
    tar = tmp_path / "image.oci.tar"
    manifest, config = oci_archive(tar, name, dict(LABELS) if labels is None else labels)
    return tar, manifest, config


def rewritten(tar: Path, change: dict[str, bytes]) -> None:
    """The tar with some members' content replaced (the rest as they were)."""
    with tarfile.open(tar) as old:
        members = {m.name: old.extractfile(m).read() for m in old.getmembers()}  # type: ignore[union-attr]
    members.update(change)
    tar.unlink()
    with tarfile.open(tar, "w") as new:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))


def index_of(tar: Path) -> dict[str, object]:
    with tarfile.open(tar) as archive:
        return json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]


def test_the_image_buildx_built_passes(tmp_path: Path) -> None:
    tar, manifest, config = written(tmp_path)
    check_archive(tar, manifest, config, NAME, LABELS)
    hub = "imagekit/pytorch:dev"  # a Docker Hub name: the tar names it docker.io/imagekit/pytorch:dev
    tar, manifest, config = written(tmp_path, hub)
    check_archive(tar, manifest, config, hub, LABELS)


def test_metadata_naming_an_image_the_engine_already_held_is_refused(tmp_path: Path) -> None:
    tar, built, config = written(tmp_path)
    with pytest.raises(ArchiveMismatch) as refused:
        check_archive(tar, HELD, config, NAME, LABELS)
    assert refused.value.message == (
        f"buildx's metadata file says it built {HELD}, but the OCI tar it wrote holds '{built}':"
        " the metadata names another image; nothing was loaded or tagged"
    )
    assert refused.value.exit_code == 1


def test_an_archive_of_another_image_is_refused(tmp_path: Path) -> None:
    # The metadata agrees with the tar, but the image was built from other inputs.
    other = {**dict(LABELS), naming.INPUT_DIGEST_LABEL: "f" * 64}
    tar, manifest, config = written(tmp_path, labels=other)
    label = re.escape(naming.INPUT_DIGEST_LABEL)
    with pytest.raises(
        ArchiveMismatch, match=rf"does not carry this build's label {label}='a+' \(it has 'f+'\)"
    ):
        check_archive(tar, manifest, config, NAME, LABELS)
    unlabelled = {k: v for k, v in LABELS if k != "team"}
    tar, manifest, config = written(tmp_path, labels=unlabelled)
    with pytest.raises(ArchiveMismatch, match=r"label team='ml' \(it has none\)"):
        check_archive(tar, manifest, config, NAME, LABELS)


def test_a_config_or_blob_other_than_the_metadata_says_is_refused(tmp_path: Path) -> None:
    tar, manifest, config = written(tmp_path)
    with pytest.raises(ArchiveMismatch, match=r"has config sha256:0+, but the manifest in its OCI tar names"):
        check_archive(tar, manifest, "sha256:" + "0" * 64, NAME, LABELS)
    # A blob under the manifest's name whose content is another: its name alone proves nothing.
    rewritten(tar, {f"blobs/sha256/{config.removeprefix('sha256:')}": b'{"config": {"Labels": {}}}'})
    with pytest.raises(ArchiveMismatch, match=f"a blob {config} whose content has another digest"):
        check_archive(tar, manifest, config, NAME, LABELS)


def test_an_index_naming_another_image_or_name_is_refused(tmp_path: Path) -> None:
    tar, manifest, config = written(tmp_path)
    index = index_of(tar)
    entry = index["manifests"][0]  # type: ignore[index]
    extra = {**entry, "digest": HELD, "annotations": {"io.containerd.image.name": "docker.io/library/x:y"}}
    rewritten(tar, {"index.json": json.dumps({**index, "manifests": [entry, extra]}).encode()})
    with pytest.raises(ArchiveMismatch, match=f"holds '{HELD}': the metadata names another image"):
        check_archive(tar, manifest, config, NAME, LABELS)
    for key, value in (
        ("io.containerd.image.name", "docker.io/library/someone-else:latest"),
        ("org.opencontainers.image.ref.name", "docker.io/library/someone-else:latest"),
    ):
        renamed = {**entry, "annotations": {**entry["annotations"], key: value}}
        rewritten(tar, {"index.json": json.dumps({**index, "manifests": [renamed]}).encode()})
        with pytest.raises(
            ArchiveMismatch, match=r"names its image 'docker\.io/library/someone-else:latest'"
        ):
            check_archive(tar, manifest, config, NAME, LABELS)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"index.json": b"not json"}, "cannot be read"),
        ({"index.json": b'{"manifests": []}'}, "names no image in its index.json"),
    ],
)
def test_an_unreadable_archive_is_one_line(tmp_path: Path, members: dict[str, bytes], message: str) -> None:
    tar, manifest, config = written(tmp_path)
    rewritten(tar, members)
    with pytest.raises(ArchiveMismatch, match=message):
        check_archive(tar, manifest, config, NAME, LABELS)
    (tmp_path / "garbage.tar").write_bytes(b"\0" * 10 + b"x" * 2000)
    with pytest.raises(ArchiveMismatch, match="cannot be read"):
        check_archive(tmp_path / "garbage.tar", manifest, config, NAME, LABELS)


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("pytorch:dev", "docker.io/library/pytorch:dev"),
        ("imagekit/pytorch:dev", "docker.io/imagekit/pytorch:dev"),
        ("localhost/pytorch:dev", "localhost/pytorch:dev"),
        ("127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c"),
        ("index.docker.io/x:1", "docker.io/library/x:1"),
        ("ghcr.io/o/r", "ghcr.io/o/r:latest"),
    ],
)
def test_names_are_normalized_as_docker_does(name: str, normalized: str) -> None:
    assert docker_normalized(name) == normalized
