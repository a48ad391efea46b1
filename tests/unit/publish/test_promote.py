"""Publishing decisions without an engine: levels and policies, published tags, push errors."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from imagekit.core import naming
from imagekit.plan.cells import Cell, Plan
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import Publish
from imagekit.publish.policy import ADMITS, Candidate, final_tags, level_of, select
from imagekit.report.store import BuildReport, CellResult
from imagekit.report.verification import CheckRecord, Verification
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE
from tests.unit.report_samples import WAIVED

DIGEST = "sha256:" + "ab" * 32


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def result(verdict: str | None, status: str = "built") -> CellResult:
    verification = None
    if verdict is not None:
        checks = (CheckRecord("torch_import", "pass" if verdict != "failed" else "fail", True),)
        verification = Verification("c", "sha256:img", "none", verdict, False, False, checks, 1.0)  # type: ignore[arg-type]
        verification = replace(verification, input_digest="f" * 64)  # as `imagekit verify` records it
    return CellResult(
        id="c",
        kind="cell",
        status=status,  # type: ignore[arg-type]
        image_id="sha256:img",
        tags=(
            "acme/pytorch:2.1.2-cu121",
            "acme/pytorch:2.1.2-cu121-20261129",
            "acme/pytorch:2.1.2-cu121-abc",
        ),
        size=1,
        input_digest="f" * 64,
        base_image="b",
        base_digest=None,
        duration_s=1.0,
        log=None,
        error=None,
        verification=verification,
    )


def test_levels_and_policies() -> None:
    assert level_of(result("validated")) == "validated"
    assert level_of(result("checked")) == "checked"
    assert level_of(result(None)) == "built"
    assert level_of(result("failed")) is None  # never published, whatever the policy
    assert level_of(result(None, status="failed")) is None
    assert ADMITS["gpu-validated"] == {"validated"}
    assert "checked" in ADMITS["checked"] and "built" not in ADMITS["checked"]


def _plan(write_matrix: Callable[[str], Path]) -> Plan:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n'
        + CUDA_BASE
        + WAIVE_OLD_TORCH
        + "publish:\n  repository: acme/pytorch\n  policy: built\n"
        '  tags: {readable: "{torch}-{stack}", immutable: ["{readable}-{date}", "{readable}-{digest}"]}\n'
    )
    return load_plan(path)


def _cell(write_matrix: Callable[[str], Path]) -> tuple[Cell, Publish]:
    plan = _plan(write_matrix)
    return plan.cells[0], plan.matrix.publish


def test_tags_say_how_far_an_image_was_verified(write_matrix: Callable[[str], Path]) -> None:
    cell, publish = _cell(write_matrix)
    built = replace(result("checked"), built_on=date(2026, 11, 29))
    short = built.input_digest[:12]  # type: ignore[index]
    assert final_tags(cell, publish, built, "validated") == (
        "2.1.2-cuda12.1-cudnn8",
        "2.1.2-cuda12.1-cudnn8-20261129",
        f"2.1.2-cuda12.1-cudnn8-{short}",
    )
    assert final_tags(cell, publish, built, "checked") == (
        "2.1.2-cuda12.1-cudnn8-checked",
        "2.1.2-cuda12.1-cudnn8-20261129-checked",
        f"2.1.2-cuda12.1-cudnn8-{short}-checked",
    )
    assert all(t.endswith("-unverified") for t in final_tags(cell, publish, built, "built") or ())


def test_published_tags_come_from_the_matrix_not_the_report(write_matrix: Callable[[str], Path]) -> None:
    """The report gives the build's identity (input digest, day) and nothing else: a tag it lists
    is never published, and a report without the day (an earlier release's) names no tags."""
    cell, publish = _cell(write_matrix)
    tampered = replace(
        result("validated"),
        built_on=date(2024, 1, 1),
        tags=("acme/pytorch:latest", "acme/pytorch:2.1.2-cuda12.1-cudnn8-20240101", "evil/repo:owned"),
    )
    tags = final_tags(cell, publish, tampered, "validated")
    short = tampered.input_digest[:12]  # type: ignore[index]
    assert tags == (
        "2.1.2-cuda12.1-cudnn8",
        "2.1.2-cuda12.1-cudnn8-20240101",
        f"2.1.2-cuda12.1-cudnn8-{short}",
    )
    assert final_tags(cell, publish, replace(tampered, built_on=None), "validated") is None


def test_a_candidate_carries_the_advisories_its_plan_found(write_matrix: Callable[[str], Path]) -> None:
    """What publish promotes carries what the plan admits it with (its findings, each waiver's
    reason) into the lock entry and the signed statement (``Publisher.entry``,
    ``imagekit.publish.attestations``)."""
    plan = _plan(write_matrix)
    (cell,) = plan.cells
    record = replace(result(None), id=cell.id, built_on=date(2026, 11, 29))
    report = BuildReport("matrix.yaml", "2026-11-29T12:00:00+00:00", 1.0, "e", (record,), ())
    (candidate,) = select(plan, plan.cells, report).candidates  # built: the policy here is "built"
    assert candidate.advisories == cell.advisories
    assert {f.waived for f in candidate.advisories if f.severity == "critical"} == {
        "a test of another feature; it loads no checkpoint"
    }


def test_transient_push_errors_match_whole_words() -> None:
    from imagekit.engine.client import transient_push_error

    for text in (
        "received unexpected HTTP status: 503 Service Unavailable",
        "toomanyrequests: too many requests",
        "Patch https://r/v2/x/blobs/uploads/1: EOF",
        "dial tcp 1.2.3.4:443: connect: connection refused",
        "net/http: TLS handshake timeout",
    ):
        assert transient_push_error(text), text
    for text in (
        "manifest invalid: sha256:5000abc blob unknown",
        "denied: requested access to the resource is denied",
        "blob upload invalid: size 5001 exceeds the limit",
        "name unknown: repository thereof",
    ):
        assert not transient_push_error(text), text


# -- staged cells: engine-free promotion, the digest chain, provenance ---------------------------------

STAGED_DIGEST = "sha256:" + "5" * 64
LABELS = {
    "imagekit.python": "3.11",
    "imagekit.check-script": "/opt/imagekit/check.py",
    "imagekit.input-digest": "f" * 64,  # what the report's records say it was built from
}


def image_config(labels: dict[str, str] = LABELS, **more: Any) -> bytes:
    """A config of the staged image's two layers (one diff_id each)."""
    rootfs = {"type": "layers", "diff_ids": ["sha256:" + "d" * 64, "sha256:" + "e" * 64]}
    document = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": labels},
        "rootfs": rootfs,
        **more,
    }
    return json.dumps(document).encode()


