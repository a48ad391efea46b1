"""One cell for linux/amd64 and linux/arm64, built by the real engine (the arm64 one needs no
emulation: its image has no RUN step), staged by `build --push` in a real registry (Debian's
docker-registry), published as one OCI image index and read back through the registry API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import kubernetes_validate
import pytest
import requests
import yaml

from imagekit.registry.manifest import ACCEPT, OCI_INDEX
from testbed.matrix_projects import NO_RUN_TEMPLATE as TEMPLATE
from testbed.matrix_projects import RUN_ID, Project
from testbed.registry_server import LocalRegistry
from testbed.waivers import critical_waivers


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    server = LocalRegistry().start()
    yield server
    server.remove()


def manifest(registry: LocalRegistry, repository: str, reference: str) -> requests.Response:
    answer = requests.get(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}",
        headers={"Accept": ACCEPT},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer


def test_two_platforms_publish_one_index_of_their_staged_digests(
    project: Project, registry: LocalRegistry, tiny_bases: str, api: docker.APIClient, tmp_path: Path
) -> None:
    (project.root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    document = {
        "version": 1,
        "templates": "templates",
        "publish": {
            "registry": registry.host,
            "repository": project.repository,
            "policy": "built",  # nothing here can run a check: the tags say -unverified
            "tags": {"readable": "{base}-{torch}", "immutable": ["{readable}-{date}", "{readable}-{digest}"]},
        },
        "defaults": {"env": {"RUN_ID": RUN_ID}},
        "axes": {"torch": ["2.1"], "platform": ["linux/amd64", "linux/arm64"]},
        "advisories": critical_waivers(["2.1"]),
        "bases": {"tiny": {"image": tiny_bases, "os": "debian12", "python": "3.11", "cuda": False}},
    }
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    built = project.build("--push")
    assert built.returncode == 0, built.stderr
    report = project.report()
    staged = {str(r["id"]): r["staged"]["digest"] for r in report.values()}  # type: ignore[index]
    amd64, arm64 = sorted(staged)
    assert arm64 == f"{amd64}-arm64"

    done = project.run("publish", "--matrix", "matrix.yaml")
    assert done.returncode == 0, done.stderr
    assert "index of linux/amd64, linux/arm64" in done.stdout
    lock = json.loads((project.root / "images.lock.json").read_text())
    (index,) = lock["indexes"].values()
    assert {p: (e["cell"], e["digest"]) for p, e in index["platforms"].items()} == {
        "linux/amd64": (amd64, staged[amd64]),
        "linux/arm64": (arm64, staged[arm64]),
    }
    assert index["missing"] == {} and index["level"] == "built"

    # Read back through the registry API: the readable tag names the index, whose two entries
    # resolve to the staged (admitted) digests, each an image of its platform.
    readable, *immutable = index["tags"]
    assert readable == "tiny-2.1.2-unverified" and len(immutable) == 2
    answer = manifest(registry, project.repository, readable)
    assert answer.headers["Content-Type"] == OCI_INDEX
    assert answer.headers["Docker-Content-Digest"] == index["digest"]
    entries = answer.json()["manifests"]
    assert len(entries) == 2
    for entry in entries:
        name = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
        cell = index["platforms"][name]["cell"]
        assert entry["digest"] == staged[cell] == lock["images"][cell]["digest"]
        child = manifest(registry, project.repository, entry["digest"])
        assert (
            child.headers["Docker-Content-Digest"] == entry["digest"] and len(child.content) == entry["size"]
        )
        config = requests.get(
            f"http://{registry.host}/v2/{project.repository}/blobs/{child.json()['config']['digest']}",
            timeout=10,
        ).json()
        assert config["architecture"] == entry["platform"]["architecture"]
    for tag in immutable:
        assert manifest(registry, project.repository, tag).headers["Docker-Content-Digest"] == index["digest"]
    # No platform has a final tag of its own: only the staging tags and the index's.
    final = [t for t in registry.tags(project.repository) if not t.startswith("staging-")]
    assert sorted(final) == sorted(index["tags"])

    # The engine pulls the platform it asks for through the index: the image that was built.
    reference = f"{registry.host}/{project.repository}:{readable}"
    api.pull(reference, platform="linux/arm64")
    pulled = api.inspect_image(reference)["Id"]
    # The overlay2 store names an image by its config digest: the built image's id. The containerd
    # store names it by what was pulled, the index, and the built image by its manifest digest: the
    # index's arm64 entry (its inspect shows the host's platform of an index; API 1.45 asks no other).
    assert pulled == report[arm64]["image_id"] or (
        pulled == index["digest"] and report[arm64]["image_id"] == staged[arm64]
    )

    # Kubernetes Jobs name the index's digest; each is held to its cell's architecture.
    out = tmp_path / "jobs"
    k8s = project.run("k8s", "--matrix", "matrix.yaml", "--out", str(out), "--gpus", "0")
    assert k8s.returncode == 0, k8s.stderr
    for path in sorted(out.glob("*.yaml")):
        job = yaml.safe_load(path.read_text())
        kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)
        pod = job["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == f"{registry.host}/{project.repository}@{index['digest']}"
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        arch = terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        assert arch == (["arm64"] if path.name.endswith("-arm64.yaml") else ["amd64"])
