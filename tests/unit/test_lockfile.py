"""images.lock.json: merged per cell, round-tripped, rendered for other tools."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagekit.errors import InputError
from imagekit.lockfile import merge_lock, read_lock, render_lock
from tests.unit.report_samples import lock_entry as entry


def test_lock_merges_per_cell_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a")})
    merge_lock(path, {"b": entry("b", verified=False)})
    merge_lock(path, {"a": entry("a", digest="sha256:" + "00" * 32)})
    lock = read_lock(path)
    assert sorted(lock) == ["a", "b"] and lock["a"].digest.endswith("00" * 32)
    assert lock["b"] == entry("b", verified=False) and lock["a"].verification == entry().verification
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    env = render_lock(lock, "env")
    assert "IMAGEKIT_IMAGE_A=ghcr.io/acme/pytorch@sha256:" in env
    assert yaml.safe_load(render_lock(lock, "yaml"))["images"]["b"]["verification"] is None
    with pytest.raises(InputError):
        render_lock(lock, "toml")
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable lock file"):
        read_lock(path)


def test_provenance_round_trips_and_says_whether_the_digests_agree(tmp_path: Path) -> None:
    import json

    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a"), "b": entry("b", verified=False)})
    document = json.loads(path.read_text())
    provenance = document["images"]["a"]["provenance"]
    assert provenance["gpus"] == ["NVIDIA H200"] and provenance["driver"] == "560.35.03"
    assert provenance["cuda_driver"] == "12.6" and provenance["checks_passed"] == 12
    assert provenance["digest_chain"] == {
        "staged": entry().digest, "verified": entry().digest, "promoted": entry().digest, "equal": True
    }  # fmt: skip
    assert document["images"]["b"]["provenance"] is None
    assert read_lock(path)["a"] == entry("a")
    # A lock written before provenance existed still reads.
    del document["images"]["a"]["provenance"]
    path.write_text(json.dumps(document))
    assert read_lock(path)["a"].provenance is None