IMAGE = "sha256:" + hashlib.sha256(image_config()).hexdigest()  # the staged image's config digest


def staged_result(verdict: str | None, verified_digest: str | None = STAGED_DIGEST) -> CellResult:
    from dataclasses import replace

    from imagekit.report.store import Staged

    staged = Staged("reg:5000", "acme/staging", "staging-ffffffffffff", STAGED_DIGEST)
    base = result(verdict)
    verification = base.verification
    if verification is not None:
        verification = replace(verification, image=staged.reference, image_digest=verified_digest)
    return replace(base, staged=staged, verification=verification)


def test_a_verified_digest_other_than_the_staged_one_is_refused() -> None:
    from imagekit.publish.policy import refusal_reason

    assert refusal_reason(staged_result("checked"), "checked") is None
    wrong = refusal_reason(staged_result("checked", "sha256:" + "6" * 64), "checked")
    assert wrong is not None and "is not its staged digest" in wrong and "verify --pull" in wrong
    unknown = refusal_reason(staged_result("checked", None), "checked")
    assert unknown is not None and "(unknown)" in unknown
    failed = refusal_reason(staged_result("failed"), "checked")
    assert failed is not None and "failed verification" in failed


class FakeRegistry:
    """The registry calls promotion makes, recorded in order; no Docker anywhere."""

    def __init__(self, missing: set[str] | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.missing = missing or set()
        self.tagged: dict[str, str] = {}  # tag -> the digest it names in the target repository
        self.use_config(image_config())

    def use_config(self, config: bytes) -> None:
        """The staged image's config (and so its manifest's config descriptor) becomes ``config``."""
        from imagekit.registry.manifest import DOCKER_CONFIG, DOCKER_MANIFEST, Manifest

        layer = "application/vnd.docker.image.rootfs.diff.tar.gzip"
        body = json.dumps({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {"mediaType": DOCKER_CONFIG, "digest": digest_of(config), "size": len(config)},
            "layers": [
                {"mediaType": layer, "digest": "sha256:" + "1" * 64, "size": 5},
                {"mediaType": layer, "digest": "sha256:" + "2" * 64, "size": 7},
            ],
        }).encode()  # fmt: skip
        self.config = config
        self.manifest = Manifest(digest_of(body), DOCKER_MANIFEST, body)

    def ping(self) -> None:
        self.calls.append(("ping",))

    def image_for(self, repository: str, digest: str, platform: Any) -> tuple[Any, bytes]:
        self.calls.append(("image_for", repository, digest))
        return self.get_manifest(repository, digest), self.config

    def blob_length(self, repository: str, digest: str) -> int | None:
        return self.manifest.image("here", "not counted").blobs[digest].size

    def get_manifest(self, repository: str, reference: str) -> Any:
        from imagekit.core.errors import RegistryError

        self.calls.append(("get_manifest", repository, reference))
        if reference in self.missing:
            raise RegistryError(f"registry reg:5000: GET manifest {repository}:{reference}: HTTP 404")
        return self.manifest

    def get_blob(self, repository: str, digest: str) -> bytes:
        self.calls.append(("get_blob", repository, digest))
        return self.config

    def mount_blob(self, repository: str, digest: str, source: str, size: int | None = None) -> str:
        self.calls.append(("mount_blob", repository, digest, source))
        return "mounted"

    def put_manifest(self, repository: str, tag: str, manifest: Any) -> str:
        self.calls.append(("put_manifest", repository, tag))
        self.tagged[tag] = str(manifest.digest)
        return str(manifest.digest)

    def tag_digest(self, repository: str, tag: str) -> str | None:
        self.calls.append(("tag_digest", repository, tag))
        return self.tagged.get(tag)

    # what the staged digest's referrers are (attestations attached where it was staged)
    attached: tuple[Any, ...] = ()

    def referrers(self, repository: str, subject: str) -> list[Any]:
        return list(self.attached) if repository == "acme/staging" else []

    def attach(self, repository: str, artifact: Any, subject: str) -> bool:
        self.calls.append(("attach", repository, artifact.digest, subject))
        return False


def test_staged_cells_are_promoted_in_the_registry_alone(tmp_path: Path) -> None:
    from dataclasses import replace

    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.report.lockfile import read_lock

    registry = FakeRegistry()
    staged = staged_result("checked").staged
    tags = ("2.1.2-cu121-checked", "2.1.2-cu121-20261129-checked", "2.1.2-cu121-abc-checked")
    fine = Candidate("c", IMAGE, "f" * 64, "checked", tags, staged_result("checked").verification, staged)
    fine = replace(fine, advisories=(WAIVED,))
    gone = replace(fine, cell="gone", staged=replace(staged, digest="sha256:" + "9" * 64))  # type: ignore[type-var]
    registry.missing.add("sha256:" + "9" * 64)
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)  # as the registry stored it
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    said: list[str] = []
    publisher = Publisher(None, registry, options, "checked", said.append)  # type: ignore[arg-type]
    published, refused = publisher.run([fine, gone])
    assert [p.entry.cell for p in published] == ["c"] and [r.cell for r in refused] == ["gone"]
    assert "HTTP 404" in refused[0].reason and "nothing promoted" in refused[0].reason
    calls = registry.calls
    mounts = [c for c in calls if c[0] == "mount_blob"]
    assert {c[2] for c in mounts} == {IMAGE, "sha256:" + "1" * 64, "sha256:" + "2" * 64}
    assert all(c[1:] == ("acme/pytorch", c[2], "acme/staging") for c in mounts)
    puts = [c[2] for c in calls if c[0] == "put_manifest"]
    assert puts == [tags[1], tags[2], tags[0]]  # immutable first, the moving readable tag last
    assert calls.index(("put_manifest", "acme/pytorch", tags[1])) > max(calls.index(m) for m in mounts)
    entry = read_lock(tmp_path / "lock.json").images["c"]
    assert entry.digest == STAGED_DIGEST and entry.expect == {"python": "3.11"}
    assert entry.check_script == "/opt/imagekit/check.py"
    assert entry.provenance is not None and entry.provenance.digest_chain.equal
    assert entry.advisories == (WAIVED,)  # the waiver and its reason, in the lock
    assert said == []  # nothing pushed, nothing staged by this run


