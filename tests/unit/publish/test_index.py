"""A group of platforms published as one OCI image index: the document, the group's identity,
the policy (every platform, or the validated subset), promotion order, the lock and Kubernetes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core import naming, platforms
from imagekit.core.errors import EnvironmentProblem, InputError, RegistryError
from imagekit.k8s.manifests import JobOptions, render_jobs
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.publish.policy import Candidate, Group, group_digest, select
from imagekit.publish.promote import Publisher, PublishOptions
from imagekit.registry.client import Registry
from imagekit.registry.manifest import (
    DOCKER_CONFIG,
    DOCKER_MANIFEST,
    OCI_INDEX,
    Manifest,
    check_index,
    image_index,
)
from imagekit.report.lockfile import (
    IndexPlatform,
    LeftOut,
    Lock,
    LockIndex,
    as_document,
    merge_lock,
    read_lock,
    render_lock,
)
from imagekit.report.store import BuildReport, CellResult, Staged
from imagekit.report.verification import GPU_CHECKS, CheckRecord, Verification
from tests.unit.report_samples import lock_entry

AMD64, ARM64 = platforms.get("linux/amd64"), platforms.get("linux/arm64")
MATRIX = """
version: 1
axes:
  torch: ["2.11.0"]
  cuda: ["13.0"]
  base: [cuda]
  flavour: [runtime]
  platform: [linux/amd64, linux/arm64]
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu24.04"
    os: ubuntu24.04
publish:
  repository: acme/pytorch
  tags: {readable: "{torch}-{stack}", immutable: ["{readable}-{date}", "{readable}-{digest}"]}
