"""rebuild-check's comparison: two images' manifests and configs give a verdict (content,
compression, layers, config, manifest, or none), and two layer tars their first differing entries,
read as streams and bounded against hostile tars."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from imagekit.builds import layer_diff
from imagekit.builds.layer_diff import (
    Image,
    compare,
    first_differences,
    list_entries,
    read_image,
    uncompressed,
)
from imagekit.core.errors import RegistryError
from imagekit.core.limits import MAX_IMAGE_LAYERS
from imagekit.registry.manifest import OCI_CONFIG, OCI_MANIFEST, Manifest

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def image(
    diff_ids: list[str],
    layers: list[str] | None = None,
    labels: dict[str, str] | None = None,
    media_type: str = GZIP,
    annotations: dict[str, str] | None = None,
) -> Image:
    config: dict[str, Any] = {
        "architecture": "amd64",
        "config": {"Labels": labels or {}},
        "rootfs": {"type": "layers", "diff_ids": [_digest(d) for d in diff_ids]},
        "history": [{"created_by": f"RUN make {d}", "comment": "buildkit.dockerfile.v0"} for d in diff_ids],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": _bytes_digest(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": media_type, "digest": _digest(d), "size": 10} for d in (layers or diff_ids)],
        **({"annotations": annotations} if annotations else {}),
    }
    body = json.dumps(manifest, sort_keys=True).encode()
    return read_image(Manifest(_bytes_digest(body), OCI_MANIFEST, body), config_bytes, "test")


def _bytes_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_the_same_image_matches() -> None:
    assert compare(image(["a", "b"]), image(["a", "b"])) is None


def test_a_layer_whose_content_differs_is_named_with_its_step() -> None:
    found = compare(image(["a", "b", "c"]), image(["a", "x", "c"]))
    assert found is not None
    assert (found.kind, found.layer, found.step) == ("content", 1, "RUN make b")
    assert found.line().startswith("differs: layer 1 (RUN make b) content differs (diff_id")


def test_equal_content_under_other_layer_digests_is_a_compression_difference() -> None:
    found = compare(
        image(["a", "b"], layers=["ga", "gb"]), image(["a", "b"], layers=["ga", "zb"], media_type=ZSTD)
    )
    assert found is not None and (found.kind, found.layer) == ("compression", 1)
    assert "another compressor or level, not another file" in found.detail
    assert ZSTD in found.detail


def test_an_extra_layer_is_a_layer_count_difference() -> None:
    found = compare(image(["a"]), image(["a", "b"]))
    assert found is not None and found.kind == "layers"
    assert found.detail == "the image has 1 layers, the rebuild 2"


def test_a_config_difference_names_the_label_that_moved() -> None:
    found = compare(image(["a"], labels={"x": "1"}), image(["a"], labels={"x": "2"}))
    assert found is not None and found.kind == "config"
    assert found.detail.endswith(": config.Labels")


def test_a_history_difference_names_its_entry() -> None:
    mine, other = image(["a"]), image(["a"])
    changed = json.loads(other.config_bytes)
    changed["history"][0]["created_by"] = "RUN other"
    body = json.dumps(changed).encode()
    other = Image(
        other.manifest_digest, other.manifest, _digest("other"), changed, body, other.layers, other.diff_ids
    )
    found = compare(mine, other)
    assert found is not None and found.kind == "config"
    assert 'history[0] {"comment": "buildkit.dockerfile.v0", "created_by": "RUN make a"} ->' in found.detail


def test_a_manifest_only_difference_names_its_keys() -> None:
    found = compare(image(["a"]), image(["a"], annotations={"k": "v"}))
    assert found is not None and found.kind == "manifest"
    assert found.detail.endswith(": annotations")


CONFIG = json.dumps({"rootfs": {"type": "layers", "diff_ids": [_digest("a")]}}).encode()
LAYER = {"mediaType": GZIP, "digest": _digest("ga"), "size": 10}


def _manifest_of(raw: bytes = CONFIG, **changed: Any) -> dict[str, Any]:
    described = {"mediaType": OCI_CONFIG, "digest": _bytes_digest(raw), "size": len(raw)}
    return {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": described, "layers": [LAYER], **changed}


def _config_of(diff_ids: list[Any], rootfs_type: str = "layers") -> bytes:
    return json.dumps({"rootfs": {"type": rootfs_type, "diff_ids": diff_ids}}).encode()


# Each: a manifest and config no image has (issue 45: a layer size of -1 or 2**63, fewer diff_ids
# than layers were compared, and said to match), and what the one line says.
MALFORMED: dict[str, tuple[Any, bytes, str]] = {
    "a JSON list": ([], CONFIG, "a JSON list, not an object"),
    "not JSON": (b"not json", CONFIG, "not JSON"),
    "a layer of size -1": (
        _manifest_of(layers=[{**LAYER, "size": -1}]),
        CONFIG,
        "layers[0] says it is -1 bytes",
    ),
    "a layer of size 2**63": (
        _manifest_of(layers=[{**LAYER, "size": 2**63}]),
        CONFIG,
        "9,223,372,036,854,775,808",
    ),
    "a layer size that is a bool": (_manifest_of(layers=[{**LAYER, "size": True}]), CONFIG, "a JSON bool"),
    "a layer size that is a float": (_manifest_of(layers=[{**LAYER, "size": 10.0}]), CONFIG, "a JSON float"),
    "a layer of no digest": (_manifest_of(layers=[{**LAYER, "digest": "md5:1"}]), CONFIG, "no sha256 digest"),
    "a layer of no media type": (
        _manifest_of(layers=[{"digest": _digest("ga"), "size": 10}]),
        CONFIG,
        "no media type",
    ),
    "a layer no image holds": (
        _manifest_of(layers=[{**LAYER, "mediaType": "application/vnd.in-toto+json"}]),
        CONFIG,
        "which no image holds there",
    ),
    "a config no image holds": (
        _manifest_of(config={**_manifest_of()["config"], "mediaType": "text/plain"}),
        CONFIG,
        "its config is a 'text/plain'",
    ),
    "fewer diff_ids than layers": (
        _manifest_of(_config_of([])),
        _config_of([]),
        "0 diff_ids for the manifest's 1",
    ),
    "more diff_ids than layers": (
        _manifest_of(_config_of([_digest("a")] * 2)),
        _config_of([_digest("a")] * 2),
        "2 diff_ids for the manifest's 1",
    ),
    "a diff_id of no digest": (
        _manifest_of(_config_of(["md5:1"])),
        _config_of(["md5:1"]),
        "not sha256 digests",
    ),
    "a rootfs of another type": (
        _manifest_of(_config_of([_digest("a")], "tarball")),
        _config_of([_digest("a")], "tarball"),
        "no rootfs of type layers",
    ),
    "a config other than the one named": (_manifest_of(), _config_of([_digest("b")]), "another digest than"),
    "schema 1": (_manifest_of(schemaVersion=1), CONFIG, "its schemaVersion is '1', not 2"),
    "an index's body": (_manifest_of(manifests=[]), CONFIG, "not a single-image manifest"),
    "more layers than any engine runs": (
        _manifest_of(layers=[LAYER] * (MAX_IMAGE_LAYERS + 1)),
        CONFIG,
        f"more than the {MAX_IMAGE_LAYERS:,} any engine runs",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_manifest_or_config_no_image_has_is_one_line_and_nothing_compared(case: str) -> None:
    document, config, said = MALFORMED[case]
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    with pytest.raises(RegistryError, match=r"^test: .*; nothing compared$") as caught:
        read_image(Manifest(_bytes_digest(body), OCI_MANIFEST, body), config, "test")
    assert said in caught.value.message and "\n" not in caught.value.message


def test_the_fixture_of_the_malformed_cases_is_an_image() -> None:
    # each case above is one change away from this, which is read
    body = json.dumps(_manifest_of()).encode()
    found = read_image(Manifest(_bytes_digest(body), OCI_MANIFEST, body), CONFIG, "test")
    assert found.diff_ids == (_digest("a"),) and found.layers[0].size == 10


def test_a_layer_repeated_in_one_image_is_read() -> None:
    # one blob at two places is an image (an engine unpacks it at each); nothing to refuse
    config = _config_of([_digest("a")] * 2)
    body = json.dumps(_manifest_of(config, layers=[LAYER, LAYER])).encode()
    found = read_image(Manifest(_bytes_digest(body), OCI_MANIFEST, body), config, "test")
    assert [layer.digest for layer in found.layers] == [LAYER["digest"]] * 2


# -- tar entries ------------------------------------------------------------------------------------


def tar(*entries: tuple[str, bytes, int], links: dict[str, str] | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, data, mtime in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            out.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            out.addfile(info)
    buffer.seek(0)
    return buffer


def test_the_first_differing_entries_name_what_moved() -> None:
    published = list_entries(tar(("a", b"x", 1), ("b", b"y", 1), ("gone", b"", 1)))
    rebuilt = list_entries(tar(("a", b"x", 2), ("b", b"z", 1), ("new", b"", 1)))
    found = [d.line() for d in first_differences(published, rebuilt)]
    sha_y, sha_z = (hashlib.sha256(v).hexdigest() for v in (b"y", b"z"))
    assert found == [
        "a: mtime 1 -> 2",
        f"b: sha256 {sha_y} -> {sha_z}",
        "gone: only in the published image",
        "new: only in the rebuild",
    ]


def test_the_shown_differences_are_bounded() -> None:
    published = list_entries(tar(*((f"f{i}", b"a", 1) for i in range(30))))
    rebuilt = list_entries(tar(*((f"f{i}", b"b", 1) for i in range(30))))
    assert len(first_differences(published, rebuilt, shown=10)) == 10


def test_names_with_control_characters_are_shown_escaped_and_links_not_followed() -> None:
    listing = list_entries(tar(("evil\x1b[2J\nname", b"", 1), links={"link": "/etc/shadow\x07"}))
    assert listing.stopped == ""
    assert list(listing.entries) == ["evil\ufffd[2J name", "link"]
    link = listing.entries["link"]
    assert (link.type, link.link, link.sha256) == ("symlink", "/etc/shadow\ufffd", "")


def test_an_absurd_entry_size_stops_the_listing_without_reading_it() -> None:
    info = tarfile.TarInfo("huge")
    info.size = 1 << 40  # a header claiming a TiB, followed by nothing
    stream = io.BytesIO(tar(("a", b"x", 1)).getvalue()[:1024] + info.tobuf(tarfile.GNU_FORMAT))
    listing = list_entries(stream, budget=1 << 20)
    assert "a" in listing.entries and listing.entries["huge"].sha256 == "unread"
    assert listing.stopped.startswith("listing stopped at huge (1,099,511,627,776 bytes")


def test_a_short_or_malformed_tar_ends_the_listing_with_a_note() -> None:
    whole = tar(("a", b"x" * 2000, 1), ("b", b"y", 1)).getvalue()
    short = list_entries(io.BytesIO(whole[:1200]))
    assert short.stopped.startswith("the tar ends early or is malformed after 0 entries")
    assert list_entries(io.BytesIO(b"\x01" * 4096)).stopped.startswith("the tar ends early or is malformed")


def test_the_listing_stops_after_its_entry_bound() -> None:
    listing = list_entries(tar(*((f"f{i}", b"", 1) for i in range(5))), entries=3)
    assert len(listing.entries) == 3 and listing.stopped == "listing stopped after 3 entries"


def test_a_huge_pax_header_is_refused_not_read_into_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_diff, "REBUILD_TAR_HEADER_BYTES", 64 << 10)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as out:
        info = tarfile.TarInfo("a")
        info.pax_headers = {"comment": "x" * (256 << 10)}
        out.addfile(info, io.BytesIO(b""))
    buffer.seek(0)
    listing = list_entries(buffer)
    assert listing.entries == {}
    assert "runs past 65,536 bytes read" in listing.stopped


def test_a_missing_name_of_a_listing_that_stopped_short_is_not_called_missing() -> None:
    published = list_entries(tar(("a", b"x", 1), ("b", b"y", 1)))
    rebuilt = list_entries(tar(("a", b"x", 1), ("b", b"y", 1)), entries=1)
    assert first_differences(published, rebuilt) == ()


def test_a_gzip_layer_is_listed_as_it_is_decompressed() -> None:
    blob = io.BytesIO(gzip.compress(tar(("a", b"x", 1)).getvalue()))
    with uncompressed(blob, GZIP) as stream:
        assert list(list_entries(stream).entries) == ["a"]


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd program")
def test_a_zstd_layer_is_listed_through_the_zstd_program(tmp_path: Path) -> None:
    plain = tmp_path / "layer.tar"
    plain.write_bytes(tar(("a", b"x", 1)).getvalue())
    subprocess.run(["zstd", "-q", str(plain)], check=True, timeout=30)
    with (tmp_path / "layer.tar.zst").open("rb") as blob, uncompressed(blob, ZSTD) as stream:
        assert list(list_entries(stream).entries) == ["a"]


def test_a_zstd_layer_without_the_program_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layer_diff.shutil, "which", lambda _: None)
    refused = pytest.raises(layer_diff.LayerUnreadable, match="no `zstd` program")
    with refused, uncompressed(io.BytesIO(), ZSTD):
        pass