def test_an_image_id_that_is_the_manifest_digest_is_promoted_with_its_configs_labels(tmp_path: Path) -> None:
    """dockerd's containerd image store gives an image the id of its manifest, not of its config
    (the overlay2 store's): either names the staged image, whose labels come from its config."""
    from dataclasses import replace

    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.report.lockfile import read_lock

    registry = FakeRegistry()
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)
    staged = staged_result("checked").staged
    verification = staged_result("checked").verification
    candidate = Candidate("c", STAGED_DIGEST, "f" * 64, "checked", ("t",), verification, staged)
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    published, refused = Publisher(None, registry, options, "checked", print).run([candidate])  # type: ignore[arg-type]
    assert refused == [] and [p.entry.cell for p in published] == ["c"]
    assert ("get_blob", "acme/staging", IMAGE) in registry.calls  # the config, by its own digest
    assert read_lock(tmp_path / "lock.json").images["c"].check_script == "/opt/imagekit/check.py"


def test_a_staged_image_built_from_other_inputs_than_the_report_says_is_never_promoted(
    tmp_path: Path,
) -> None:
    """The report's input digest is the build's word; the image's own label in the registry must
    agree before any tag moves (an edited report, or a staging tag moved since)."""

    from imagekit.publish.promote import Publisher, PublishOptions

    registry = FakeRegistry()
    registry.use_config(image_config({"imagekit.input-digest": "e" * 64}))
    staged = staged_result("checked").staged
    image = digest_of(registry.config)
    candidate = Candidate(
        "c", image, "f" * 64, "checked", ("t",), staged_result("checked").verification, staged
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    published, refused = Publisher(None, registry, options, "checked", print).run([candidate])  # type: ignore[arg-type]
    assert published == [] and [r.cell for r in refused] == ["c"]
    assert "built from inputs eeeeeeeeeeee" in refused[0].reason and "says ffffffffffff" in refused[0].reason
    assert not [c for c in registry.calls if c[0] == "put_manifest"]
    assert not (tmp_path / "lock.json").exists()


UNREADABLE_CONFIGS = {
    "a label holding a raw NUL byte": b'{"os": "linux", "config": {"Labels": {"a": "\x00"}}}',
    "bytes that are not UTF-8": b"\xff\xfe\x00",
    "text that is not JSON": b"{nope",
    "nesting 100,000 deep": b"[" * 100_000,
}


@pytest.mark.parametrize("case", list(UNREADABLE_CONFIGS))
def test_a_staged_config_that_is_no_json_object_refuses_its_cell_in_one_line(
    case: str, tmp_path: Path
) -> None:
    """The staged image's config blob is the registry's: one it cannot be read as (a raw control
    character, bad UTF-8, deep nesting) refuses the cell, nothing promoted (before: json.loads's
    traceback, JSONDecodeError, UnicodeDecodeError or RecursionError, ended the whole publish)."""
    from imagekit.publish.promote import Publisher, PublishOptions

    registry = FakeRegistry(IMAGE)
    registry.use_config(UNREADABLE_CONFIGS[case])  # the manifest names these very bytes
    staged = staged_result("checked").staged
    candidate = Candidate(
        "c",
        digest_of(registry.config),
        "f" * 64,
        "checked",
        ("t",),
        staged_result("checked").verification,
        staged,
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    published, refused = Publisher(None, registry, options, "checked", print).run([candidate])  # type: ignore[arg-type]
    assert published == [] and [r.cell for r in refused] == ["c"]
    reason = refused[0].reason
    assert "its config is not JSON" in reason and "nothing promoted" in reason, reason
    assert "\n" not in reason and "\x00" not in reason
    assert not [c for c in registry.calls if c[0] == "put_manifest"]
    assert not (tmp_path / "lock.json").exists()


def test_a_label_holding_a_nul_byte_reaches_no_lock(tmp_path: Path) -> None:
    """A label value with an escaped NUL (valid JSON) is the image's word, not the lock's: an
    expectation, a check script or a front end holding one is left out, and the cell is published."""

    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.report.lockfile import read_lock

    registry = FakeRegistry(IMAGE)
    labels = {
        "imagekit.input-digest": "f" * 64,
        "imagekit.python": "3.11\x00",
        "imagekit.check-script": "/opt/imagekit/check.py\x00",
        "imagekit.frontend": "jupyter\x00",
        "imagekit.torch\x00": "2.5.1",
        "imagekit.cuda": 12,  # no label: a builder writes strings only
    }
    registry.use_config(image_config(labels))  # type: ignore[arg-type]
    staged = staged_result("checked").staged
    candidate = Candidate(
        "c",
        digest_of(registry.config),
        "f" * 64,
        "checked",
        ("t",),
        staged_result("checked").verification,
        staged,
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    published, refused = Publisher(None, registry, options, "checked", print).run([candidate])  # type: ignore[arg-type]
    assert refused == [] and [p.entry.cell for p in published] == ["c"]
    entry = read_lock(tmp_path / "lock.json").images["c"]
    assert entry.expect == {} and entry.check_script is None and entry.frontend is None


OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_IMAGE = "application/vnd.oci.image.manifest.v1+json"
CHILD = {"mediaType": OCI_IMAGE, "digest": "sha256:" + "a" * 64, "size": 10}
NESTED = {**CHILD, "digest": "sha256:" + "b" * 64, "mediaType": OCI_INDEX}
UNVERIFIABLE = {
    "a single image naming no config": ({"schemaVersion": 2, "layers": []}, OCI_IMAGE),
    "an empty index": ({"schemaVersion": 2, "manifests": []}, OCI_INDEX),
    "an index of an index": ({"schemaVersion": 2, "manifests": [NESTED]}, OCI_INDEX),
    "an index whose child turns out to be an index": ({"schemaVersion": 2, "manifests": [CHILD]}, OCI_INDEX),
    "a mediaType that is not a string": ({"mediaType": {"x": 1}, "config": {"digest": IMAGE}}, OCI_IMAGE),
}


@pytest.mark.parametrize("case", list(UNVERIFIABLE))
def test_a_staged_manifest_that_proves_nothing_moves_no_tag(case: str, tmp_path: Path) -> None:
    """What is promoted is what was verified: a staged manifest with no image id to compare (no
    config, an empty index, an index of indexes, a non-string mediaType) is refused for its cell
    before any blob is mounted or any tag is written."""
    import hashlib
    import json

    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.registry.manifest import Manifest

    document, media_type = UNVERIFIABLE[case]
    registry = FakeRegistry()
    body = json.dumps(document).encode()
    registry.manifest = Manifest("sha256:" + hashlib.sha256(body).hexdigest(), media_type, body)
    if case == "an index whose child turns out to be an index":
        child = json.dumps({"schemaVersion": 2, "manifests": [CHILD]}).encode()
        fetched = [registry.manifest, Manifest(str(CHILD["digest"]), OCI_INDEX, child)]
        registry.get_manifest = lambda *args: (
            registry.calls.append(("get_manifest", *args)),
            fetched.pop(0),
        )[1]  # type: ignore[method-assign]
    staged = staged_result("checked").staged
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t1", "t2"), staged_result("checked").verification, staged
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    publisher = Publisher(None, registry, options, "checked", lambda _: None)  # type: ignore[arg-type]
    published, refused = publisher.run([candidate])
    assert published == [] and [r.cell for r in refused] == ["c"]
    assert "reg:5000/acme/staging@sha256:" in refused[0].reason and "nothing promoted" in refused[0].reason
    assert [c for c in registry.calls if c[0] in ("put_manifest", "mount_blob")] == []
    assert not (tmp_path / "lock.json").exists()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda m: m["layers"][0].update(size=-1), "layers[0] says it is -1 bytes"),
        (lambda m: m["layers"][1].update(size=2**63), "layers[1] says it is 9,223,372,036,854,775,808 bytes"),
        (lambda m: m["layers"].append(m["layers"][0]), "2 diff_ids for the manifest's 3 layers"),
        (lambda m: m["config"].update(mediaType="text/plain"), "its config is a 'text/plain'"),
    ],
    ids=["size-negative", "size-2**63", "fewer-diff-ids", "config-type"],
)
def test_a_staged_image_no_engine_could_pull_moves_no_blob_and_no_tag(
    change: Callable[[dict[str, Any]], None], said: str, tmp_path: Path
) -> None:
    """Issue 45: the image record every reader takes (imagekit.registry.manifest) refuses it
    here too, before any blob is mounted, any tag written or any lock entry made."""
    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.registry.manifest import DOCKER_MANIFEST, Manifest

    registry = FakeRegistry()
    document = json.loads(registry.manifest.body)
    change(document)
    body = json.dumps(document).encode()
    registry.manifest = Manifest(STAGED_DIGEST, DOCKER_MANIFEST, body)
    staged = staged_result("checked")
    candidate = Candidate("c", IMAGE, "f" * 64, "checked", ("t", "t-1"), staged.verification, staged.staged)
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    published, refused = Publisher(None, registry, options, "checked", print).run([candidate])  # type: ignore[arg-type]
    assert published == [] and [r.cell for r in refused] == ["c"]
    assert said in refused[0].reason and refused[0].reason.startswith("reg:5000/acme/staging@sha256:")
    assert "nothing promoted from it" in refused[0].reason and "\n" not in refused[0].reason
    assert [c for c in registry.calls if c[0] in ("put_manifest", "mount_blob")] == []
    assert not (tmp_path / "lock.json").exists()


