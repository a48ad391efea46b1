"""The job graph of a build: local bases first, in dependency order, then the cells."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.builds.bases import ResolvedBase, local_base_froms
from imagekit.builds.jobs import BaseJob, CellJob, Job, base_jobs, built_from, cell_jobs
from imagekit.core.errors import InputError
from imagekit.plan.cells import Cell, LocalBase, Plan
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from testbed.sample_projects import TODAY, write_project
from tests.conftest import REPO

# -- the job graph of local bases ---------------------------------------------------------------------------


def plan_jobs(plan: Plan, cells: tuple[Cell, ...]) -> list[Job]:
    """The graph as the builder makes it: the bases, then each cell rendered (on its own base)."""
    renderer = Renderer(plan)
    bases = base_jobs(plan, cells, renderer.hasher)
    return [*bases, *cell_jobs(plan, cells, renderer.render_all(cells), {}, TODAY)]


def jobs_of(plan: Plan, tmp_path: Path, cells: tuple[Cell, ...] | None = None) -> dict[str, Job]:
    jobs = plan_jobs(plan, plan.cells if cells is None else cells)
    return {job.name: job for job in jobs}


CHAIN = {
    "outer": "FROM example/middle:dev\nRUN echo outer\n",
    "inner": "FROM busybox:latest\nRUN echo inner\n",
    "middle": "# FROM example/outer:dev is a comment\nfrom --platform=linux/amd64 example/inner:dev AS m\n",
}


def test_local_bases_come_first_in_dependency_order(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    jobs = jobs_of(plan, tmp_path)
    names = list(jobs)
    assert names[:3] == ["base-inner", "base-middle", "base-outer"]
    assert all(isinstance(jobs[n], BaseJob) for n in names[:3])
    assert all(isinstance(jobs[n], CellJob) for n in names[3:])
    assert jobs["base-inner"].depends_on == ()
    assert jobs["base-middle"].depends_on == ("base-inner",)
    assert jobs["base-outer"].depends_on == ("base-middle",)
    assert jobs["base-inner"].base_reference == "busybox:latest"
    assert jobs["base-middle"].base_reference == "example/inner:dev"
    for name in names[3:]:
        job = jobs[name]
        assert isinstance(job, CellJob)
        cell = job.rendered.cell
        assert job.depends_on == (f"base-{cell.base}",)
        assert job.base_reference == f"example/{cell.base}:dev"
    # Each base is built once, and the context digests tell the bases apart.
    digests = {j.context_digest for n in names[:3] if isinstance(j := jobs[n], BaseJob)}
    assert len(digests) == 3


def test_selecting_one_cell_still_builds_the_bases_it_derives_from(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    outer = tuple(c for c in plan.cells if c.base == "outer")
    jobs = jobs_of(plan, tmp_path, outer)
    assert list(jobs) == ["base-inner", "base-middle", "base-outer", outer[0].id]


def test_a_cell_on_a_leaf_base_needs_only_that_base(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    inner = tuple(c for c in plan.cells if c.base == "inner")
    assert list(jobs_of(plan, tmp_path, inner)) == ["base-inner", inner[0].id]


def test_a_loop_between_local_bases_is_an_input_error(tmp_path: Path) -> None:
    loop = {"a": "FROM example/b:dev\n", "b": "FROM example/c:dev\n", "c": "FROM example/a:dev\n"}
    plan = write_project(tmp_path, loop, ["a", "b", "c"])
    with pytest.raises(InputError, match=r"local bases derive from each other in a loop: a -> b -> c -> a"):
        jobs_of(plan, tmp_path)


def test_a_base_on_itself_is_a_loop(tmp_path: Path) -> None:
    plan = write_project(tmp_path, {"self": "FROM example/self:dev\n"}, ["self"])
    with pytest.raises(InputError, match="in a loop: self -> self"):
        jobs_of(plan, tmp_path)


def test_a_parent_base_that_no_cell_uses_is_still_built(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer"])
    jobs = jobs_of(plan, tmp_path)
    assert list(jobs)[:3] == ["base-inner", "base-middle", "base-outer"]


def test_local_base_froms_reads_every_from(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile.multi").write_text(
        "ARG X=1\n"
        "FROM --platform=$BUILDPLATFORM golang:1.22 AS build\n"
        "  from alpine:3.19\n"
        "# FROM commented/out\n"
        "RUN echo FROM not/a-parent\n"
        "COPY --from=build /x /x\n"
    )
    base = LocalBase("multi", "example/multi:dev", tmp_path, "Dockerfile.multi", ())
    assert local_base_froms(base) == ("golang:1.22", "alpine:3.19")


def test_local_base_froms_fills_build_args_then_arg_defaults(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE=site/debian:bookworm-amd64\nARG TOOLS\n"
        "FROM ${BASE}\nFROM $TOOLS AS tools\nARG LATE=x\nFROM $LATE\n"
    )
    arm = LocalBase(
        "deb", "site/demo:bookworm-arm64", tmp_path, "Dockerfile", (("BASE", "site/debian:bookworm-arm64"),)
    )
    # an ARG after the first FROM is the stage's, never a FROM's; an unset one stays as written
    assert local_base_froms(arm) == ("site/debian:bookworm-arm64", "$TOOLS", "$LATE")
    amd = LocalBase("deb", "site/demo:bookworm-amd64", tmp_path, "Dockerfile", ())
    assert local_base_froms(amd)[0] == "site/debian:bookworm-amd64"


def test_local_base_froms_of_a_missing_dockerfile(tmp_path: Path) -> None:
    base = LocalBase("gone", "example/gone:dev", tmp_path, "Dockerfile", ())
    with pytest.raises(InputError, match=r"^base gone: cannot read .*Dockerfile: No such file"):
        local_base_froms(base)


def test_the_plans_repository_with_and_without_registry(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    plain = write_project(tmp_path / "one", {"inner": CHAIN["inner"]}, ["inner"])
    hosted = write_project(tmp_path / "two", {"inner": CHAIN["inner"]}, ["inner"], registry="127.0.0.1:5000")
    assert plain.repository == "example/it"
    assert hosted.repository == "127.0.0.1:5000/example/it"


def test_a_cell_on_another_cell_of_the_matrix_waits_for_it(tmp_path: Path) -> None:
    plan = write_project(tmp_path, {"inner": CHAIN["inner"]}, ["inner"])
    (cell,) = plan.cells
    child = replace(
        cell, id="child", base_image=f"example/it:{cell.readable_tag}", local_base=None, readable_tag="child"
    )
    jobs = plan_jobs(plan, (cell, child))
    assert [(j.name, j.depends_on) for j in jobs] == [
        ("base-inner", ()),
        (cell.id, ("base-inner",)),
        ("child", (cell.id,)),
    ]


def test_the_job_graph_renders_nothing_itself() -> None:
    """It takes rendered cells as data: importing it brings in no renderer and no Jinja."""
    code = (
        "import sys, imagekit.builds.jobs; "
        "print(sorted({'imagekit.render.dockerfile', 'jinja2'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_each_kind_of_job_has_only_its_own_fields(tmp_path: Path) -> None:
    plan = write_project(tmp_path, {"inner": CHAIN["inner"]}, ["inner"])
    base, cell = plan_jobs(plan, plan.cells)
    assert isinstance(base, BaseJob) and isinstance(cell, CellJob)
    assert not hasattr(base, "rendered") and not hasattr(cell, "local_base")
    assert (base.result("built").kind, cell.result("built").kind) == ("base", "cell")
    # the report's record of a cell carries what its plan found, the matrix's waivers with their reasons
    waived = cell.result("built").advisories
    assert waived == cell.rendered.cell.advisories and waived
    critical = {f.waived for f in waived if f.severity == "critical"}
    assert critical == {"a test of another feature; it loads no checkpoint"}
    assert base.result("built").advisories == ()


def test_a_cell_on_a_pulled_base_carries_its_resolution() -> None:
    """Rendered FROM the pinned digest, the job still knows the base it resolved, by the cell's own."""
    plan = load_plan(REPO / "matrix.yaml")
    cell = plan.cells[1]
    name = cell.base_image.rpartition(":")[0]
    pinned = ResolvedBase(
        cell.base_image, f"{name}@sha256:{'a' * 64}", f"{name}@sha256:{'a' * 64}", None, ("x", "y")
    )
    resolved = {(cell.base_image, cell.platform): pinned}
    rendered = Renderer(plan).render(cell, build_from=built_from(cell, resolved))
    assert rendered.cell.base_image == pinned.build_from
    (job,) = cell_jobs(plan, (cell,), (rendered,), resolved, TODAY)
    assert (job.base_reference, job.external_digest, job.base_image) == (
        cell.base_image,
        pinned.digest,
        ("x", "y"),
    )