"""


def image(arch: str, input_digest: str) -> tuple[Manifest, bytes]:
    """A single-image manifest and its config, for ``arch``, built from ``input_digest``."""
    labels = {"imagekit.input-digest": input_digest}
    rootfs = {"type": "layers", "diff_ids": []}
    document = {"architecture": arch, "os": "linux", "config": {"Labels": labels}, "rootfs": rootfs}
    config = json.dumps(document).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {"mediaType": DOCKER_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [],
        }
    ).encode()
    return Manifest("sha256:" + hashlib.sha256(body).hexdigest(), DOCKER_MANIFEST, body), config


# -- the document ---------------------------------------------------------------------------------


def test_the_index_names_each_platforms_manifest_as_the_registry_holds_it() -> None:
    amd, _ = image("amd64", "a" * 64)
    arm, _ = image("arm64", "b" * 64)
    index = image_index([(AMD64, amd), (ARM64, arm)])
    document = json.loads(index.body)
    assert index.media_type == OCI_INDEX and document["mediaType"] == OCI_INDEX
    assert index.digest == "sha256:" + hashlib.sha256(index.body).hexdigest()
    assert document["manifests"] == [
        {"mediaType": DOCKER_MANIFEST, "digest": amd.digest, "size": len(amd.body),
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": DOCKER_MANIFEST, "digest": arm.digest, "size": len(arm.body),
         "platform": {"architecture": "arm64", "os": "linux"}},
    ]  # fmt: skip
    index.check_promotable("here")  # what imagekit writes is an index promotion would accept
    check_index(index, {"linux/amd64": amd, "linux/arm64": arm}, "here")


def _edited(change: Callable[[list[dict[str, Any]]], Any]) -> Manifest:
    amd, _ = image("amd64", "a" * 64)
    arm, _ = image("arm64", "b" * 64)
    document = json.loads(image_index([(AMD64, amd), (ARM64, arm)]).body)
    change(document["manifests"])
    body = json.dumps(document).encode()
    return Manifest("sha256:" + hashlib.sha256(body).hexdigest(), OCI_INDEX, body)


WRONG_INDEXES: dict[str, Callable[[list[dict[str, Any]]], Any]] = {
    "an entry missing": lambda m: m.pop(),
    "an entry more": lambda m: m.append(dict(m[0])),
    "one platform twice": lambda m: m[1].__setitem__("platform", m[0]["platform"]),
    "another digest": lambda m: m[1].__setitem__("digest", "sha256:" + "9" * 64),
    "another media type": lambda m: m[0].__setitem__("mediaType", OCI_INDEX),
    "a size as a string": lambda m: m[0].__setitem__("size", str(m[0]["size"])),
    "a size off by one": lambda m: m[0].__setitem__("size", m[0]["size"] + 1),
    "an unknown architecture": lambda m: m[1]["platform"].__setitem__("architecture", "riscv64"),
    "a variant imagekit never writes": lambda m: m[1]["platform"].__setitem__("variant", "v8"),
    "another os": lambda m: m[0]["platform"].__setitem__("os", "windows"),
    "no platform": lambda m: m[0].pop("platform"),
    "an entry that is a string": lambda m: m.__setitem__(0, "sha256:" + "a" * 64),
}


@pytest.mark.parametrize("case", list(WRONG_INDEXES))
def test_an_index_read_back_is_checked_entry_by_entry(case: str) -> None:
    amd, _ = image("amd64", "a" * 64)
    arm, _ = image("arm64", "b" * 64)
    with pytest.raises(RegistryError) as caught:
        check_index(_edited(WRONG_INDEXES[case]), {"linux/amd64": amd, "linux/arm64": arm}, "reg/x:t")
    message = caught.value.message
    assert message.startswith("reg/x:t: ") and "not the one published" in message and "\n" not in message


def test_a_group_digest_is_order_free_and_names_its_platforms() -> None:
    both = {"linux/amd64": "a" * 64, "linux/arm64": "b" * 64}
    lines = f"linux/amd64 {'a' * 64}\nlinux/arm64 {'b' * 64}\n"
    assert group_digest(both) == hashlib.sha256(lines.encode()).hexdigest()
    assert group_digest(dict(reversed(both.items()))) == group_digest(both)
    assert group_digest({"linux/amd64": "a" * 64}) != group_digest(both)  # a partial index is another
    assert group_digest({"linux/arm64": "a" * 64}) != group_digest({"linux/amd64": "a" * 64})


# -- the policy: every platform, or the validated subset ------------------------------------------


def plan_of(tmp_path: Path, extra: str = "") -> Plan:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX + extra)
    return load_plan(path)


def record(
    cell_id: str, verdict: str | None, status: str = "built", day: date = date(2026, 12, 1)
) -> CellResult:
    image_id = "sha256:" + hashlib.sha256(cell_id.encode()).hexdigest()
    input_digest = hashlib.sha256(f"in {cell_id}".encode()).hexdigest()
    verification = None
    if verdict is not None:
        # checks that support the verdict: it is derived again from them whenever a report is read
        names = GPU_CHECKS if verdict == "validated" else ("torch",)
        checks = tuple(CheckRecord(n, "pass" if verdict != "failed" else "fail", True) for n in names)
        gpu = verdict != "checked"
        verification = Verification(
            cell_id,
            image_id,
            "all",
            verdict,  # type: ignore[arg-type]
            gpu,
            gpu,
            checks,
            1.0,
            input_digest=input_digest,
        )
    return CellResult(
        id=cell_id,
        kind="cell",
        status=status,  # type: ignore[arg-type]
        base_image="b",
        image_id=image_id,
        input_digest=input_digest,
        verification=verification,
        built_on=day,
    )


def report_of(*records: CellResult) -> BuildReport:
    return BuildReport("matrix.yaml", "2026-12-01T00:00:00Z", 1.0, "e", records, ())


def test_an_index_is_published_only_when_every_platform_passes(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    amd, arm = plan.cells
    # the arm64 image ran under emulation: checked, never validated; the policy wants validated
    chosen = select(plan, plan.cells, report_of(record(amd.id, "validated"), record(arm.id, "checked")))
    assert chosen.singles == () and chosen.groups == ()
    reasons = {r.cell: r.reason for r in chosen.refused}
    tag = amd.readable_tag
    assert reasons[arm.id].startswith(
        f"group {tag}, linux/arm64: publish policy gpu-validated needs validated"
    )
    assert reasons[arm.id].endswith("; no index published")
    assert reasons[amd.id].startswith(
        f"group {tag}, linux/amd64: not published: group {tag} is published only"
    )
    assert "linux/arm64 did not (publish.partial_index: true publishes the others)" in reasons[amd.id]


def test_partial_index_publishes_the_validated_platforms_and_lists_the_missing(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "  partial_index: true\n")
    amd, arm = plan.cells
    chosen = select(plan, plan.cells, report_of(record(amd.id, "validated"), record(arm.id, None, "failed")))
    (group,) = chosen.groups
    assert [m.cell for m in group.members] == [amd.id] and group.level == "validated"
    (missing,) = group.missing
    assert (missing.platform, missing.cell, missing.reason) == ("linux/arm64", arm.id, "its build failed")
    (refusal,) = chosen.refused  # still a refusal: exit 1 says a cell was not published
    assert refusal.cell == arm.id and refusal.reason.endswith("; left out of the group's index")
    # the {digest} of a partial index is its own: the platforms it holds, not the group's
    assert group.tags[2] == f"{amd.readable_tag}-{group_digest({'linux/amd64': amd_input(chosen)})[:12]}"
    # no platform passes: nothing, whatever partial_index says
    none = select(plan, plan.cells, report_of(record(amd.id, None, "failed"), record(arm.id, None, "failed")))
    assert none.groups == () and {r.cell for r in none.refused} == {amd.id, arm.id}
    assert all(r.reason.endswith("its build failed; no index published") for r in none.refused)


def amd_input(chosen: Any) -> str:
    return str(chosen.groups[0].members[0].input_digest)


def test_a_group_is_tagged_by_its_platforms_together(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "  policy: checked\n")
    amd, arm = plan.cells
    records = (record(amd.id, "validated", day=date(2026, 11, 30)), record(arm.id, "checked"))
    (group,) = select(plan, plan.cells, report_of(*records)).groups
    digest = group_digest({"linux/amd64": records[0].input_digest, "linux/arm64": records[1].input_digest})  # type: ignore[dict-item]
    tag = amd.readable_tag
    # as far as its least verified platform, dated as its last platform was built
    assert group.level == "checked"
    assert group.tags == (f"{tag}-checked", f"{tag}-20261201-checked", f"{tag}-{digest[:12]}-checked")
    assert [m.tags for m in group.members] == [(), ()]  # a platform has no tag of its own
    assert [m.platform for m in group.members] == ["linux/amd64", "linux/arm64"]
    # naming one platform's cell publishes its whole group: the readable tag names the index
    assert select(plan, [arm], report_of(*records)).groups == (group,)


def test_a_group_of_one_is_published_as_before(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.replace("  platform: [linux/amd64, linux/arm64]\n", ""))
    plan = load_plan(path)
    (cell,) = plan.cells
    chosen = select(plan, plan.cells, report_of(record(cell.id, "validated")))
    assert chosen.groups == () and [c.cell for c in chosen.singles] == [cell.id]
    assert chosen.singles[0].tags[0] == cell.readable_tag


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


# -- the lock: an index entry agrees with its platforms' entries ----------------------------------


ARM_DIGEST = "sha256:" + "7" * 64
INDEX_DIGEST = "sha256:" + "6" * 64


def index_lock(missing: bool = False) -> Lock:
    amd = lock_entry("c")
    arm = replace(lock_entry("c-arm64", digest=ARM_DIGEST), platform="linux/arm64")
    index = LockIndex(
        group="2.11.0-cuda13.0",
        registry="ghcr.io",
        repository="ghcr.io/acme/pytorch",
        digest=INDEX_DIGEST,
        tags=("2.11.0-cuda13.0", "2.11.0-cuda13.0-abcdef012345"),
        input_digest="d" * 64,
        policy="gpu-validated",
        level="validated",
        published_at="2026-12-01T00:00:00Z",
        platforms={"linux/amd64": IndexPlatform("c", amd.digest, "validated")}
        | ({} if missing else {"linux/arm64": IndexPlatform("c-arm64", ARM_DIGEST, "validated")}),
        missing={"linux/arm64": LeftOut("c-arm64", "its build failed")} if missing else {},
    )
    return Lock({"c": amd} | ({} if missing else {"c-arm64": arm}), {index.group: index})


def test_a_lock_with_an_index_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    lock = index_lock()
    merge_lock(path, lock.images, lock.indexes)
    assert read_lock(path) == lock
    document = json.loads(path.read_text())
    assert document["indexes"]["2.11.0-cuda13.0"]["reference"] == f"ghcr.io/acme/pytorch@{INDEX_DIGEST}"
    partial = index_lock(missing=True)
    merge_lock(path, partial.images, partial.indexes)
    # the platform left out is no longer published under the group: its entry goes with it
    assert read_lock(path) == partial
    # the cell published again alone: the index no longer says what its tag names
    merge_lock(path, {"c": lock_entry("c")})
    assert read_lock(path) == Lock({"c": lock_entry("c")})


def test_env_lines_name_each_index_beside_each_platform_image() -> None:
    """`images --format env`: a Pod or a pull on either machine names the index; each cell's own
    image stays for the tools that want one platform."""
    lines = render_lock(index_lock(), "env").splitlines()
    assert lines == [
        f"IMAGEKIT_IMAGE_C=ghcr.io/acme/pytorch@{lock_entry('c').digest}",
        f"IMAGEKIT_IMAGE_C_ARM64=ghcr.io/acme/pytorch@{ARM_DIGEST}",
        f"IMAGEKIT_INDEX_2_11_0_CUDA13_0=ghcr.io/acme/pytorch@{INDEX_DIGEST}",
    ]


def _index_doc(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    document = as_document(index_lock())
    change(document)
    return document


GROUP = "2.11.0-cuda13.0"
HOSTILE_INDEXES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "an index digest that is no digest": (
        lambda d: d["indexes"][GROUP].__setitem__("digest", "sha256:$(id)"),
        f"indexes.{GROUP}.digest: ",
    ),
    "a platform imagekit does not know": (
        lambda d: d["indexes"][GROUP]["platforms"].__setitem__(
            "linux/riscv64", {"cell": "c", "digest": ARM_DIGEST, "verdict": "validated"}
        ),
        f"indexes.{GROUP}.platforms.linux/riscv64",
    ),
    "a platform whose cell has no entry": (
        lambda d: d["images"].pop("c-arm64"),
        "cell c-arm64 has no image entry of that platform",
    ),
    "a platform digest the entry does not name": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/arm64"].__setitem__("digest", "sha256:" + "8" * 64),
        f"indexes.{GROUP}.platforms.linux/arm64: cell c-arm64",
    ),
    "an entry of another platform": (
        lambda d: d["images"]["c-arm64"].__setitem__("platform", "linux/amd64"),
        f"indexes.{GROUP}.platforms.linux/arm64",
    ),
    "a level above its platforms'": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/arm64"].__setitem__("verdict", "checked"),
        f"indexes.{GROUP}.platforms.linux/arm64",
    ),
    "a group key that is not its group": (
        lambda d: d["indexes"][GROUP].__setitem__("group", "other"),
        "is another group's tag",
    ),
    "an index elsewhere": (
        lambda d: d["indexes"][GROUP].__setitem__("repository", "evil.example/acme/pytorch"),
        "is not on the entry's registry",
    ),
    "a platform both in and left out": (
        lambda d: d["indexes"][GROUP]["missing"].__setitem__(
            "linux/arm64", {"cell": "c-arm64", "reason": "x"}
        ),
        "names a platform the index holds",
    ),
    "no platform": (lambda d: d["indexes"][GROUP].__setitem__("platforms", {}), "an index with no platform"),
    "a cell in two indexes": (
        lambda d: d["indexes"].__setitem__("other", {**d["indexes"][GROUP], "group": "other"}),
        "is a platform of",
    ),
    "a verdict that is no verdict": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/amd64"].__setitem__("verdict", "failed"),
        "verdict",
    ),
    "indexes a list": (lambda d: d.__setitem__("indexes", []), "indexes: "),
}


@pytest.mark.parametrize("case", list(HOSTILE_INDEXES))
def test_a_hostile_index_entry_is_one_line_naming_file_and_field(tmp_path: Path, case: str) -> None:
    change, problem = HOSTILE_INDEXES[case]
    path = tmp_path / "images.lock.json"
    path.write_text(json.dumps(_index_doc(change)))
    with pytest.raises(InputError) as caught:
        read_lock(path)
    message = caught.value.message
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message, message


# -- Kubernetes: the index digest, and the architecture where one platform is served --------------


def _pods(lock: Lock, options: JobOptions) -> dict[str, dict[str, Any]]:
    files = render_jobs(lock, options, dict.fromkeys(lock.images))
    pods = {}
    for name, text in files.items():
        manifest = yaml.safe_load(text)
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        pods[name] = manifest["spec"]["template"]["spec"]
    return pods


def test_k8s_pulls_the_index_and_pins_the_architecture_of_one_platform() -> None:
    both = _pods(index_lock(), JobOptions(node_selector=(("pool", "gpu"),)))
    for pod in both.values():  # the index serves both: the node's architecture picks the entry
        assert pod["containers"][0]["image"] == f"ghcr.io/acme/pytorch@{INDEX_DIGEST}"
        assert pod["nodeSelector"] == {"pool": "gpu"}
    arch_of = {
        n: p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        for n, p in both.items()
    }
    terms = {n: t["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] for n, t in arch_of.items()}
    assert terms == {"imagekit-check-c.yaml": ["amd64"], "imagekit-check-c-arm64.yaml": ["arm64"]}
    # an index left with one platform, and an image alone, are held to that architecture
    (pod,) = _pods(index_lock(missing=True), JobOptions(gpu_affinity=False)).values()
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    alone = Lock({"c-arm64": replace(lock_entry("c-arm64"), platform="linux/arm64")})
    (pod,) = _pods(alone, JobOptions(node_selector=(("pool", "gpu"),))).values()
    assert pod["nodeSelector"] == {"pool": "gpu", "kubernetes.io/arch": "arm64"}
    assert pod["containers"][0]["image"] == alone.images["c-arm64"].reference
    with pytest.raises(InputError, match="c-arm64's image serves linux/arm64 only"):
        _pods(alone, JobOptions(node_selector=(("kubernetes.io/arch", "amd64"),)))


def test_k8s_refuses_a_lock_entry_of_another_platform_than_the_matrix() -> None:
    from imagekit.report.lockfile import entries_for

    lock = index_lock()
    chosen = entries_for(lock, {"c": "linux/amd64"}, "acme/pytorch", Path("images.lock.json"))
    assert chosen.index_of("c") == lock.indexes[GROUP]
    with pytest.raises(InputError, match=r"images\.c-arm64\.platform: linux/arm64 is not the matrix's"):
        entries_for(lock, {"c-arm64": "linux/amd64"}, "acme/pytorch", Path("images.lock.json"))


# -- the report: what was published, each index's platforms and the ones left out -----------------


def test_the_report_shows_each_index_its_platforms_and_the_ones_left_out(tmp_path: Path) -> None:
    from imagekit.report.html import render_html
    from imagekit.report.store import write_report
    from imagekit.report.text import markdown, published_rows
    from tests.conftest import run_cli
    from tests.unit.report_samples import build_report

    lock = index_lock(missing=True)
    index = lock.indexes[GROUP]
    hostile = replace(index, missing={"linux/arm64": LeftOut("c-arm64", "<b>failed</b> | `x`")})
    lock = Lock(lock.images, {GROUP: hostile})
    assert published_rows(lock) == [
        (
            f"{GROUP} (index)",
            INDEX_DIGEST[:19],
            "linux/amd64: c (validated)",
            "linux/arm64: c-arm64 (<b>failed</b> | `x`)",
        )
    ]
    text = markdown(build_report(), lock)
    assert "| published as | digest | platforms | left out |" in text
    assert "linux/arm64: c-arm64 (&lt;b&gt;failed&lt;/b&gt; \\| \\`x\\`)" in text  # text, never markup
    page = render_html(build_report(), lock)
    assert "<td>linux/arm64: c-arm64 (&lt;b&gt;failed&lt;/b&gt; | `x`)</td>" in page
    alone = Lock({"c-arm64": replace(lock_entry("c-arm64"), platform="linux/arm64")})
    assert published_rows(alone)[0][2] == "linux/arm64: c-arm64 (validated)"
    # `imagekit report` reads the lock next to it (or --lock): the table gains what was published
    write_report(tmp_path / "state", build_report())
    merge_lock(tmp_path / "lock.json", lock.images, lock.indexes)
    shown = run_cli("report", "--state-dir", str(tmp_path / "state"), "--lock", str(tmp_path / "lock.json"))
    assert "published as" in shown.stdout and "linux/amd64: c (validated)" in shown.stdout


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
