"""A group of platforms published as one OCI image index: each platform promoted by digest, the index
read back before the readable tag moves (last), the lock's record of it, and `publish --dry-run`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from imagekit.core import naming
from imagekit.core.errors import EnvironmentProblem, RegistryError
from imagekit.publish.policy import Candidate, Group
from imagekit.publish.promote import Publisher, PublishOptions
from imagekit.registry.client import Registry
from imagekit.registry.manifest import (
    OCI_INDEX,
    Manifest,
    check_index,
    image_index,
)
from imagekit.report.lockfile import (
    merge_lock,
    read_lock,
)
from imagekit.report.store import Staged
from tests.unit.publish.test_policy import plan_of, record, report_of
from tests.unit.registry.test_manifest import AMD64, image
from tests.unit.report.test_lockfile import GROUP, index_lock

# -- promotion: each platform by digest, the index read back, the readable tag last ---------------


class MemoryRegistry:
    """A registry in memory that answers what it stored (with a switch to answer otherwise)."""

    host = "reg:5000"
    read_back_index = Registry.read_back_index
    image_for = Registry.image_for  # an image of no layers: nothing to HEAD for its pull cost

    def __init__(self) -> None:
        self.manifests: dict[tuple[str, str], Manifest] = {}
        self.blobs: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self.lie: Manifest | None = None  # answered for any index GET, when set

    def add(self, arch: str, input_digest: str) -> tuple[Manifest, str]:
        manifest, config = image(arch, input_digest)
        self.manifests[("acme/pytorch", manifest.digest)] = manifest
        self.blobs[str(manifest.config_digest)] = config
        return manifest, str(manifest.config_digest)

    def ping(self) -> None:
        pass

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        found = self.manifests.get((repository, reference))
        if found is None:
            raise RegistryError(f"registry reg:5000: GET manifest {repository}:{reference}: HTTP 404")
        return self.lie if self.lie is not None and found.media_type == OCI_INDEX else found

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> str:
        self.calls.append(("put", reference))
        self.manifests[(repository, reference)] = self.manifests[(repository, manifest.digest)] = manifest
        return manifest.digest

    def get_blob(self, repository: str, digest: str) -> bytes:
        return self.blobs[digest]

    def tag_digest(self, repository: str, tag: str) -> str | None:
        found = self.manifests.get((repository, tag))
        return None if found is None else found.digest


def group_of(registry: MemoryRegistry, arm_arch: str = "arm64") -> tuple[Group, dict[str, Manifest]]:
    members = []
    manifests = {}
    for name, arch, cell in (("linux/amd64", "amd64", "c"), ("linux/arm64", arm_arch, "c-arm64")):
        input_digest = hashlib.sha256(cell.encode()).hexdigest()
        manifest, image_id = registry.add(arch, input_digest)
        staged = Staged("reg:5000", "acme/pytorch", "staging-x", manifest.digest)
        members.append(
            Candidate(
                cell, image_id, input_digest, "built", (), None, staged, None, None, name, date(2026, 12, 1)
            )  # type: ignore[arg-type]
        )
        manifests[name] = manifest
    tagging = naming.Tagging("acme/pytorch", ("{readable}-{digest}",))
    return Group("2.11.0-cuda13.0", tuple(members), (), tagging, False), manifests


def publisher(registry: MemoryRegistry, lock: Path) -> Publisher:
    options = PublishOptions("reg:5000", "acme/pytorch", lock)
    return Publisher(None, registry, options, "built", lambda _: None)  # type: ignore[arg-type]


def test_the_index_moves_the_readable_tag_last_and_the_lock_records_it(tmp_path: Path) -> None:
    registry = MemoryRegistry()
    group, manifests = group_of(registry)
    done, refused = publisher(registry, tmp_path / "lock.json").run([], groups=[group])
    assert refused == []
    index = registry.manifests[("acme/pytorch", group.tags[0])]
    tags = group.tags
    assert tags[0] == "2.11.0-cuda13.0-unverified" and tags[1].startswith("2.11.0-cuda13.0-")
    puts = [reference for _, reference in registry.calls]
    # each platform by digest (no tag of its own), the index by digest, then its tags, readable last
    assert puts == [
        manifests["linux/amd64"].digest,
        manifests["linux/arm64"].digest,
        index.digest,
        *tags[1:],
        tags[0],
    ]
    check_index(index, manifests, "index")
    lock = read_lock(tmp_path / "lock.json")
    (recorded,) = lock.indexes.values()
    assert recorded.digest == index.digest and recorded.tags == tags and recorded.missing == {}
    assert recorded.input_digest == group.input_digest and recorded.level == "built"
    assert {p: (m.cell, m.digest) for p, m in recorded.platforms.items()} == {
        "linux/amd64": ("c", manifests["linux/amd64"].digest),
        "linux/arm64": ("c-arm64", manifests["linux/arm64"].digest),
    }
    assert lock.images["c-arm64"].platform == "linux/arm64" and lock.images["c-arm64"].tags == ()
    assert lock.index_of("c") == recorded == lock.index_of("c-arm64")
    (published,) = done
    assert published.index == recorded  # type: ignore[union-attr]


def test_an_index_that_does_not_read_back_moves_no_tag(tmp_path: Path) -> None:
    registry = MemoryRegistry()
    group, manifests = group_of(registry)
    registry.lie = image_index([(AMD64, manifests["linux/amd64"])])  # a registry that lost an entry
    with pytest.raises(EnvironmentProblem, match="registry reg:5000: acme/pytorch:sha256:"):
        publisher(registry, tmp_path / "lock.json").run([], groups=[group])
    assert not any(ref in group.tags for _, ref in registry.calls)
    assert not (tmp_path / "lock.json").exists()


def test_an_image_of_another_platform_than_its_cell_is_never_an_index_entry(tmp_path: Path) -> None:
    registry = MemoryRegistry()
    group, _ = group_of(registry, arm_arch="amd64")  # the "arm64" cell's staged image is amd64
    done, refused = publisher(registry, tmp_path / "lock.json").run([], groups=[group])
    assert done == []
    reasons = {r.cell: r.reason for r in refused}
    assert "is an image for 'linux/amd64', not the cell's linux/arm64" in reasons["c-arm64"]
    assert (
        reasons["c"]
        == f"group {group.tag}, linux/amd64: not published: linux/arm64 is not ready in the registry"
    )
    assert registry.calls == [] and not (tmp_path / "lock.json").exists()
    # with partial_index, the platform that is ready is published alone in the index
    done, refused = publisher(registry, tmp_path / "lock.json").run([], groups=[replace(group, partial=True)])
    (recorded,) = read_lock(tmp_path / "lock.json").indexes.values()
    assert list(recorded.platforms) == ["linux/amd64"] and list(recorded.missing) == ["linux/arm64"]
    assert "not the cell's linux/arm64" in recorded.missing["linux/arm64"].reason
    assert [r.cell for r in refused] == ["c-arm64"]


def test_publish_dry_run_names_each_index_and_images_lists_it(tmp_path: Path) -> None:
    from imagekit.report.store import write_report
    from tests.conftest import run_cli

    plan = plan_of(tmp_path, "  policy: checked\n")
    amd, arm = plan.cells
    write_report(tmp_path / "state", report_of(record(amd.id, "validated"), record(arm.id, "checked")))
    args = [
        "--matrix",
        str(tmp_path / "matrix.yaml"),
        "--registry",
        "reg:5000",
        "--state-dir",
        str(tmp_path / "state"),
    ]
    dry = run_cli("publish", *args, "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert f"would publish index {amd.readable_tag} (checked)" in dry.stdout
    assert f"of linux/amd64 ({amd.id}), linux/arm64 ({arm.id})" in dry.stdout
    assert "imagekit: would publish 1, refused 0" in dry.stderr
    document = json.loads(run_cli("publish", *args, "--dry-run", "--json").stdout)
    (index,) = document["indexes"]
    assert document["published"] == [] and index["platforms"] == {
        "linux/amd64": amd.id,
        "linux/arm64": arm.id,
    }
    assert index["tags"][0] == f"{amd.readable_tag}-checked"
    # `images` hands out what the lock holds: each cell's own digest, and the index it is part of
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, index_lock().images, index_lock().indexes)
    listed = json.loads(run_cli("images", "--lock", str(lock), "--only", "c-arm64").stdout)
    assert list(listed["images"]) == ["c-arm64"] and list(listed["indexes"]) == [GROUP]
