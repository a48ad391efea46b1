"""`imagekit bake-import`: bake's --metadata-file, as bake writes it, recorded in the report."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.core.clock import today
from imagekit.core.errors import InputError
from imagekit.core.naming import DIGEST, is_reference, staging_tag
from imagekit.export.bake_import import read_metadata
from imagekit.export.targets import bake_target_name
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from imagekit.report.store import read_report, write_report
from tests.conftest import REPO, run_cli
from tests.unit.strategies import json_values

MATRIX = REPO / "matrix.yaml"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
CONFIG_A = "sha256:" + "c" * 64


def metadata(cells: list[str]) -> dict[str, object]:
    """What `docker buildx bake --metadata-file` writes (buildx 0.12+): one object per target,
    plus bake's own warnings key."""
    document: dict[str, object] = {
        "buildx.build.warnings": [
            {"vertex": "sha256:" + "d" * 64, "level": 1, "short": "VGhpcyBpcyBhIHdhcm5pbmc=", "range": []}
        ]
    }
    for cell, digest in zip(cells, (DIGEST_A, DIGEST_B), strict=False):
        document[bake_target_name(cell)] = {
            "buildx.build.provenance": {"buildType": "https://mobyproject.org/buildkit@v1"},
            "buildx.build.ref": "default/default/k2pbwqyzrp3vn2zvqfqwz1pbb",
            "containerimage.config.digest": CONFIG_A,
            "containerimage.descriptor": {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": 1234,
            },
            "containerimage.digest": digest,
            "image.name": f"ghcr.io/imagekit/pytorch:staging-{cell[:12]}",
        }
    return document


def test_import_records_each_target_as_built_with_its_digest(tmp_path: Path) -> None:
    cells = [c.id for c in load_plan(MATRIX).cells[:2]]
    path = tmp_path / "bake-metadata.json"
    path.write_text(json.dumps(metadata(cells)))
    state = tmp_path / "state"
    result = run_cli(
        "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(state), "--json"
    )
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert [i["id"] for i in shown["imported"]] == cells
    report = read_report(state)
    by_id = {r.id: r for r in report.cells}
    assert set(by_id) == set(cells)
    first = by_id[cells[0]]
    assert first.status == "built"
    assert first.image_digest == DIGEST_A
    assert first.image_id == CONFIG_A
    plan = load_plan(MATRIX)
    rendered = {r.cell.id: r for r in Renderer(plan).render_all()}
    # the final tags publish promotes to, not bake's staging tag
    assert first.tags == rendered[cells[0]].names(plan.matrix.publish, today()).references()
    assert first.tags[0] == f"{plan.repository}:{rendered[cells[0]].cell.readable_tag}"
    assert not any(":staging-" in t for t in first.tags)
    assert report.matrix == plan.source_name  # as `imagekit build` records it
    assert first.input_digest == rendered[cells[0]].input_digest
    assert by_id[cells[1]].image_digest == DIGEST_B
    assert report.engine == "docker buildx bake"


def test_import_keeps_the_other_cells_of_an_existing_report(tmp_path: Path) -> None:
    cells = [c.id for c in load_plan(MATRIX).cells[:2]]
    state = tmp_path / "state"
    first = tmp_path / "one.json"
    first.write_text(json.dumps(metadata(cells)))
    assert (
        run_cli(
            "bake-import", "--metadata-file", str(first), "-m", str(MATRIX), "--state-dir", str(state)
        ).exit_code
        == 0
    )
    second = tmp_path / "two.json"
    again = metadata([cells[1]])
    entry = again[bake_target_name(cells[1])]
    assert isinstance(entry, dict)
    entry["containerimage.digest"] = DIGEST_A
    second.write_text(json.dumps(again))
    result = run_cli(
        "bake-import", "--metadata-file", str(second), "-m", str(MATRIX), "--state-dir", str(state)
    )
    assert result.exit_code == 0, result.stderr
    by_id = {r.id: r for r in read_report(state).cells}
    assert [r.id for r in read_report(state).cells] == cells  # order kept
    assert by_id[cells[0]].image_digest == DIGEST_A
    assert by_id[cells[1]].image_digest == DIGEST_A  # replaced by the newer import


