"""`imagekit pin-bases` against the local registry: the lock holds the digest the registry names for
the base's tag, the plan builds FROM name:tag@digest on the real engine, and a tag that moves
upstream changes nothing until the pins are refreshed (`--check` says so)."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterator

import docker
import pytest
import requests

from imagekit.plan.pin_file import pins_path
from testbed.matrix_projects import REGISTRY, Project, busybox_base, write_cells
from tests.integration.conftest import remove_built

pytestmark = pytest.mark.integration


def _tar(dockerfile: str) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile.encode())
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    data.seek(0)
    return data


ACCEPT = ",".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def _registry_digest(reference: str) -> str:
    """What the registry itself answers for ``reference``'s tag (HEAD, Docker-Content-Digest)."""
    name, _, tag = reference.rpartition(":")
    path = name.removeprefix(f"{REGISTRY}/")
    answer = requests.head(
        f"http://{REGISTRY}/v2/{path}/manifests/{tag}", headers={"Accept": ACCEPT}, timeout=30
    )
    answer.raise_for_status()
    return answer.headers["Docker-Content-Digest"]


def _push(api: docker.APIClient, source: str, target: str) -> str:
    """``source`` pushed as ``target``; the digest the registry stored."""
    name, _, tag = target.rpartition(":")
    api.tag(source, name, tag)
    for line in api.push(name, tag, stream=True, decode=True):
        assert "error" not in line, line
    return _registry_digest(target)


@pytest.fixture
def base(api: docker.APIClient, busybox: str) -> Iterator[str]:
    """The busybox test image in the local registry, under a repository of this test's own."""
    repository = f"{REGISTRY}/imagekit-test-hygiene-{uuid.uuid4().hex[:8]}/busybox"
    reference = f"{repository}:v1"
    pushed: list[str] = [_push(api, busybox, reference)]
    yield reference
    # What this test made: its tags in the engine, its manifests in the registry.
    for image in api.images(name=repository):
        for tag in image.get("RepoTags") or ():
            api.remove_image(tag, force=True)
    path = repository.removeprefix(f"{REGISTRY}/")
    for digest in pushed + _moved:
        requests.delete(f"http://{REGISTRY}/v2/{path}/manifests/{digest}", timeout=30)
    _moved.clear()


_moved: list[str] = []  # digests a test pushed onto the tag after the first


def test_pin_bases_pins_the_registrys_digest_and_the_build_uses_it(
    api: docker.APIClient, project: Project, base: str
) -> None:
    write_cells(project, bases=busybox_base(image=base))
    lock = pins_path(project.root / "matrix.yaml")
    pinned = project.run("pin-bases", "--matrix", "matrix.yaml")
    assert pinned.returncode == 0, pinned.stderr
    registry_digest = _registry_digest(base)
    assert json.loads(lock.read_text()) == {"version": 1, "bases": {base: registry_digest}}
    assert f"{base} {registry_digest} (new)" in pinned.stdout
    assert project.run("pin-bases", "--matrix", "matrix.yaml", "--check").returncode == 0

    # The real engine builds FROM name:tag@digest, and the image says which base it is.
    try:
        built = project.build()
        assert built.returncode == 0, built.stderr
        (cell,) = project.report().values()
        image = api.inspect_image(str(cell["image_id"]))
        labels = image["Config"]["Labels"]
        assert labels["org.opencontainers.image.base.name"] == base
        assert labels["org.opencontainers.image.base.digest"] == registry_digest
    finally:
        remove_built(api, project.root)

    # The tag moves upstream: the lock still pins the old digest until it is refreshed.
    stream = api.build(
        fileobj=_tar(f"FROM {base}\nLABEL moved=yes\n"), custom_context=True, rm=True, decode=True
    )
    built_id = next(str(line["aux"]["ID"]) for line in stream if "aux" in line)
    moved = _push(api, built_id, base)
    _moved.append(moved)
    checked = project.run("pin-bases", "--matrix", "matrix.yaml", "--check")
    assert checked.returncode == 1 and f"moved from {registry_digest}" in checked.stdout
    assert json.loads(lock.read_text())["bases"][base] == registry_digest  # --check wrote nothing
    assert project.run("pin-bases", "--matrix", "matrix.yaml").returncode == 0
    assert json.loads(lock.read_text())["bases"][base] == moved


def test_a_tag_the_registry_does_not_have_is_one_line_and_no_lock(project: Project, base: str) -> None:
    write_cells(project, bases=busybox_base(image=base.replace(":v1", ":no-such-tag")))
    done = project.run("pin-bases", "--matrix", "matrix.yaml")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "has no tag no-such-tag" in line
    assert not pins_path(project.root / "matrix.yaml").exists()
