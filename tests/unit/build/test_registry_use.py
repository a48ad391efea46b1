"""Staging after a build: an image the staging tag already names is not pushed again."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.build import registry_use
from imagekit.core import naming, platforms
from imagekit.plan.schema import Publish
from imagekit.registry.manifest import DOCKER_MANIFEST, Manifest
from imagekit.registry.transport import DEFAULT_BACKOFF
from imagekit.report.store import CellResult

MANIFEST = "sha256:" + "a" * 64
CONFIG = "sha256:" + "c" * 64
LAYER = "sha256:" + "d" * 64


class StagedRegistry:
    """The staging tag names MANIFEST, whose config is CONFIG."""

    def head_manifest(self, repository: str, ref: str) -> str:
        return MANIFEST

    def get_manifest(self, repository: str, digest: str) -> Any:
        return SimpleNamespace(config_digest=CONFIG)

    def image_for(self, repository: str, digest: str, platform: object) -> tuple[Manifest, bytes]:
        body = {"config": {"digest": CONFIG, "size": 2}, "layers": [{"digest": LAYER, "size": 9}]}
        return Manifest(MANIFEST, DOCKER_MANIFEST, json.dumps(body).encode()), b"{}"

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
    assert staged.pull_cost is not None and staged.pull_cost.total == 11  # counted where it was staged
    assert pushes == ([image_id] if pushed else [])
    assert any("not pushed again" in s for s in said) is not pushed


class StagedWithLabels(StagedRegistry):
    """MANIFEST's config blob carries these labels."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def get_blob(self, repository: str, digest: str) -> bytes:
        assert digest == CONFIG
        return json.dumps({"config": {"Labels": self.labels}}).encode()


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
    monkeypatch.setattr(registry_use, "open_registry", lambda *_: StagedWithLabels(labels))
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