def test_report_html_never_replaces_the_published_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import run_cli

    monkeypatch.chdir(tmp_path)
    Path("images.lock.json").write_text("{}")
    result = run_cli("report", "--state-dir", str(tmp_path / "state"), "--html", "images.lock.json")
    assert result.exit_code == 2 and "the lock file `imagekit publish` writes" in result.stderr
    assert Path("images.lock.json").read_text() == "{}"


# -- immutable tags are written once ----------------------------------------------------------------

OTHER = "sha256:" + "7" * 64  # the digest an earlier build of the same inputs was published as
TAGS = ("2.1.2-cu121-checked", "2.1.2-cu121-20261129-checked", "2.1.2-cu121-ffffffffffff-checked")


def _staged_candidate(cell: str, tags: tuple[str, ...] = TAGS) -> Candidate:
    verified = staged_result("checked")
    return Candidate(cell, IMAGE, "f" * 64, "checked", tags, verified.verification, verified.staged)


@pytest.mark.parametrize("taken", [1, 2])
def test_an_immutable_tag_naming_another_digest_refuses_its_cell_and_moves_nothing(
    tmp_path: Path, taken: int
) -> None:
    """The same cell built again (same inputs, another image digest): each of its immutable tags
    already naming the first digest refuses the cell before any of its tags moves, naming both
    digests; another cell of the run is still promoted; a tag already naming this very digest is
    an idempotent rerun."""
    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.report.lockfile import read_lock

    registry = FakeRegistry()
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)
    other_tags = tuple(t.replace("2.1.2", "2.2.0") for t in TAGS)
    registry.tagged = {TAGS[0]: OTHER, TAGS[taken]: OTHER, other_tags[1]: STAGED_DIGEST}
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    publisher = Publisher(None, registry, options, "checked", lambda _: None)  # type: ignore[arg-type]
    published, refused = publisher.run([_staged_candidate("c"), _staged_candidate("d", other_tags)])
    assert [p.entry.cell for p in published] == ["d"] and [r.cell for r in refused] == ["c"]
    reason = refused[0].reason
    assert f"reg:5000/acme/pytorch:{TAGS[taken]} already names {OTHER}" in reason, reason
    assert f"this build's {STAGED_DIGEST}" in reason and "nothing promoted for this cell" in reason
    puts = [c[2] for c in registry.calls if c[0] == "put_manifest"]
    assert puts == [other_tags[1], other_tags[2], other_tags[0]]  # none of c's, d's readable last
    assert registry.tagged[TAGS[0]] == registry.tagged[TAGS[taken]] == OTHER
    assert set(read_lock(tmp_path / "lock.json").images) == {"d"}