def test_unknown_targets_are_warned_about_and_not_recorded(tmp_path: Path) -> None:
    cell = load_plan(MATRIX).cells[0].id
    document = metadata([cell])
    document["someone-elses-target"] = {"containerimage.digest": DIGEST_B}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    result = run_cli(
        "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(tmp_path)
    )
    assert result.exit_code == 0, result.stderr
    assert "someone-elses-target is no cell" in result.stderr
    assert [r.id for r in read_report(tmp_path).cells] == [cell]


def test_bad_metadata_is_an_input_error(tmp_path: Path) -> None:
    cell = load_plan(MATRIX).cells[0].id
    cases = {
        "not-json.json": "{",
        "no-digest.json": json.dumps({bake_target_name(cell): {"image.name": "x"}}),
        "bad-digest.json": json.dumps({bake_target_name(cell): {"containerimage.digest": "sha256:12"}}),
        "only-warnings.json": json.dumps({"buildx.build.warnings": []}),
        "no-cell.json": json.dumps({"other": {"containerimage.digest": DIGEST_A}}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = run_cli(
            "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(tmp_path)
        )
        assert result.exit_code == 2, (name, result.stdout, result.stderr)
        assert "imagekit: error:" in result.stderr
    assert not (tmp_path / "report.json").exists()
    missing = run_cli("bake-import", "--metadata-file", str(tmp_path / "absent.json"), "-m", str(MATRIX))
    assert missing.exit_code == 2
    assert "--metadata-file" in missing.stderr


def test_a_bake_report_merges_with_a_build_report(tmp_path: Path) -> None:
    """bake-import names the matrix as `build` does, so merge-reports accepts both."""
    plan = load_plan(MATRIX)
    cells = [c.id for c in plan.cells[:2]]
    path = tmp_path / "bake-metadata.json"
    path.write_text(json.dumps(metadata([cells[0]])))
    baked = tmp_path / "baked"
    assert (
        run_cli(
            "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(baked)
        ).exit_code
        == 0
    )
    built = tmp_path / "built"
    build_report = replace(
        read_report(baked), matrix=plan.source_name, engine="unix:///var/run/docker.sock",
        cells=(replace(read_report(baked).cells[0], id=cells[1]),),
    )  # fmt: skip
    write_report(built, build_report)
    merged = tmp_path / "merged"
    result = run_cli("merge-reports", str(baked), str(built), "--state-dir", str(merged))
    assert result.exit_code == 0, result.stderr
    assert [r.id for r in read_report(merged).cells] == cells


HOSTILE_METADATA: dict[str, tuple[object, str]] = {
    "target name forging an error line": (
        {"x\nimagekit: error: all good": {"containerimage.digest": DIGEST_A}},
        "'x\\nimagekit: error: all good' holds a newline",
    ),
    "target name with markup": (
        {"<b>x</b>": {"containerimage.digest": DIGEST_A}},
        "'<b>x</b>' is not a bake",
    ),
    "digest with a command": ({"t": {"containerimage.digest": "sha256:$(id)"}}, "containerimage.digest: "),
    "digest a number": ({"t": {"containerimage.digest": 12}}, "containerimage.digest: 12 is not a string"),
    "config digest wrong": (
        {"t": {"containerimage.digest": DIGEST_A, "containerimage.config.digest": ["x"]}},
        "containerimage.config.digest: ",
    ),
    "image name with a newline": (
        {"t": {"containerimage.digest": DIGEST_A, "image.name": "a/b:1,c/d:2\nFROM evil"}},
        "image.name: ",
    ),
    "image name far too long": (
        {"t": {"containerimage.digest": DIGEST_A, "image.name": "a/" + "b" * 600}},
        "image.name: is 602 characters long",
    ),
    "deeply nested": ({"t": {"containerimage.digest": DIGEST_A, "x": [[[[[[[[[[[[[]]]]]]]]]]]]]}}, ""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_METADATA))
def test_hostile_metadata_is_one_line_naming_the_target(case: str, tmp_path: Path) -> None:
    document, problem = HOSTILE_METADATA[case]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    result = run_cli(
        "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(tmp_path)
    )
    assert result.exit_code == 2, result
    assert result.stderr.startswith(f"imagekit: error: {path}") and result.stderr.count("\n") == 1, (
        result.stderr
    )
    assert problem in result.stderr
    assert not (tmp_path / "report.json").exists()


def test_metadata_nested_past_the_parser_limit_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("[" * 100_000)
    result = run_cli(
        "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(tmp_path)
    )
    assert result.exit_code == 2 and "not a readable bake metadata file" in result.stderr


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"buildx.build.warnings": NaN}', "expected value"),  # not JSON: bake never writes it
        ('{"a": {"containerimage.digest": "sha256:' + "0" * 64 + '"}, "a": 1}', "key 'a' is given twice"),
        ('{"a": {"x": 1, "x": 2}}', "key 'x' is given twice"),
    ],
    ids=["NaN", "a target twice", "a key twice inside a target"],
)
def test_metadata_that_is_not_strict_json_is_refused(text: str, problem: str, tmp_path: Path) -> None:
    # the last of two equal keys would silently win, and NaN is no JSON: both are refused
    path = tmp_path / "m.json"
    path.write_text(text)
    result = run_cli(
        "bake-import", "--metadata-file", str(path), "-m", str(MATRIX), "--state-dir", str(tmp_path)
    )
    assert result.exit_code == 2 and "not a readable bake metadata file" in result.stderr, result.stderr
    assert problem in result.stderr and not (tmp_path / "report.json").exists()


