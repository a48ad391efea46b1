"""Pull cost from manifests alone: totals, the largest layer's step, shared bytes, the matrix line,
and the registry's word refused where it is absurd (one line, never a crash)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.core import platforms
from imagekit.core.errors import InputError, RegistryError
from imagekit.core.limits import LAYER_BYTES_MAX, MAX_IMAGE_LAYERS, STEP_CHARS
from imagekit.registry.manifest import DOCKER_CONFIG, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Manifest
from imagekit.report import pullcost
from imagekit.report.pullcost import (
    UNKNOWN_STEP,
    Blob,
    PullCost,
    matrix_pull,
    measure,
    pull_cost,
    with_shared,
)
from imagekit.report.store import BuildReport, CellResult, parse_report, write_report

AMD64 = platforms.get("linux/amd64")
BASE = "sha256:" + "b" * 64  # the layer both cells are built on
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def layer(blob: str, size: int) -> dict[str, Any]:
    return {"mediaType": LAYER_TYPE, "digest": blob, "size": size}


def history(*steps: str, empty: int = 0) -> list[dict[str, Any]]:
    made = [{"created_by": "ENV A=1", "empty_layer": True}] * empty
    return [*made, *({"created_by": s} for s in steps)]


def image(
    layers: Any, steps: Any = (), config: Any = None, media_type: str = DOCKER_MANIFEST
) -> tuple[Manifest, bytes]:
    """An image manifest of ``layers`` and its config's bytes (one diff_id per layer, ``steps``
    its history); ``config`` replaces the config descriptor."""
    count = len(layers) if isinstance(layers, list) else 0
    document = {
        "rootfs": {"type": "layers", "diff_ids": [digest(f"tar {i}") for i in range(count)]},
        "history": list(steps),
    }
    raw = json.dumps(document).encode()
    described = config or {"mediaType": DOCKER_CONFIG, "digest": digest_of(raw), "size": len(raw)}
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "config": described, "layers": layers})
    return Manifest(digest(body), media_type, body.encode()), raw


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_total_largest_layer_and_its_step() -> None:
    layers = [layer(BASE, 1000), layer(digest("torch"), 5000)]
    steps = history(
        "/bin/sh -c #(nop) ADD file:abc in /", "RUN /bin/sh -c pip install torch  # buildkit", empty=2
    )
    cost = pull_cost(*image(layers, steps), "here")
    assert cost.total == 6000 + cost.config.size
    assert cost.largest == Blob(digest("torch"), 5000)
    assert cost.largest_step == "RUN /bin/sh -c pip install torch # buildkit"


def test_a_layer_repeated_in_one_image_is_fetched_once() -> None:
    # a node's content store holds a blob by digest: the same tar at two places is one download
    # (containerd unpacks it at each place, a snapshot per chain, which is disk, not this figure)
    layers = [layer(BASE, 1000), layer(digest("torch"), 5000), layer(BASE, 1000)]
    cost = pull_cost(*image(layers, history("ADD base", "RUN pip", "ADD base")), "here")
    assert len(cost.layers) == 3 and cost.total == 6000 + cost.config.size
    assert cost.as_json()["total"] == cost.total
    # the config's digest named as a layer too is one blob as well
    twice = cost_of((digest("config c"), 10), (BASE, 7), config="c")
    assert twice.total == 17


@pytest.mark.parametrize(
    "config",
    [
        json.dumps({"history": history("only one step")}).encode(),  # two layers, one history entry
        json.dumps({"history": history("a", "b", "c")}).encode(),
        b"not json",
        json.dumps({"history": "a string"}).encode(),
        json.dumps({"history": [{"created_by": "a"}, "b"]}).encode(),
        json.dumps([1, 2]).encode(),
    ],
    ids=["short", "long", "not-json", "not-a-list", "not-an-entry", "not-an-object"],
)
def test_a_history_that_does_not_line_up_leaves_the_step_unknown(config: bytes) -> None:
    assert pullcost.steps(config, 2) == (UNKNOWN_STEP, UNKNOWN_STEP)


def test_a_short_history_leaves_the_largest_layers_step_unknown() -> None:
    found = pull_cost(*image([layer(BASE, 1), layer(digest("x"), 2)], history("only one step")), "here")
    assert found.largest_step == UNKNOWN_STEP


def test_a_step_is_one_printable_line_clipped() -> None:
    step = "RUN echo \x1b[31mred\nsecond line " + "x" * 1000
    found = pull_cost(*image([layer(BASE, 1)], history(step)), "here").largest_step
    assert "\n" not in found and "\x1b" not in found and len(found) == STEP_CHARS
    # two steps that differ only past the cut stay two: the floor keys layers by their step
    other = pull_cost(*image([layer(BASE, 1)], history(step + "y")), "here").largest_step
    assert other != found and other[:150] == found[:150]


def test_two_releases_deps_steps_that_differ_past_the_cut_count_twice_in_the_floor() -> None:
    """Before: the step was cut at 200 characters, so the other-dependencies steps of torch 2.2.2
    and 2.3.1 (their triton pins late in the line) were one key and the floor counted one of the
    two layers (bench/fixtures/pull-cost-three.json: 0.92x the bytes a node must fetch)."""
    prefix = (
        "RUN |2 SOURCE_DATE_EPOCH=1704067200 A=b /bin/sh -c pip install --no-deps --no-compile "
        + "x==1 " * 40
    )

    def cell(name: str, triton: str) -> PullCost:
        manifest, config = image(
            [layer(BASE, 1000), layer(digest(name), 300)],
            history("ADD file:x in /", f"{prefix}triton=={triton}"),
        )
        return pull_cost(manifest, config, name)

    summary = matrix_pull([cell("a", "2.2.0"), cell("b", "2.3.1")])
    assert summary is not None and summary.floor == summary.distinct


@pytest.mark.parametrize(
    ("layers", "config", "said"),
    [
        ([layer(BASE, -1)], None, "says it is -1 bytes"),
        ([layer(BASE, 2**63)], None, "says it is 9,223,372,036,854,775,808 bytes"),
        ([{**layer(BASE, 1), "size": True}], None, "a JSON bool, not an integer"),
        ([{**layer(BASE, 1), "size": 1.5}], None, "a JSON float, not an integer"),
        ([{**layer(BASE, 1), "size": "12"}], None, "a JSON str, not an integer"),
        ([{"mediaType": LAYER_TYPE, "digest": BASE}], None, "a JSON NoneType, not an integer"),
        ([layer(BASE, LAYER_BYTES_MAX + 1)], None, f"between 0 and {LAYER_BYTES_MAX:,}"),
        ([layer("sha256:short", 1)], None, "layers[0] names no sha256 digest"),
        ([{"digest": BASE, "size": 1}], None, "layers[0] has no media type"),
        ([{**layer(BASE, 1), "mediaType": "text/html"}], None, "layers[0] is a 'text/html', which no image"),
        (["a string"], None, "layers[0] is no descriptor"),
        ([], {"mediaType": DOCKER_CONFIG, "digest": BASE, "size": 10**20}, "its config says it is"),
        ([], {"mediaType": "text/plain", "digest": BASE, "size": 1}, "its config is a 'text/plain'"),
        ({"not": "a list"}, None, "layers are not a list"),
    ],
    ids=[
        "negative", "2**63", "bool", "float", "string", "missing", "huge", "digest", "no-type", "html",
        "entry", "config", "config-type", "list",
    ],
)  # fmt: skip
def test_absurd_sizes_and_descriptors_are_one_registry_error(layers: Any, config: Any, said: str) -> None:
    with pytest.raises(RegistryError, match="its pull cost is not counted") as caught:
        pull_cost(*image(layers, config=config), "reg/acme@sha256:1")
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("reg/acme@sha256:1: ")


def test_a_config_that_is_not_the_manifests_is_one_registry_error() -> None:
    manifest, raw = image([layer(BASE, 1)])
    fewer = json.dumps({"rootfs": {"type": "layers", "diff_ids": []}}).encode()
    with pytest.raises(RegistryError, match="another digest than"):
        pull_cost(manifest, fewer, "here")  # the config blob named is not these bytes
    described = {"mediaType": DOCKER_CONFIG, "digest": digest_of(fewer), "size": len(fewer)}
    with pytest.raises(RegistryError, match="its config lists 0 diff_ids for the manifest's 1 layers"):
        pull_cost(image([layer(BASE, 1)], config=described)[0], fewer, "here")
    assert pull_cost(manifest, raw, "here").total == 1 + len(raw)


def test_too_many_layers_are_refused_before_any_is_read() -> None:
    layers = [layer(BASE, 1)] * (MAX_IMAGE_LAYERS + 1)
    with pytest.raises(RegistryError, match=f"names {MAX_IMAGE_LAYERS + 1:,} layers, more than the"):
        pull_cost(*image(layers), "here")
    assert len(pull_cost(*image(layers[:MAX_IMAGE_LAYERS]), "here").layers) == MAX_IMAGE_LAYERS


def cost_of(*layers: tuple[str, int], config: str = "cfg") -> PullCost:
    return PullCost(
        digest("m" + config), Blob(digest("config " + config), 10), tuple(Blob(d, s) for d, s in layers)
    )


def test_shared_bytes_and_the_matrix_line() -> None:
    a = cost_of((BASE, 1000), (digest("a"), 300), config="a")
    b = cost_of((BASE, 1000), (digest("b"), 500), (BASE, 1000), config="b")  # a digest twice in one image
    c = cost_of((digest("c"), 7), config="c")
    shared = with_shared({"a": a, "b": b, "c": c})
    assert (shared["a"].shared, shared["b"].shared, shared["c"].shared) == (1000, 1000, 0)
    summary = matrix_pull(shared.values())
    assert summary is not None
    # each image's own total fetches its repeated layer once, as the node does
    assert summary.summed == a.total + b.total + c.total == 1310 + 1510 + 17
    assert summary.distinct == 1000 + 300 + 500 + 7 + 3 * 10 < summary.summed
    assert matrix_pull([]) is None


class Reader:
    """A registry answering one image; ``length`` is its HEAD answer for any blob."""

    def __init__(self, image: tuple[Manifest, bytes], length: int | None) -> None:
        self.image = image
        self.length = length
        self.heads: list[str] = []

    def image_for(self, repository: str, digest: str, platform: Any) -> tuple[Manifest, bytes]:
        return self.image

    def blob_length(self, repository: str, digest: str) -> int | None:
        self.heads.append(digest)
        return self.length


def test_the_largest_layer_is_checked_against_the_registrys_head() -> None:
    image_of = image([layer(BASE, 10), layer(digest("big"), 90)], history("a", "RUN big"))
    reader = Reader(image_of, 90)
    assert measure(reader, "acme", image_of[0].digest, AMD64, "here").largest_step == "RUN big"
    assert reader.heads == [digest("big")]
    for answer, said in ((91, "answers 91 bytes"), (None, "answers no Content-Length")):
        with pytest.raises(RegistryError, match=f"{said} for layer sha256:.*descriptor says 90;"):
            measure(Reader(image_of, answer), "acme", image_of[0].digest, AMD64, "here")


def test_an_index_resolves_to_the_cells_platform() -> None:
    from imagekit.registry.client import Registry

    amd, config = image([layer(BASE, 5)], media_type=OCI_MANIFEST)
    arm, _ = image([layer(digest("arm"), 6)], media_type=OCI_MANIFEST)
    index_body = json.dumps({
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": arm.digest,
             "platform": {"architecture": "arm64", "os": "linux"}},
            {"mediaType": OCI_MANIFEST, "digest": amd.digest,
             "platform": {"architecture": "amd64", "os": "linux"}},
        ],
    }).encode()  # fmt: skip
    index = Manifest(digest("index"), OCI_INDEX, index_body)

    class Memory:
        host = "reg"
        image_for = Registry.image_for

        def get_manifest(self, repository: str, reference: str) -> Manifest:
            return {index.digest: index, amd.digest: amd, arm.digest: arm}[reference]

        def get_blob(self, repository: str, digest: str) -> bytes:
            return config

    found, _ = Memory().image_for("acme", index.digest, AMD64)
    assert found == amd
    with pytest.raises(RegistryError, match="is an index with no image for linux/riscv64"):
        Memory().image_for("acme", index.digest, replace(AMD64, name="linux/riscv64", arch="riscv64"))


# -- the record in the report -----------------------------------------------------------------------


def report_with(cost: PullCost | None) -> BuildReport:
    cell = CellResult(id="c", kind="cell", status="built", base_image="b", pull_cost=cost)
    return BuildReport("m.yaml", "2026-01-01T00:00:00Z", 1.0, "unix://", (cell,), ())


def test_the_record_round_trips_and_older_reports_have_none(tmp_path: Path) -> None:
    cost = cost_of((BASE, 1000), (digest("a"), 300))
    write_report(tmp_path, report_with(cost).with_pull_costs({}))
    read = parse_report((tmp_path / "report.json").read_bytes(), tmp_path / "report.json")
    assert read.cells[0].pull_cost == cost
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["cells"][0]["pull_cost"]["total"] == 1310
    assert document["cells"][0]["pull_cost"]["largest_size"] == 1000
    assert document["pull"] == {
        "cells": 1, "distinct": 1310, "summed": 1310, "floor": 1310, "chains": 2, "chain_bytes": 1300,
    }  # fmt: skip
    stepped = replace(cost, steps=("ADD x", "RUN pip install torch==2.1.2"))
    write_report(tmp_path, report_with(stepped).with_pull_costs({}))
    again = parse_report((tmp_path / "report.json").read_bytes(), tmp_path / "report.json")
    assert again.cells[0].pull_cost == stepped
    document = json.loads((tmp_path / "report.json").read_text())
    del document["cells"][0]["pull_cost"]["steps"]  # a record of the release before steps
    assert parse_report(json.dumps(document).encode(), tmp_path / "r").cells[0].pull_cost == cost
    del document["cells"][0]["pull_cost"], document["pull"]  # a report of an earlier release
    older = parse_report(json.dumps(document).encode(), tmp_path / "report.json")
    assert older.cells[0].pull_cost is None and older.pull() is None


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("layers", 0, "size"), -5),
        (("layers", 0, "size"), True),
        (("layers", 0, "size"), LAYER_BYTES_MAX + 1),
        (("layers", 0, "digest"), "sha256:nothex"),
        (("layers",), [{"digest": BASE, "size": 1}] * (MAX_IMAGE_LAYERS + 1)),
        (("shared",), -1),
        (("largest_step",), "x" * 5000),
    ],
    ids=["negative", "bool", "huge", "digest", "too-many", "shared", "step"],
)
def test_an_edited_pull_cost_in_a_report_is_refused(
    tmp_path: Path, path: tuple[Any, ...], value: Any
) -> None:
    write_report(tmp_path, report_with(cost_of((BASE, 1000))))
    document = json.loads((tmp_path / "report.json").read_text())
    target = document["cells"][0]["pull_cost"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InputError, match="pull_cost"):
        parse_report(json.dumps(document).encode(), tmp_path / "report.json")


def test_gib() -> None:
    assert pullcost.gib(8 << 30) == "8.00 GiB" and pullcost.gib(512 << 20) == "512.0 MiB"
    assert pullcost.gib(1023) == "1,023 bytes"


def test_text_markdown_and_html_show_each_cell_and_the_matrix_line() -> None:
    from imagekit.report.html import render_html
    from imagekit.report.text import markdown, pull_line, pull_rows

    a = replace(cost_of((BASE, 3 << 30), (digest("a"), 1 << 30), config="a"), largest_step="<b>RUN|x</b>")
    b = cost_of((BASE, 3 << 30), (digest("b"), 2 << 30), config="b")
    cells = tuple(
        CellResult(id=name, kind="cell", status="built", base_image="b", pull_cost=cost)
        for name, cost in (("a", a), ("b", b), ("never-staged", None))
    )
    report = BuildReport("m.yaml", "2026-01-01T00:00:00Z", 1.0, "unix://", cells, ()).with_pull_costs({})
    assert pull_rows(report) == [
        ("a", "4.00 GiB", "3.00 GiB", "<b>RUN|x</b>", "3.00 GiB"),
        ("b", "5.00 GiB", "3.00 GiB", UNKNOWN_STEP, "3.00 GiB"),
    ]
    line = pull_line(report)
    assert line == (
        "pull: a fresh node fetches 6.00 GiB to run all 2 counted cells, against 9.00 GiB for the"
        " images one by one (0.67x) and a floor of 6.00 GiB (1.00x); it unpacks 3 layer snapshots"
        " (6.00 GiB compressed, each layer once per chain of parents)"
    )
    text = markdown(report)
    assert "#### pull cost" in text and line in text and "&lt;b&gt;RUN\\|x&lt;/b&gt;" in text
    page = render_html(report)
    assert '<section id="pull">' in page and line in page and "&lt;b&gt;RUN|x&lt;/b&gt;" in page
    none = BuildReport("m.yaml", "2026-01-01T00:00:00Z", 1.0, "unix://", cells[2:], ())
    assert (
        pull_line(none) is None and "pull cost" not in markdown(none) and 'id="pull"' not in render_html(none)
    )


def test_a_skipped_cell_keeps_the_pull_cost_of_the_same_staged_image() -> None:
    from imagekit.report.store import Staged

    staged = Staged("reg:5000", "acme", "staging-ffffffffffff", "sha256:" + "5" * 64)
    cost = cost_of((BASE, 1000))
    image = "sha256:" + "e" * 64
    before = CellResult(id="c", kind="cell", status="built", base_image="b", image_id=image, staged=staged)
    previous = BuildReport("m", "2026-01-01T00:00:00Z", 1.0, "u", (replace(before, pull_cost=cost),), ())
    again = replace(before, status="skipped")
    kept = BuildReport("m", "2026-01-01T00:00:00Z", 1.0, "u", (again,), ()).keeping_verifications(previous)
    assert kept.cells[0].pull_cost == cost
    other = replace(again, staged=replace(staged, digest="sha256:" + "6" * 64))  # staged anew, not counted
    fresh = BuildReport("m", "2026-01-01T00:00:00Z", 1.0, "u", (other,), ()).keeping_verifications(previous)
    assert fresh.cells[0].pull_cost is None


def test_imagekit_report_shows_the_pull_table_and_json(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    write_report(tmp_path, report_with(cost_of((BASE, 3 << 30), (digest("a"), 1 << 30))).with_pull_costs({}))
    table = run_cli("report", "--state-dir", str(tmp_path))
    assert table.exit_code == 0, table.stderr
    assert "pull: a fresh node fetches 4.00 GiB" in " ".join(table.stdout.split())
    assert "largest layer" in table.stdout and "3.00 GiB" in table.stdout
    document = json.loads(run_cli("report", "--state-dir", str(tmp_path), "--json").stdout)
    assert document["pull"]["distinct"] == document["cells"][0]["pull_cost"]["total"] == (4 << 30) + 10
    assert document["pull"]["floor"] == (4 << 30) + 10 and document["pull"]["chains"] == 2


def test_the_floor_counts_each_exact_pin_step_once_per_python_and_machine() -> None:
    """Three cells on one base: two of one Python whose cuBLAS layers differ in digest (built
    apart, not reproducibly) and one of another Python. The floor counts the cuBLAS step once for
    the first two and again for the third (its site-packages path differs); the base once; the
    torch steps once per release. Unpacking counts the chains: a shared layer over different
    parents is unpacked again."""
    venv310, venv312 = "RUN python3.10 -m venv /opt/venv", "RUN python3.12 -m venv /opt/venv"
    cublas = "RUN pip install --no-deps --no-compile nvidia-cublas-cu12==12.1.3.1"

    def cell(name: str, venv: str, blas: str, torch: str) -> PullCost:
        made = (BASE, 1000), (digest(venv), 5), (digest(blas), 300), (digest(name), 700)
        steps = ("ADD file:x in /", venv, cublas, f"RUN pip install torch=={torch}")
        return replace(cost_of(*made, config=name), steps=steps)

    first = cell("first", venv310, "blas once", "2.2.2")
    second = cell("second", venv310, "blas again", "2.3.1")  # the same step, another digest
    third = cell("third", venv312, "blas 3.12", "2.2.2")
    summary = matrix_pull([first, second, third])
    assert summary is not None
    assert summary.distinct == 1000 + 5 + 5 + 300 * 3 + 700 * 3 + 30
    # base once, each venv once, cuBLAS once per Python, torch once per release and Python
    assert summary.floor == 1000 + 5 + 5 + 300 * 2 + 700 * 3 + 30 < summary.distinct
    # chains: the base, then each cell's own path (the venv 3.10 layer shared by two cells)
    assert summary.chains == 1 + 2 + 3 + 3 and summary.chain_bytes == 1000 + 5 * 2 + 300 * 3 + 700 * 3
    # a record of an earlier release (no steps) is counted by digest: the floor is its distinct bytes
    old = matrix_pull([replace(first, steps=()), replace(second, steps=())])
    assert old is not None and old.floor == old.distinct
    # the step of each layer is recorded when the cost is read
    manifest, config = image([layer(BASE, 10), layer(digest("t"), 20)], history("ADD x", cublas))
    assert pull_cost(manifest, config, "here").steps == ("ADD x", cublas)
