"""The job graph of a build: local bases first, in the order they derive from each other, then
the cells; each job names the jobs it waits for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from imagekit.bases import ResolvedBase, local_base_froms
from imagekit.cells import Cell, LocalBase, Plan, local_base_of
from imagekit.context import local_base_digest
from imagekit.errors import InputError
from imagekit.render import RenderedCell, Renderer
from imagekit.store import CellResult, Status


@dataclass(frozen=True)
class Job:
    name: str
    kind: Literal["cell", "base"]
    depends_on: tuple[str, ...]
    base_reference: str
    rendered: RenderedCell | None = None
    local_base: LocalBase | None = None
    base_error: str | None = None
    external_digest: str | None = None  # for cells on a pulled base
    base_image: tuple[str, str] | None = None  # that base's (name inspected, image id)
    context_digest: str | None = None  # for local bases

    def result(self, status: Status, **values: Any) -> CellResult:
        """This job's record in the report."""
        return CellResult(
            id=self.name, kind=self.kind, status=status, base_image=self.base_reference, **values
        )


def base_job_name(base: LocalBase) -> str:
    return f"base-{base.id}"


def plan_jobs(
    plan: Plan,
    cells: tuple[Cell, ...],
    renderer: Renderer,
    resolved: Mapping[tuple[str, str], ResolvedBase],  # by (reference, platform)
    day: date,
) -> list[Job]:
    """Bases first in dependency order, then the cells; each job names the jobs it waits for."""
    by_image = {base.image: base for base in plan.local_bases}
    needed: dict[str, LocalBase] = {}

    def need(base: LocalBase, chain: tuple[str, ...]) -> None:
        if base.id in chain:
            raise InputError(
                f"local bases derive from each other in a loop: {' -> '.join((*chain, base.id))}"
            )
        for parent in local_base_froms(base):
            if parent in by_image:
                need(by_image[parent], (*chain, base.id))
        needed.setdefault(base.id, base)

    for cell in cells:
        if (local := local_base_of(cell)) is not None:
            need(local, ())

    jobs: list[Job] = []
    for base in needed.values():
        parents = tuple(base_job_name(by_image[p]) for p in local_base_froms(base) if p in by_image)
        jobs.append(
            Job(
                name=base_job_name(base),
                kind="base",
                depends_on=parents,
                base_reference=", ".join(local_base_froms(base)),
                local_base=base,
                context_digest=local_base_digest(base, renderer.hasher),
            )
        )
    rendered_cells = []
    for cell in cells:
        resolution = resolved.get((cell.base_image, cell.platform))
        built_from = cell.base_image if resolution is None else resolution.build_from
        rendered_cells.append((renderer.render(cell, build_from=built_from), resolution))
    produced = {
        reference: item.cell.id
        for item, _ in rendered_cells
        for reference in item.names(plan.matrix.publish, day).references()
    }
    for item, resolution in rendered_cells:
        cell = item.cell
        depends: tuple[str, ...] = ()
        if (local := local_base_of(cell)) is not None:
            depends = (base_job_name(local),)
        elif cell.base_image in produced:  # a cell built on another cell of this matrix
            depends = (produced[cell.base_image],)
        jobs.append(
            Job(
                name=cell.id,
                kind="cell",
                depends_on=depends,
                base_reference=resolution.reference if resolution else cell.base_image,
                rendered=item,
                base_error=resolution.error if resolution else None,
                external_digest=resolution.digest if resolution else None,
                base_image=resolution.engine_image if resolution else None,
            )
        )
    return jobs
