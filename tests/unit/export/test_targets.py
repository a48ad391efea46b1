"""`imagekit matrix --format github|json|bake`: what other engines are handed."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.core.clock import REPRODUCIBLE_EPOCH
from imagekit.export.targets import (
    GITHUB_MAX_JOBS,
    bake_file,
    bake_netrc_hint,
    bake_target_name,
    github_matrix,
)
from imagekit.plan import source
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.plan.source import source_state
from imagekit.render.dockerfile import RenderedCell, Renderer
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE as BARE_CUDA_BASE
from tests.conftest import REPO, CliResult, run_cli
from tests.unit.plan.test_source import git

# The cells here are torch 2.1, about bake targets: their advisories are waived.
CUDA_BASE = BARE_CUDA_BASE + WAIVE_OLD_TORCH

BAKE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def test_github_format_is_one_line_of_every_cell() -> None:
    result = run_cli("matrix", "--matrix", str(REPO / "matrix.yaml"), "--format", "github")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") == 1  # one line, as $GITHUB_OUTPUT needs
    document = json.loads(result.stdout)
    plan = load_plan(REPO / "matrix.yaml")
    assert [e["id"] for e in document["include"]] == [c.id for c in plan.cells]
    first = document["include"][0]
    assert set(first) == {"id", "torch", "cuda", "python", "flavour", "base", "os", "platform", "arch"}
    assert (first["platform"], first["arch"]) == (plan.cells[0].platform, "amd64")
    assert all(isinstance(v, str) for e in document["include"] for v in e.values())


def test_github_format_only_filters_and_refuses_an_empty_selection() -> None:
    result = run_cli("matrix", "-m", str(REPO / "matrix.yaml"), "-f", "github", "--only", "*runtime")
    ids = [e["id"] for e in json.loads(result.stdout)["include"]]
    assert ids and all(i.endswith("runtime") for i in ids)
    none = run_cli("matrix", "-m", str(REPO / "matrix.yaml"), "-f", "github", "--only", "nothing*")
    assert none.exit_code == 2
    assert "matches no cell" in none.stderr


def test_github_matrix_refuses_more_jobs_than_github_runs() -> None:
    cell = load_plan(REPO / "matrix.yaml").cells[0]
    cells = [replace(cell, id=f"c{i}") for i in range(GITHUB_MAX_JOBS + 1)]
    with pytest.raises(Exception, match="at most 256 jobs"):
        github_matrix(cells)
    assert len(github_matrix(cells[:GITHUB_MAX_JOBS])["include"]) == GITHUB_MAX_JOBS


def test_json_format_carries_tags_digests_and_build_labels() -> None:
    result = run_cli("matrix", "-m", str(REPO / "matrix.yaml"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    plan = load_plan(REPO / "matrix.yaml")
    rendered = {r.cell.id: r for r in Renderer(plan).render_all()}
    assert len(document["cells"]) == len(plan.cells)
    for entry in document["cells"]:
        item = rendered[entry["id"]]
        assert entry["input_digest"] == item.input_digest
        # the checkout's created (revision and source where it has them), as `imagekit build` labels
        assert entry["build_labels"] == item.build_labels(source_state(REPO))
        assert "org.opencontainers.image.created" in entry["build_labels"]
        assert entry["tags"][0].endswith(":" + item.cell.image_tag)
        assert entry["tags"][0].startswith(document["repository"] + ":")


def _export_bake(tmp_path: Path, cell_id: str) -> CliResult:
    args = ("matrix", "-m", str(REPO / "matrix.yaml"), "-f", "bake", "--context-dir", str(tmp_path / "bake"))
    return run_cli(*args, "--only", cell_id)


def test_bake_replaces_a_stale_context(tmp_path: Path) -> None:
    cell = load_plan(REPO / "matrix.yaml").cells[0]
    assert _export_bake(tmp_path, cell.id).exit_code == 0
    stale = tmp_path / "bake" / cell.id / "left-over.txt"
    stale.write_text("old")
    result = _export_bake(tmp_path, cell.id)
    assert result.exit_code == 0, result.stderr
    assert not stale.exists()
    assert (stale.parent / "Dockerfile").is_file()
    # imagekit's own check script is copied, not linked: editing the context edits nothing else
    assert (stale.parent / "imagekit-check.py").stat().st_nlink == 1


@pytest.mark.parametrize("kind", ["a directory of someone's files", "a FIFO as its Dockerfile"])
def test_bake_never_removes_a_directory_it_did_not_write(kind: str, tmp_path: Path) -> None:
    cell = load_plan(REPO / "matrix.yaml").cells[0]
    theirs = tmp_path / "bake" / cell.id
    if kind.startswith("a directory"):
        (theirs / "Dockerfile").mkdir(parents=True)
        (theirs / "Dockerfile" / "notes.txt").write_text("mine")
    else:
        theirs.mkdir(parents=True, exist_ok=True)
        os.mkfifo(theirs / "Dockerfile")  # reading it would block; it must not be opened
    before = sorted(str(p.relative_to(tmp_path)) for p in theirs.rglob("*"))
    result = _export_bake(tmp_path, cell.id)
    assert result.exit_code == 2, result.stderr
    assert "is not a bake context imagekit wrote" in result.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in theirs.rglob("*")) == before


def test_bake_builds_a_local_base_first_through_a_target_context(
    tmp_path: Path, write_matrix: Callable[[str], Path]
) -> None:
    (tmp_path / "bases" / "deb").mkdir(parents=True)
    (tmp_path / "bases" / "deb" / "Dockerfile").write_text("FROM debian:bookworm\n")
    matrix = write_matrix(
        """
        version: 1
        axes: {torch: ["2.13.0"], cuda: [cpu], base: [deb]}
        bases:
          deb:
            image: "imagekit-local/deb:1"
            build: {context: bases/deb}
            os: debian12
            python: "3.11"
        """
    )
    result = run_cli("matrix", "-m", str(matrix), "-f", "bake", "--context-dir", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.stderr
    bake = json.loads(result.stdout)
    base = bake["target"]["base-deb"]
    assert base["tags"] == ["imagekit-local/deb:1"]
    assert Path(base["context"]) == tmp_path / "bases" / "deb"
    (cell_target,) = (t for n, t in bake["target"].items() if n != "base-deb")
    assert cell_target["contexts"] == {"imagekit-local/deb:1": "target:base-deb"}
    assert "base-deb" not in bake["group"]["default"]["targets"]


def test_unknown_format_is_a_usage_error() -> None:
    result = run_cli("matrix", "-m", str(REPO / "matrix.yaml"), "-f", "hcl")
    assert result.exit_code == 2


def test_cuda_base_fixture_renders(write_matrix: Callable[[str], Path]) -> None:
    matrix = write_matrix('version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n' + CUDA_BASE)
    github = json.loads(run_cli("matrix", "-m", str(matrix), "-f", "github").stdout)
    assert github == {
        "include": [
            {
                "id": "cuda-torch2.1.2-cuda12.1-py3.10-devel",
                "torch": "2.1.2",
                "cuda": "12.1",
                "python": "3.10",
                "flavour": "devel",
                "base": "cuda",
                "os": "ubuntu22.04",
                "platform": "linux/amd64",
                "arch": "amd64",
            }
        ]
    }


@pytest.mark.parametrize("name", ["../escaped.txt", "/etc/escaped.txt", "wheelhouse/../../escaped.txt", ""])
def test_a_context_path_that_leaves_the_cells_directory_is_refused(name: str, tmp_path: Path) -> None:
    from imagekit.core.errors import InputError
    from imagekit.export.targets import materialise_context

    plan = load_plan(REPO / "matrix.yaml")
    source = tmp_path / "payload"
    source.write_text("x")
    rendered = replace(Renderer(plan).render_all()[0], context_files=((name, source),))
    root = tmp_path / "bake"
    with pytest.raises(InputError, match=r"context path .* leaves its directory"):
        materialise_context(rendered, root / "cell", root)
    assert not (tmp_path / "escaped.txt").exists() and not (root / "escaped.txt").exists()


def test_two_cells_that_would_be_one_bake_target_are_refused_naming_both(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    """Bake target names turn dots into underscores: one target would silently build the other."""
    from imagekit.core.errors import InputError
    from imagekit.export.targets import bake_file

    matrix = write_matrix('version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n' + CUDA_BASE)
    plan = load_plan(matrix)
    (item,) = Renderer(plan).render_all()
    twin = replace(item, cell=replace(item.cell, id=item.cell.id.replace("py3.10", "py3_10")))
    both = f"{re.escape(item.cell.id)} and {re.escape(twin.cell.id)} map to one"
    with pytest.raises(InputError, match=both):
        bake_file(plan, [item, twin], tmp_path / "contexts")


BUILDKIT_ZSTD = "build: {builder: buildkit, compression: zstd}\n"
CREDENTIALS = (
    "sources:\n  pip:\n    index_url: https://pypi.example.org/simple\n"
    "    credentials: [{host: pypi.example.org, login: ci-reader, secret: pip-index}]\n"
)


def _bakeable(plan: Plan) -> list[RenderedCell]:
    """The plan's renders with every step offline, as examples/offline renders for BuildKit
    (tests/unit/render/test_run_options.py): the renders bake 0.13.1 can build."""
    rendered = Renderer(plan).render_all()
    return [replace(r, dockerfile=r.dockerfile.replace("--network=host", "--network=none")) for r in rendered]


def test_a_buildkit_bake_target_carries_no_provenance_the_netrc_secret_the_cache_and_a_pushed_output(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    axes = 'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda], frontend: [none, jupyter]}\n'
    publish = "publish: {repository: team/pytorch, registry: 127.0.0.1:5000}\n"
    plan = load_plan(write_matrix(axes + BUILDKIT_ZSTD + publish + CREDENTIALS + CUDA_BASE))
    bake = bake_file(plan, _bakeable(plan), tmp_path / "ctx")
    assert len(bake["group"]["default"]["targets"]) == len(plan.cells) == 2
    for cell in plan.cells:
        target = bake["target"][bake_target_name(cell.id)]
        staging = target["tags"][0]
        assert staging.startswith("127.0.0.1:5000/team/pytorch:staging-")
        assert target["attest"] == ["type=provenance,disabled=true"]
        assert target["args"]["SOURCE_DATE_EPOCH"] == str(REPRODUCIBLE_EPOCH)  # as imagekit build sets it
        assert "org.opencontainers.image.created" not in target["labels"]  # no checkout: no time invented
        assert target["secret"] == ["id=imagekit-pip-netrc,env=IMAGEKIT_PIP_NETRC"]
        # the very cache `imagekit build --builder buildkit --push` reads and writes
        cache = f"127.0.0.1:5000/team/pytorch/buildcache:{cell.image_tag}"
        assert target["cache-from"] == [f"type=registry,ref={cache}"]
        cache_to = f"type=registry,ref={cache},mode=max,oci-mediatypes=true,ignore-error=true"
        assert target["cache-to"] == [cache_to]
        assert target["output"] == [
            f"type=image,name={staging},push=true,compression=zstd,force-compression=true,oci-mediatypes=true"
        ]
        assert not {"inherits", "network", "entitlements"} & set(target), cell.id
    # how to give the netrc, with no value anywhere
    hint = bake_netrc_hint(plan)
    assert hint is not None and "IMAGEKIT_PIP_NETRC" in hint
    assert "machine pypi.example.org login ci-reader password $IMAGEKIT_SECRET_PIP_INDEX" in hint


def test_a_buildkit_bake_target_without_registry_or_credentials_caches_and_pushes_nothing(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    axes = 'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n'
    plan = load_plan(write_matrix(axes + "build: {builder: buildkit}\n" + CUDA_BASE))
    bake = bake_file(plan, _bakeable(plan), tmp_path / "ctx")
    (target,) = bake["target"].values()
    # BuildKit's default compression, zstd (issue 49), forced so no cached gzip blob is reused
    assert target["output"] == [
        f"type=image,name={target['tags'][0]},compression=zstd,force-compression=true,oci-mediatypes=true"
    ]
    gzip = load_plan(write_matrix(axes + "build: {builder: buildkit, compression: gzip}\n" + CUDA_BASE))
    (target,) = bake_file(gzip, _bakeable(gzip), tmp_path / "ctx-gzip")["target"].values()
    assert target["output"] == [f"type=image,name={target['tags'][0]},compression=gzip,oci-mediatypes=true"]
    assert not {"cache-from", "cache-to", "secret"} & set(target)
    assert bake_netrc_hint(plan) is None


def test_a_buildkit_cell_with_a_host_network_step_is_refused_for_bake_in_one_line(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    """bake 0.13.1 drops `network`/`entitlements` and has no --allow: such a step cannot build."""
    matrix = write_matrix(
        'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n' + BUILDKIT_ZSTD + CUDA_BASE
    )
    (cell,) = load_plan(matrix).cells
    result = run_cli("matrix", "-m", str(matrix), "-f", "bake", "--context-dir", str(tmp_path / "ctx"))
    assert result.exit_code == 2, result.stderr
    assert f"cell {cell.id}: its Dockerfile has a RUN --network=host step" in result.stderr
    assert "`imagekit build --builder buildkit` instead" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert not (tmp_path / "ctx").exists()  # refused before any context is written


def test_a_bake_target_from_a_committed_matrix_takes_the_commits_time_and_revision(
    write_matrix: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The created label is the commit's time; BuildKit's SOURCE_DATE_EPOCH (a build argument every
    RUN step sees, and the file times) stays fixed, so a new commit misses no cached step."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    axes = 'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n'
    publish = "publish: {repository: team/pytorch, registry: 127.0.0.1:5000}\n"
    path = write_matrix(axes + BUILDKIT_ZSTD + publish + CUDA_BASE)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", path.name)
    git(tmp_path, "commit", "-q", "-m", "matrix")
    source._checkout.cache_clear()
    plan = load_plan(path)
    (target,) = bake_file(plan, _bakeable(plan), tmp_path / "ctx")["target"].values()
    assert target["args"]["SOURCE_DATE_EPOCH"] == str(REPRODUCIBLE_EPOCH)
    assert target["labels"]["org.opencontainers.image.created"] == "2026-05-28T20:26:40Z"
    assert target["labels"]["org.opencontainers.image.revision"] == git(tmp_path, "rev-parse", "HEAD")
