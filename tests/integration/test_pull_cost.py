"""Pull cost against a real registry and the real engine: two busybox cells sharing their base
layer, staged by `build --push`, counted from the registry's manifests, then refused by a tiny
publish.max_layer_size and published under the default one."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
import yaml

from imagekit.registry.manifest import ACCEPT
from testbed.matrix_projects import Project, write_cells
from testbed.registry_server import LocalRegistry


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    server = LocalRegistry().start()
    yield server
    server.remove()


def layers_of(host: str, repository: str, digest: str) -> dict[str, int]:
    """The layers of a staged manifest, by digest, each with the size the registry's blob has."""
    manifest = requests.get(
        f"http://{host}/v2/{repository}/manifests/{digest}", headers={"Accept": ACCEPT}, timeout=10
    ).json()
    sizes = {}
    for layer in manifest["layers"]:
        head = requests.head(f"http://{host}/v2/{repository}/blobs/{layer['digest']}", timeout=10)
        sizes[layer["digest"]] = int(head.headers["Content-Length"])  # the blob's real size
    return sizes


def test_cells_sharing_a_base_layer_count_it_once(project: Project, registry: LocalRegistry) -> None:
    write_cells(project, ("2.1", "2.2"), publish={"policy": "built", "max_layer_size": 16})
    host = ("--registry", registry.host)
    staged = project.build("--push", *host)
    assert staged.returncode == 0, staged.stderr
    cells = project.report()
    assert len(cells) == 2
    real = {
        cell: layers_of(registry.host, project.repository, record["staged"]["digest"])  # type: ignore[index]
        for cell, record in cells.items()
    }
    first, second = real.values()
    shared = {digest: size for digest, size in first.items() if digest in second}
    assert shared and sum(shared.values()) > 1000  # busybox's own layer, at least
    for cell, record in cells.items():
        cost = record["pull_cost"]
        assert isinstance(cost, dict)
        assert cost["shared"] == sum(shared.values())
        assert [(layer["digest"], layer["size"]) for layer in cost["layers"]] == list(real[cell].items())
        assert cost["total"] == sum(real[cell].values()) + cost["config"]["size"]
    document = json.loads((project.root / ".imagekit" / "report.json").read_text())
    pull = document["pull"]
    assert pull["cells"] == 2 and pull["distinct"] < pull["summed"]
    assert pull["summed"] - pull["distinct"] == sum(shared.values())  # configs differ, layers once
    shown = project.run("report", "--markdown")
    assert "#### pull cost" in shown.stdout and "pull: a fresh node fetches" in shown.stdout

    # publish.max_layer_size of 16 bytes: every cell refused, naming its layer and step; nothing moves
    refused = project.run("publish", "--matrix", "matrix.yaml", *host)
    assert refused.returncode == 1, refused.stderr
    for cell in cells:
        assert f"imagekit: refused: {cell}: its layer sha256:" in refused.stderr
    assert "over publish.max_layer_size 16 bytes; made by: " in refused.stderr
    assert [t for t in registry.tags(project.repository) if not t.startswith("staging-")] == []
    assert not (project.root / "images.lock.json").exists()

    # the default cap (8 GiB): published, and the report keeps each cell's pull cost
    matrix = yaml.safe_load((project.root / "matrix.yaml").read_text())
    del matrix["publish"]["max_layer_size"]
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    done = project.run("publish", "--matrix", "matrix.yaml", *host)
    assert done.returncode == 0, done.stderr
    after = project.report()
    assert {c: r["pull_cost"]["shared"] for c, r in after.items()} == dict.fromkeys(
        cells, sum(shared.values())
    )  # type: ignore[index]