def test_a_group_whose_immutable_tag_names_another_index_is_refused_whole(tmp_path: Path) -> None:
    """A group of platforms: its immutable tags must be free or name the index it would
    publish; one naming another index refuses every platform and writes no manifest at all."""
    from imagekit.publish.policy import Group
    from imagekit.publish.promote import Publisher, PublishOptions, _index_of, _Ready, _Staged

    registry = FakeRegistry()
    members = (
        replace(_staged_candidate("amd"), tags=()),
        replace(_staged_candidate("arm"), tags=(), platform="linux/arm64"),
    )
    group = Group("2.1.2-cu121", members, (), naming.Tagging("acme/pytorch", ("{readable}-{digest}",)), False)
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    publisher = Publisher(None, registry, options, "checked", lambda _: None)  # type: ignore[arg-type]
    publisher.prepare = lambda staged, in_index=False: _Ready(  # type: ignore[method-assign]
        staged, registry.manifest, (), {}
    )
    ready = {
        m.cell: _Ready(_Staged(m, "acme/staging", STAGED_DIGEST, 0.0), registry.manifest, (), {})
        for m in members
    }
    index = _index_of(group, ready)[0]
    registry.tagged = {group.tags[1]: OTHER}
    published, refused = publisher.run([], groups=[group])
    assert published == [] and sorted(r.cell for r in refused) == ["amd", "arm"]
    assert all(f"already names {OTHER}, not this build's {index.digest}" in r.reason for r in refused)
    assert all("nothing promoted for this group" in r.reason for r in refused)
    assert not [c for c in registry.calls if c[0] == "put_manifest"]
    assert not (tmp_path / "lock.json").exists()

    registry.tagged = {group.tags[1]: index.digest}  # the same index again: an idempotent rerun
    registry.read_back_index = lambda *_: None  # type: ignore[attr-defined]
    published, refused = publisher.run([], groups=[group])
    assert refused == [] and len(published) == 1


