"""rebuild-check before any build: its argument refused without a digest or a registry, the image
read from the registry (an index's child; a classic image refused), its cell found by label, and a
matrix that renders other inputs stopped with its own exit code, nothing built."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.builds.layer_diff import Difference, Entry, EntryDifference
from imagekit.builds.rebuild_check import (
    Outcome,
    Target,
    _oci_image,
    check_inputs,
    find_cell,
    parse_target,
    published_image,
    render,
)
from imagekit.core import naming
from imagekit.core.errors import ExitCode, ImagekitError, InputError, InputsChanged
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.registry.manifest import OCI_INDEX, OCI_MANIFEST
from tests.conftest import run_cli
from tests.unit.oci_stub import OciStub, digest_of, oci_stub

DIGEST = "sha256:" + "a" * 64
# torch 2.1: its critical advisories (imagekit/data/advisories.yaml) waived, the cell is about rebuilds
OLD_TORCH_IDS = ("CVE-2025-32434", "CVE-2024-48063")
REPOSITORY = "team/torch"
TEMPLATE = """\
FROM {{ cell.base_image }}
RUN --network=none echo hi > /hi
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}" {% endfor %}
"""


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("127.0.0.1:5000/team/torch:2.1", "takes an image by digest"),
        ("127.0.0.1:5000/team/torch", "takes an image by digest"),
        ("team/torch@" + DIGEST, "names no registry host"),
        ("127.0.0.1:5000/team/torch@sha256:abc", "not an image reference"),
        ("127.0.0.1:5000/Team\x1b/torch@" + DIGEST, "not an image reference"),
    ],
)
def test_a_reference_without_a_digest_or_a_registry_is_refused(ref: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as refused:
        parse_target(ref)
    assert "\n" not in refused.value.message and "\x1b" not in refused.value.message


def test_a_reference_by_digest_names_its_registry_and_repository() -> None:
    assert parse_target(f"127.0.0.1:5000/{REPOSITORY}:2.1@{DIGEST}") == Target(
        "127.0.0.1:5000", REPOSITORY, DIGEST
    )


def test_the_command_refuses_a_tag_with_one_line_and_exit_2() -> None:
    result = run_cli("rebuild-check", "127.0.0.1:5000/team/torch:2.1")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert result.stderr.count("\n") == 1 and "takes an image by digest" in result.stderr


LAYER = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": DIGEST, "size": 3}


def _store(
    stub: OciStub, config: dict[str, Any], arch: str = "amd64", layers: list[Any] | None = None
) -> tuple[str, bytes]:
    """An image of ``config`` (one layer, or ``layers``) in the stub; its manifest's digest and body."""
    body = json.dumps(config).encode()
    stub.blobs[(REPOSITORY, digest_of(body))] = body
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest_of(body),
            "size": len(body),
        },
        "layers": [LAYER] if layers is None else layers,
    }
    return stub.replace_manifest(REPOSITORY, f"v-{arch}", manifest, OCI_MANIFEST), body


def _config(labels: dict[str, str], comment: str = "buildkit.dockerfile.v0") -> dict[str, Any]:
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [DIGEST]},
        "history": [{"created_by": "RUN echo hi", "comment": comment}],
    }


def test_an_index_of_one_image_is_read_through_to_it_and_of_two_needs_platform() -> None:
    with oci_stub() as stub:
        amd64, _ = _store(stub, _config({"imagekit.cell": "a"}))
        arm64, _ = _store(stub, _config({"imagekit.cell": "b"}), "arm64")
        entry = {"mediaType": OCI_MANIFEST, "size": 1}
        one = stub.replace_manifest(
            REPOSITORY,
            "one",
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{**entry, "digest": amd64}]},
            OCI_INDEX,
        )
        two = stub.replace_manifest(
            REPOSITORY,
            "two",
            {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [
                    {**entry, "digest": amd64, "platform": {"architecture": "amd64", "os": "linux"}},
                    {**entry, "digest": arm64, "platform": {"architecture": "arm64", "os": "linux"}},
                ],
            },
            OCI_INDEX,
        )
        registry = stub.client()
        assert published_image(registry, Target(stub.host, REPOSITORY, one), None).manifest_digest == amd64
        with pytest.raises(InputError, match="an index of 2 images; pass --platform"):
            published_image(registry, Target(stub.host, REPOSITORY, two), None)
        chosen = published_image(registry, Target(stub.host, REPOSITORY, two), "linux/arm64")
        assert chosen.manifest_digest == arm64


