"""Staging after a build: an image the staging tag already names is not pushed again."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from imagekit.builds import registry_use
from imagekit.core import naming, platforms
from imagekit.plan.schema import Publish
from imagekit.registry.manifest import DOCKER_CONFIG, DOCKER_MANIFEST, Manifest
from imagekit.registry.transport import DEFAULT_BACKOFF
from imagekit.report.store import CellResult

MANIFEST = "sha256:" + "a" * 64
LAYER = "sha256:" + "d" * 64


def config_of(labels: dict[str, str]) -> bytes:
    rootfs = {"type": "layers", "diff_ids": ["sha256:" + "e" * 64]}
    return json.dumps({"config": {"Labels": labels}, "rootfs": rootfs}).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


CONFIG = digest_of(config_of({}))


class StagedRegistry:
    """The staging tag names MANIFEST, an image of one layer whose config carries ``labels``."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.labels = labels or {}
        self.config = config_of(self.labels)

    def head_manifest(self, repository: str, ref: str) -> str:
        return MANIFEST

    def get_manifest(self, repository: str, digest: str) -> Manifest:
        described = {"mediaType": DOCKER_CONFIG, "digest": digest_of(self.config), "size": len(self.config)}
        layers = [
            {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": LAYER, "size": 9}
        ]
        body = {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": described, "layers": layers}
        return Manifest(MANIFEST, DOCKER_MANIFEST, json.dumps(body).encode())

    def image_for(self, repository: str, digest: str, platform: object) -> tuple[Manifest, bytes]:
        return self.get_manifest(repository, digest), self.config

    def get_blob(self, repository: str, digest: str) -> bytes:
        assert digest == digest_of(self.config)
        return self.config

    def blob_length(self, repository: str, digest: str) -> int | None:
        return 9 if digest == LAYER else None


@pytest.mark.parametrize(
    ("image_id", "pushed"),
    [(CONFIG, False), (MANIFEST, False), ("sha256:" + "e" * 64, True)],
    ids=["overlay2-id", "containerd-id", "another-image"],
)
def test_a_staging_tag_naming_the_image_by_either_id_is_not_pushed_again(
    image_id: str, pushed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overlay2 store's image id is the config digest, the containerd store's the manifest
    digest: either says the staging tag already names the built image."""
    pushes: list[str] = []
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: StagedRegistry())

    def push_as(_api: object, image: str, *_: object, **__: object) -> str:
        pushes.append(image)
        return MANIFEST

    monkeypatch.setattr(registry_use, "push_as", push_as)
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    result = CellResult(
        id="c", kind="cell", status="built", base_image="b", image_id=image_id, input_digest="f" * 64
    )
    said: list[str] = []
    staged = use.stage(result, said.append, platforms.get("linux/amd64"))
    assert staged.staged is not None and staged.staged.digest == MANIFEST
    assert staged.pull_cost is not None  # counted where it was staged
    assert staged.pull_cost.total == 9 + len(config_of({}))
    assert pushes == ([image_id] if pushed else [])
    assert any("not pushed again" in s for s in said) is not pushed


@pytest.mark.parametrize(
    ("extra", "reused"),
    [({}, True), ({"team": "ml"}, True), ({"team": "other"}, False), ({"team": "ml", "night": "1"}, False)],
    ids=["no-label-asked", "label-carried", "label-differs", "label-missing"],
)
def test_an_unpulled_staged_image_is_reused_only_with_every_label_asked_for(
    extra: dict[str, str], reused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BuildKit's reuse reads the staged config blob: the same input digest is not enough when the
    run asks for a --label the staged image lacks (labels are not an input of the digest)."""
    digest = "f" * 64
    labels = {naming.INPUT_DIGEST_LABEL: digest, "team": "ml"}
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: StagedRegistry(labels))
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    rendered = SimpleNamespace(input_digest=digest)
    said: list[str] = []
    staged = use.staged_unpulled(rendered, tuple(extra.items()), said.append)  # type: ignore[arg-type]
    assert (staged is not None) is reused, said
    if reused:
        assert staged is not None and staged.digest == MANIFEST
    else:
        assert "but not --label" in said[-1] and said[-1].endswith("; building")


class StagedWithConfig(StagedRegistry):
    """MANIFEST's config blob is these bytes."""

    def __init__(self, config: bytes) -> None:
        self.config = config

    def get_blob(self, repository: str, digest: str) -> bytes:
        return self.config


@pytest.mark.parametrize(
    "config",
    [
        b"[" * 100_000,
        b"\xff\xfe\x00",
        b'{"config": {"Labels": {"a": "\x00"}}}',
        b'{"config": {"Labels": [1]}}',
    ],
    ids=["nested-100000-deep", "not-utf8", "raw-nul-in-a-label", "labels-a-list"],
)
def test_a_staged_config_that_cannot_be_read_means_building(
    config: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staged config blob is the registry's: one that is no JSON object, or states no labels,
    is a reason to build, one line, never a traceback (before: deep nesting ended the build in
    json.loads's RecursionError)."""
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: StagedWithConfig(config))
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    said: list[str] = []
    staged = use.staged_unpulled(SimpleNamespace(input_digest="f" * 64), (), said.append)  # type: ignore[arg-type]
    assert staged is None
    assert said[-1].startswith("reuse: ") and said[-1].endswith("; building"), said
    assert "\n" not in said[-1] and "\x00" not in said[-1]


class MalformedStaged(StagedRegistry):
    """The staged image's manifest names a layer of size -1: no engine could pull it."""

    def get_manifest(self, repository: str, digest: str) -> Manifest:
        document = json.loads(super().get_manifest(repository, digest).body)
        document["layers"][0]["size"] = -1
        return Manifest(MANIFEST, DOCKER_MANIFEST, json.dumps(document).encode())


def test_a_staged_image_no_engine_could_pull_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    # read as every image is (issue 45): its labels say the same inputs, and it is built again
    digest = "f" * 64
    registry = MalformedStaged({naming.INPUT_DIGEST_LABEL: digest})
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: registry)
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    said: list[str] = []
    staged = use.staged_unpulled(SimpleNamespace(input_digest=digest), (), said.append)  # type: ignore[arg-type]
    assert staged is None
    assert "unreadable" in said[-1] and "layers[0] says it is -1 bytes" in said[-1], said
    assert said[-1].endswith("; building")
    # and the same image with the layer's own size is reused
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: StagedRegistry(registry.labels))
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    assert use.staged_unpulled(SimpleNamespace(input_digest=digest), (), said.append) is not None  # type: ignore[arg-type]


class ServingRegistry(StagedRegistry):
    """The staging tag names ``serves`` (None: no manifest under it); reads are counted."""

    def __init__(self, serves: str | None) -> None:
        super().__init__()
        self.serves = serves

    def tag_digest(self, repository: str, tag: str) -> str | None:
        assert tag == naming.staging_tag("f" * 64)
        return self.serves


@pytest.mark.parametrize(
    ("serves", "says"),
    [
        (MANIFEST, None),
        ("sha256:" + "9" * 64, f"but the registry serves sha256:{'9' * 64} there; nothing recorded"),
        (None, "but the registry serves no manifest there; nothing recorded"),
    ],
    ids=["the-same", "another", "none"],
)
def test_what_buildkit_pushed_is_recorded_only_as_the_registry_serves_it(
    serves: str | None, says: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: the digest in buildx's metadata file is checked against the staging tag the
    registry serves (the registry is what verify and publish pull) before it is recorded."""
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: ServingRegistry(serves))
    monkeypatch.setattr(registry_use, "push_as", lambda *_, **__: pytest.fail("pushed through the engine"))
    use = registry_use.BuildRegistry(None, "reg:5000", Publish(), DEFAULT_BACKOFF, None)  # type: ignore[arg-type]
    result = CellResult(
        id="c", kind="cell", status="built", base_image="b", image_id=MANIFEST, input_digest="f" * 64
    )
    said: list[str] = []
    if says is None:
        staged = use.pushed_by_buildkit(result, said.append, platforms.get("linux/amd64"))
        assert staged.staged is not None and staged.staged.digest == MANIFEST
        assert staged.staged.tag == naming.staging_tag("f" * 64) and staged.pull_cost is not None
        where = f"reg:5000/{Publish().staging_repository}:{staged.staged.tag}"
        assert said[0] == f"staged: BuildKit pushed {where} as {MANIFEST}"
        return
    with pytest.raises(registry_use.StagingFailed) as failed:
        use.pushed_by_buildkit(result, said.append, platforms.get("linux/amd64"))
    assert (
        failed.value.message.startswith("buildx reports pushing reg:5000/") and says in failed.value.message
    )
    assert said == []