def test_a_verification_made_for_other_inputs_is_refused_naming_both() -> None:
    """A verification record names the inputs of the image it ran on (its input-digest label):
    one made for other inputs than the cell's record never admits the cell; the cell's own does."""
    from imagekit.publish.policy import refusal_reason

    record = staged_result("checked")
    assert record.verification is not None and record.input_digest == "f" * 64
    other = replace(record, verification=replace(record.verification, input_digest="e" * 64))
    reason = refusal_reason(other, "checked")
    assert reason is not None and f"made for inputs {'e' * 64}, not the cell's {'f' * 64}" in reason
    assert "re-run `imagekit verify`" in reason
    assert refusal_reason(record, "checked") is None


@pytest.mark.parametrize("policy", ["gpu-validated", "checked", "built"])
def test_a_verification_naming_no_inputs_is_no_verification(policy: str) -> None:
    """The cell's input digest replaced in the report, its verification naming none (as records
    written before the field existed do): it cannot be bound to the cell's inputs, so whatever the
    policy, even `built`, the cell is refused with the fix; it is never published on that record."""
    from imagekit.publish.policy import refusal_reason

    record = staged_result("validated")
    assert record.verification is not None
    unbound = replace(
        record, input_digest="e" * 64, verification=replace(record.verification, input_digest=None)
    )
    reason = refusal_reason(unbound, policy)
    assert reason is not None and "names no input digest" in reason and "re-run `imagekit verify`" in reason
    # the same with the cell's own digest untouched: still not bound, still refused
    reason = refusal_reason(replace(unbound, input_digest="f" * 64), policy)
    assert reason is not None and "names no input digest" in reason