# A published image no engine could pull (issue 45: each of these was compared, and "matches").
MALFORMED_IMAGES: dict[str, tuple[list[Any], list[str], str]] = {
    "a layer of size -1": ([{**LAYER, "size": -1}], [DIGEST], "layers[0] says it is -1 bytes"),
    "a layer of size 2**63": ([{**LAYER, "size": 2**63}], [DIGEST], "layers[0] says it is 9,223,372"),
    "fewer diff_ids than layers": ([LAYER, LAYER], [DIGEST], "1 diff_ids for the manifest's 2 layers"),
    "a layer of no image's media type": ([{**LAYER, "mediaType": "text/plain"}], [DIGEST], "'text/plain'"),
}


@pytest.mark.parametrize("case", list(MALFORMED_IMAGES))
def test_a_malformed_published_image_is_exit_1_one_line_and_nothing_built_or_compared(
    case: str, plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.builds import rebuild_check
    from imagekit.engine import client as engine_client

    layers, diff_ids, said = MALFORMED_IMAGES[case]
    # the engine is never asked for anything: the check stops at the published image
    monkeypatch.setattr(engine_client, "connect", object)
    built: list[object] = []
    monkeypatch.setattr(rebuild_check, "rebuilt_image", lambda *a: built.append(a))
    monkeypatch.setattr(rebuild_check, "compare", lambda *a: built.append(a))
    with oci_stub() as stub:
        config = {
            **_config({naming.CELL_LABEL: plan.cells[0].id}),
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        digest, _ = _store(stub, config, layers=layers)
        ref = f"{stub.host}/{REPOSITORY}@{digest}"
        result = run_cli("rebuild-check", ref, "--matrix", str(tmp_path / "matrix.yaml"))
    assert result.exit_code == ExitCode.CELL_FAILED == 1, result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert result.stderr.startswith(f"imagekit: error: {ref}: ") and said in result.stderr, result.stderr
    assert result.stderr.endswith("; nothing compared\n") and "matches" not in result.stderr
    assert built == []


def test_an_image_of_the_classic_builder_is_refused_with_one_line() -> None:
    with oci_stub() as stub:
        digest, _ = _store(stub, _config({"imagekit.cell": "a"}, comment=""))
        with pytest.raises(InputError, match="built by the classic builder") as refused:
            published_image(stub.client(), Target(stub.host, REPOSITORY, digest), None)
        assert "rebuild-check takes images of --builder buildkit" in refused.value.message


@pytest.mark.parametrize(
    "labels",
    [{"note": "a\x00b"}, {"no\x00te": "x"}, {"a=b": "c"}, {"": "x"}],
    ids=["nul-in-a-value", "nul-in-a-name", "equals-in-a-name", "empty-name"],
)
def test_a_label_no_build_can_set_is_refused_before_anything_is_built(labels: dict[str, str]) -> None:
    """The rebuild passes the image's labels to `buildx build --label KEY=VALUE`: a NUL byte
    (before: "ValueError: embedded null byte", a traceback, once the build started) or a name
    holding '=' or none is refused with one line, exit 2, from the config alone."""
    with oci_stub() as stub:
        digest, _ = _store(stub, _config({"imagekit.cell": "a", **labels}))
        with pytest.raises(InputError, match="cannot be passed to a build") as refused:
            published_image(stub.client(), Target(stub.host, REPOSITORY, digest), None)
    message = refused.value.message
    assert "\x00" not in message and "\n" not in message and "nothing was built" in message
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    document = {
        "version": 1,
        "templates": "templates",
        "build": {"builder": "buildkit"},
        "publish": {"repository": "team/torch", "tags": {"readable": "{base}-{torch}"}},
        "axes": {"torch": ["2.1"]},
        "bases": {"busybox": {"image": "busybox:1.36", "os": "debian12", "python": "3.11", "cuda": False}},
        "advisories": {"waive": [{"id": i, "reason": "a test of rebuild-check"} for i in OLD_TORCH_IDS]},
    }
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(document))
    return load_plan(tmp_path / "matrix.yaml")


def _image(plan: Plan, labels: dict[str, str]) -> Any:
    with oci_stub() as stub:
        digest, _ = _store(stub, _config(labels))
        return published_image(stub.client(), Target(stub.host, REPOSITORY, digest), None)


def test_the_cell_is_found_by_its_label_and_a_missing_or_unknown_one_refused(plan: Plan) -> None:
    cell = plan.cells[0]
    assert find_cell(plan, _image(plan, {naming.CELL_LABEL: cell.id}), "ref") == cell
    with pytest.raises(InputError, match=r"no imagekit\.cell label"):
        find_cell(plan, _image(plan, {}), "ref")
    with pytest.raises(InputError, match=r"names 'other\\x1b', no cell of .*matrix\.yaml; pass the matrix"):
        find_cell(plan, _image(plan, {naming.CELL_LABEL: "other\x1b"}), "ref")


def test_other_inputs_stop_the_check_with_their_own_exit_code(plan: Plan) -> None:
    cell = plan.cells[0]
    image = _image(plan, {naming.CELL_LABEL: cell.id})
    rendered = render(plan, cell, image)
    assert rendered.build.builder == "buildkit" and rendered.build.compression == "gzip"
    current = {naming.CELL_LABEL: cell.id, **rendered.build_labels()}
    check_inputs(rendered, _image(plan, current), "ref")  # the same inputs: no refusal
    with pytest.raises(InputsChanged, match=r"its inputs changed .* nothing was built") as changed:
        check_inputs(rendered, _image(plan, {**current, naming.INPUT_DIGEST_LABEL: "0" * 64}), "ref")
    assert changed.value.exit_code == ExitCode.INPUTS_CHANGED == 5
    with pytest.raises(InputsChanged, match=r"built by imagekit '0\.0\.1'"):
        check_inputs(rendered, _image(plan, {**current, naming.VERSION_LABEL: "0.0.1"}), "ref")


def test_a_base_is_pinned_only_where_the_image_names_its_digest(plan: Plan) -> None:
    cell = plan.cells[0]
    pinned = f"docker.io/library/busybox@{DIGEST}"
    by_name = render(plan, cell, _image(plan, {naming.BASE_DIGEST_LABEL: pinned}))
    assert by_name.dockerfile.startswith("FROM busybox:1.36\n")
    named = {naming.BASE_DIGEST_LABEL: pinned, "org.opencontainers.image.description": f"on {pinned}"}
    by_digest = render(plan, cell, _image(plan, named))
    assert by_digest.dockerfile.startswith(f"FROM {pinned}\n")
    assert by_digest.input_digest == by_name.input_digest  # the base's name is the input either way


def test_the_verdict_lines_and_json() -> None:
    target = Target("127.0.0.1:5000", REPOSITORY, DIGEST)
    assert Outcome(target, "c", DIGEST, DIGEST, None).lines() == [f"matches {DIGEST}"]
    entry = Entry("etc/x", "file", "0o644", 0, 0, 1, 3, "ab")
    difference = Difference(
        "content",
        "content differs",
        2,
        "RUN pip install",
        (EntryDifference("etc/x", entry, dataclasses.replace(entry, mtime=2)),),
        "rebuilt: listing stopped after 5 entries",
    )
    outcome = Outcome(target, "c", DIGEST, "sha256:" + "b" * 64, difference)
    assert outcome.lines() == [
        "differs: layer 2 (RUN pip install) content differs",
        "  etc/x: mtime 1 -> 2",
        "  (rebuilt: listing stopped after 5 entries)",
    ]
    document = json.loads(outcome.json_text())
    assert document["verdict"] == "differs" and document["difference"]["entries"][0]["rebuilt"]["mtime"] == 2


def blobs_path(blob: bytes) -> str:
    return f"blobs/sha256/{digest_of(blob).removeprefix('sha256:')}"


def _oci_tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as out:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


def test_the_rebuilt_image_is_read_from_buildx_oci_tar_and_a_broken_one_is_one_line(tmp_path: Path) -> None:
    config = json.dumps(_config({})).encode()
    described = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest_of(config)}
    document = {"schemaVersion": 2, "config": {**described, "size": len(config)}, "layers": [LAYER]}
    manifest = json.dumps(document).encode()
    index = json.dumps({"manifests": [{"mediaType": OCI_MANIFEST, "digest": digest_of(manifest)}]}).encode()
    blobs = {f"blobs/sha256/{digest_of(b).removeprefix('sha256:')}": b for b in (config, manifest)}
    _oci_tar(tmp_path / "good.tar", {"index.json": index, **blobs})
    with tarfile.open(tmp_path / "good.tar") as oci:
        assert _oci_image(oci, "linux/amd64", "ref").manifest_digest == digest_of(manifest)
    # a rebuilt image no engine could pull is read as the published one is: one line, exit 1
    odd = json.dumps({**document, "layers": [{**LAYER, "size": -1}]}).encode()
    odd_index = json.dumps({"manifests": [{"mediaType": OCI_MANIFEST, "digest": digest_of(odd)}]}).encode()
    _oci_tar(
        tmp_path / "odd.tar", {"index.json": odd_index, blobs_path(odd): odd, blobs_path(config): config}
    )
    with (
        tarfile.open(tmp_path / "odd.tar") as oci,
        pytest.raises(
            ImagekitError, match=r"^the rebuild of ref: layers\[0\] says it is -1 bytes"
        ) as odd_one,
    ):
        _oci_image(oci, "linux/amd64", "ref")
    assert odd_one.value.exit_code == ExitCode.CELL_FAILED
    _oci_tar(tmp_path / "bad.tar", {"index.json": b"[[[\x1b", **blobs})
    with (
        tarfile.open(tmp_path / "bad.tar") as oci,
        pytest.raises(ImagekitError, match="buildx's OCI tar") as bad,
    ):
        _oci_image(oci, "linux/amd64", "ref")
    assert "\x1b" not in bad.value.message