def test_metadata_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    result = run_cli(
        "bake-import",
        "--metadata-file",
        str(tmp_path / "fifo"),
        "-m",
        str(MATRIX),
        "--state-dir",
        str(tmp_path),
    )
    assert result.exit_code == 2 and "is a FIFO, not a regular file" in result.stderr


JSON = json_values(text_size=30, key_size=30, items=3, leaves=10)


@settings(max_examples=300, deadline=2000, derandomize=True)
@given(st.dictionaries(st.text(max_size=40), JSON, max_size=4) | JSON)
def test_any_metadata_reads_or_is_one_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: object
) -> None:
    path = tmp_path_factory.mktemp("bake") / "m.json"
    path.write_text(json.dumps(data))
    try:
        targets = read_metadata(path)
    except InputError as exc:
        assert "\n" not in exc.message
    else:  # what is accepted is what the types promise
        for name, target in targets.items():
            assert re.fullmatch(r"[A-Za-z0-9_-]+", name) and DIGEST.fullmatch(target.digest)
            assert all(is_reference(n) for n in target.names)


def test_a_target_two_cells_map_to_is_refused_naming_both(tmp_path: Path) -> None:
    """Bake target names fold '.' into '_': a target that is the name of two cells would record
    its digest for whichever came last; refused, naming both cells. A folded pair whose target
    is not in the file is no one's concern."""
    from types import SimpleNamespace

    from imagekit.export.bake_import import BakeTarget, results_from_bake

    plan = load_plan(MATRIX)
    real = Renderer(plan).render_all()[0]
    twin = SimpleNamespace(cell=SimpleNamespace(id=real.cell.id.replace(".", "_")))
    assert bake_target_name(twin.cell.id) == bake_target_name(real.cell.id) and twin.cell.id != real.cell.id
    target = BakeTarget(bake_target_name(real.cell.id), DIGEST_A, CONFIG_A, ())
    for rendered in ([real, twin], [twin, real]):
        with pytest.raises(InputError) as refused:
            results_from_bake({target.name: target}, rendered, plan.matrix.publish, today())  # type: ignore[arg-type]
        assert f"{real.cell.id}" in str(refused.value) and f"{twin.cell.id}" in str(refused.value)
    results, unknown = results_from_bake({}, [real, twin], plan.matrix.publish, today())  # type: ignore[arg-type]
    assert results == [] and unknown == []


# -- the image id and the staging of each metadata shape (buildkit-35 notes 3.4, dockerd 26) --------

