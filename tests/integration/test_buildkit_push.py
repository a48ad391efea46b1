"""`imagekit build --builder buildkit --push` for real (issue 46, item 2): BuildKit pushes the cell
straight to its staging tag (`type=image,push=true,store=false,rewrite-timestamp=true`, zstd), no
OCI archive and no load; the digest recorded is the one the registry serves. Run twice (the second
run is where identity bugs hide: the same digest, nothing uploaded again), rebuilt with --force to
the same digest, then verified from the registry with the engine holding no copy.

A registry of the test's own on 127.0.0.1 with its access log on, so what each run uploaded is
counted on the registry's side."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from testbed.matrix_projects import CHECK_TEMPLATE, Project, write_cells
from testbed.registry_server import LocalRegistry
from tests.integration.test_buildkit import CELL

ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
UPLOAD = re.compile(r'"(PUT|POST|PATCH) (\S+) HTTP/[\d.]+" (\d{3})')


@pytest.fixture
def registry() -> Iterator[LocalRegistry]:
    server = LocalRegistry(access_log=True).start()
    yield server
    server.remove()


def uploads(registry: LocalRegistry, start: int) -> list[str]:
    """The writes the registry answered from byte ``start`` of its log on (method and path)."""
    text = (registry.dir / "registry.log").read_bytes()[start:].decode(errors="replace")
    return [f"{m.group(1)} {m.group(2)}" for m in UPLOAD.finditer(text)]


def served(registry: LocalRegistry, repository: str, reference: str) -> tuple[str, str]:
    """(the digest the registry serves for ``reference``, the manifest's body)."""
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["Docker-Content-Digest"], answer.read().decode()


def test_buildkit_pushes_straight_to_the_registry_twice_as_one_image(
    project: Project, api: docker.APIClient, registry: LocalRegistry
) -> None:
    # the stand-in check script, BuildKit's way (every RUN names its network)
    template = CHECK_TEMPLATE.replace("\nRUN echo '", "\nRUN --network=none echo '")
    (project.root / "templates" / "Dockerfile.j2").write_text(template)
    write_cells(project, ["2.1"], publish={"registry": registry.host})
    push = ("--builder", "buildkit", "--push", "--compression", "zstd")

    first = project.build(*push)
    assert first.returncode == 0, first.stderr
    cell = project.report()[CELL]
    staged = cell["staged"]
    assert isinstance(staged, dict) and cell["status"] == "built"
    digest = staged["digest"]
    assert cell["image_id"] == digest and cell["tags"] == []
    # the registry serves that very manifest under the staging tag, its layers in zstd
    assert served(registry, staged["repository"], staged["tag"])[0] == digest
    assert ZSTD in served(registry, staged["repository"], digest)[1]
    log = Path(project.root, str(cell["log"])).read_text()
    assert f"staged: BuildKit pushed {registry.host}/" in log and "loading it into the engine" not in log
    # no archive, no load: the engine holds no image of the cell, and no tar is left
    assert not api.images(name=project.repository) and not api.images(
        name=f"{registry.host}/{project.repository}"
    )
    assert not list((project.root / ".imagekit" / "buildx").glob("*"))

    # The second run: recognised from the registry, nothing built and nothing uploaded.
    start = (registry.dir / "registry.log").stat().st_size
    again = project.build(*push)
    assert again.returncode == 0, again.stderr
    cell = project.report()[CELL]
    assert cell["status"] == "skipped" and cell["staged"]["digest"] == digest  # type: ignore[index]
    assert uploads(registry, start) == []

    # Built again from its inputs (--force): the same digest, and no layer uploaded again.
    start = (registry.dir / "registry.log").stat().st_size
    forced = project.build(*push, "--force")
    assert forced.returncode == 0, forced.stderr
    cell = project.report()[CELL]
    assert cell["status"] == "built" and cell["staged"]["digest"] == digest  # type: ignore[index]
    # (the registry cache's own record is written again: it holds the build's time)
    image_uploads = [
        u for u in uploads(registry, start) if "/blobs/uploads/" in u and "/buildcache/" not in u
    ]
    assert image_uploads == [], uploads(registry, start)
    assert served(registry, staged["repository"], staged["tag"])[0] == digest

    # verify pulls the staged digest: the engine held no copy of it
    verified = project.run("verify", "--matrix", "matrix.yaml", "--pull", "--gpus", "none")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    pulled = api.inspect_image(f"{registry.host}/{staged['repository']}@{digest}")
    assert pulled["Id"] == digest
    api.remove_image(pulled["Id"], force=True)