def test_a_rebuilt_tar_is_read_by_the_one_oci_reader_bounded_and_checked(tmp_path: Path) -> None:
    """Before, rebuild_check read the tar itself: no index.json was a KeyError traceback (now
    engine.oci_archive's reader, the one the build's check uses too); a config of other bytes than
    its name is refused still, saying which image's."""
    config = json.dumps(_config({})).encode()
    described = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest_of(config)}
    document = {"schemaVersion": 2, "config": {**described, "size": len(config)}, "layers": [LAYER]}
    manifest = json.dumps(document).encode()
    index = json.dumps({"manifests": [{"mediaType": OCI_MANIFEST, "digest": digest_of(manifest)}]}).encode()
    _oci_tar(tmp_path / "no-index.tar", {blobs_path(config): config, blobs_path(manifest): manifest})
    swapped = json.dumps(_config({"other": "image"})).encode()
    _oci_tar(
        tmp_path / "swapped.tar",
        {"index.json": index, blobs_path(config): swapped, blobs_path(manifest): manifest},
    )
    for name, says in (
        ("no-index.tar", "the OCI tar buildx wrote has no file index.json; nothing compared"),
        (
            "swapped.tar",
            f"the rebuild of ref: its config is {len(swapped)} bytes of another digest",
        ),
    ):
        with tarfile.open(tmp_path / name) as oci, pytest.raises(ImagekitError) as refused:
            _oci_image(oci, "linux/amd64", "ref")
        assert says in refused.value.message and refused.value.exit_code == ExitCode.CELL_FAILED