def validated_offline_checkout(tmp_path: Path) -> tuple[Path, list[Cell], list[CellResult]]:
    """A checkout of examples/offline (no wheelhouse, no state) and a validated record of each of
    its cells, built on 2026-12-01: what a publish runner reads from the build's report."""
    import shutil

    from tests.conftest import REPO

    project = tmp_path / "checkout"
    shutil.copytree(
        REPO / "examples" / "offline", project, ignore=shutil.ignore_patterns("wheelhouse", ".imagekit")
    )
    cells = list(load_plan(project / "matrix.yaml").cells)
    checks = tuple(CheckRecord(name, "pass", True) for name in ("torch", "cuda_available", "gemm_gpu"))

    def validated(cell: Cell) -> CellResult:
        verified = Verification(
            cell.id, IMAGE, "all", "validated", True, True, checks, 1.0, input_digest="f" * 64
        )
        return replace(
            result(None), id=cell.id, image_id=IMAGE, verification=verified, built_on=date(2026, 12, 1)
        )

    return project, cells, [validated(cell) for cell in cells]


def test_publish_refuses_the_one_cell_whose_verification_is_bound_to_no_inputs(tmp_path: Path) -> None:
    """One cell's input digest replaced in the report and its verification naming none (as records
    of earlier releases do): one `refused` line naming the cell and the fix, exit 1, and every other
    cell decided as before (the dry run would publish them)."""
    from imagekit.report.store import BuildReport, write_report
    from tests.conftest import run_cli

    project, cells, records = validated_offline_checkout(tmp_path)
    alone = next(  # a cell that is a group of its own: its refusal takes no other platform along
        i for i, cell in enumerate(cells) if sum(c.readable_tag == cell.readable_tag for c in cells) == 1
    )
    forged = records[alone]
    assert forged.verification is not None
    records[alone] = replace(
        forged, input_digest="e" * 64, verification=replace(forged.verification, input_digest=None)
    )
    state = project / ".imagekit"
    write_report(state, BuildReport("m", "2026-12-01T00:00:00Z", 1.0, "e", tuple(records), ()))
    done = run_cli(
        "publish",
        *("--matrix", str(project / "matrix.yaml"), "--state-dir", str(state)),
        *("--registry", "127.0.0.1:5000", "--dry-run"),
    )
    assert done.exit_code == 1, done.stderr
    refusals = [line for line in done.stderr.splitlines() if line.startswith("imagekit: refused:")]
    assert len(refusals) == 1, done.stderr
    assert refusals[0].startswith(f"imagekit: refused: {cells[alone].id}: its verification names no input")
    assert refusals[0].endswith("re-run `imagekit verify` on the cell")
    assert f"would publish {len(cells) - 1}, refused 1" in done.stderr, done.stderr