MANIFEST = "sha256:" + "1" * 64
INDEX = "sha256:" + "2" * 64
CONFIG = "sha256:" + "3" * 64
OCI_MANIFEST = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": MANIFEST, "size": 753}
SHAPES: dict[str, tuple[dict[str, object], str, str]] = {
    # shape: (the target's entry less image.name, the id the engine holds, the image id recorded)
    "containerd --load, provenance: an index, no config digest": (
        {
            "containerimage.descriptor": {
                "mediaType": "application/vnd.oci.image.index.v1+json", "digest": INDEX, "size": 855
            },
            "containerimage.digest": INDEX,
        },
        INDEX,
        INDEX,
    ),
    "containerd --load, no provenance": (
        {"containerimage.config.digest": CONFIG, "containerimage.descriptor": {
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": MANIFEST,
            "size": 696,
        }, "containerimage.digest": MANIFEST},
        MANIFEST,
        MANIFEST,
    ),
    "containerd, an OCI tar loaded": (
        {"containerimage.config.digest": CONFIG, "containerimage.descriptor": OCI_MANIFEST,
         "containerimage.digest": MANIFEST},
        MANIFEST,
        MANIFEST,
    ),
    "containerd, pushed (type=image,push=true)": (
        {"containerimage.config.digest": CONFIG, "containerimage.descriptor": OCI_MANIFEST,
         "containerimage.digest": MANIFEST},
        MANIFEST,
        MANIFEST,
    ),
    "overlay2 --load: the digest is the config's, no descriptor": (
        {"containerimage.config.digest": CONFIG, "containerimage.digest": CONFIG},
        CONFIG,
        CONFIG,
    ),
    "overlay2, pushed": (
        {"containerimage.config.digest": CONFIG, "containerimage.digest": MANIFEST},
        CONFIG,
        CONFIG,
    ),
    "no engine to ask, pushed: the config digest": (
        {"containerimage.config.digest": CONFIG, "containerimage.descriptor": OCI_MANIFEST,
         "containerimage.digest": MANIFEST},
        "",
        CONFIG,
    ),
    "no engine to ask, an index: its digest": (
        {"containerimage.digest": INDEX},
        "",
        INDEX,
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_each_metadata_shape_records_the_id_the_engine_shows_and_the_staged_digest(
    shape: str, tmp_path: Path
) -> None:
    from imagekit.export.bake_import import results_from_bake

    entry, held, image_id = SHAPES[shape]
    plan = load_plan(MATRIX)
    publish = plan.matrix.publish.model_copy(update={"registry": "127.0.0.1:5000"})
    item = Renderer(plan).render_all()[0]
    tag = staging_tag(item.input_digest)
    staging = f"127.0.0.1:5000/{publish.staging_repository}:{tag}"
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({bake_target_name(item.cell.id): {**entry, "image.name": staging}}))
    digest = str(entry["containerimage.digest"])
    asked: list[tuple[str, str]] = []

    def registry(repository: str, tag: str) -> str | None:
        asked.append((repository, tag))
        return digest if "pushed" in shape else None

    (result,), _ = results_from_bake(
        read_metadata(path), [item], publish, today(), lambda d: d == held, registry
    )
    assert result.image_id == image_id
    assert result.image_digest == digest
    assert asked == [(publish.staging_repository, tag)]
    if "pushed" in shape:  # what verify --pull pulls and publish promotes
        assert result.staged is not None
        assert result.staged.reference == f"127.0.0.1:5000/{publish.staging_repository}@{digest}"
    else:  # loaded, never pushed: the registry's tag names another image, or none
        assert result.staged is None


def test_a_target_bake_did_not_name_by_its_staging_tag_is_not_looked_up(tmp_path: Path) -> None:
    from imagekit.export.bake_import import results_from_bake

    plan = load_plan(MATRIX)
    publish = plan.matrix.publish.model_copy(update={"registry": "127.0.0.1:5000"})
    path = tmp_path / "meta.json"
    cells = [c.id for c in plan.cells[:1]]
    path.write_text(json.dumps(metadata(cells)))  # image.name: another reference

    def registry(repository: str, tag: str) -> str | None:
        raise AssertionError("asked")

    (result,), _ = results_from_bake(
        read_metadata(path), Renderer(plan).render_all(), publish, today(), lambda _: False, registry
    )
    assert result.staged is None and result.image_id == CONFIG_A


def test_an_engine_out_of_reach_is_one_warning_and_the_import_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imagekit.export.bake_import import lookups

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    said: list[str] = []
    with lookups(None, said.append) as (holds, staged_digest):
        assert holds("sha256:" + "a" * 64) is False
        assert holds("sha256:" + "b" * 64) is False  # asked once: the second question warns of nothing
        assert staged_digest("team/torch", "staging-x") is None  # no registry: nothing staged
    assert len(said) == 1, said
    assert said[0].startswith("bake-import: no engine to ask which image id it shows (cannot reach")
    assert said[0].endswith("; recorded from the metadata file alone")
