"""The registry's documents as imagekit writes and reads them: an OCI image index of one image per
platform, and each entry of an index read back checked against what was published."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from imagekit.core import platforms
from imagekit.core.errors import RegistryError
from imagekit.registry.manifest import (
    DOCKER_CONFIG,
    DOCKER_MANIFEST,
    OCI_INDEX,
    Manifest,
    check_index,
    image_index,
)

AMD64, ARM64 = platforms.get("linux/amd64"), platforms.get("linux/arm64")


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