@pytest.mark.parametrize(("cap", "refused"), [(7, False), (6, True)], ids=["at-the-cap", "over-the-cap"])
def test_a_layer_over_publish_max_layer_size_publishes_nothing(
    tmp_path: Path, cap: int, refused: bool
) -> None:
    """The largest layer (7 bytes) against the cap: over it, one line naming the cell, the layer's
    size, the cap and the step that made it, before any tag moves and with no lock entry."""
    from dataclasses import replace

    from imagekit.publish.promote import Publisher, PublishOptions

    registry = FakeRegistry()
    steps = [{"created_by": "COPY base /"}, {"created_by": "RUN pip install torch\n  # buildkit"}]
    registry.use_config(image_config(history=steps))
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)
    staged = staged_result("checked")
    image = digest_of(registry.config)
    candidate = Candidate("c", image, "f" * 64, "checked", ("t", "t-1"), staged.verification, staged.staged)
    options = PublishOptions("reg:5000", "acme/staging", tmp_path / "lock.json", max_layer_size=cap)
    publisher = Publisher(None, registry, options, "checked", lambda _: None)  # type: ignore[arg-type]
    published, refusals = publisher.run([candidate])
    if not refused:
        assert [p.entry.cell for p in published] == ["c"]
        assert publisher.costs["c"].total == len(registry.config) + 5 + 7
        return
    assert published == [] and [r.cell for r in refusals] == ["c"]
    assert refusals[0].reason == (
        "its layer sha256:222222222222 is 7 bytes, over publish.max_layer_size 6 bytes;"
        " made by: RUN pip install torch # buildkit; nothing promoted for this cell"
    )
    assert not [c for c in registry.calls if c[0] == "put_manifest"]
    assert not (tmp_path / "lock.json").exists() and publisher.costs == {}
