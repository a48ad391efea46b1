"""The job graph of a build: local bases first, in the order they derive from each other, then
the cells; each job names the jobs it waits for.

A job is one of a closed set of kinds, each its own frozen type (``Job``), matched on its type as
``imagekit.plan.cells`` matches cells: a ``BaseJob`` builds a local base from its context, a ``CellJob``
builds a cell from its rendered inputs. Nothing here renders: the builder renders each cell on its
resolved base (``built_from``) and hands the rendered cells in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from imagekit.builds.bases import ResolvedBase, local_base_froms
from imagekit.core.errors import MESSAGE_CHARS, InputError
from imagekit.core.text import elided, redact, safe_line
from imagekit.plan.cells import Cell, LocalBase, Plan, local_base_of
from imagekit.render.context import FileHasher, local_base_digest
from imagekit.report.store import CellResult, Status

if TYPE_CHECKING:
    from imagekit.render.dockerfile import RenderedCell


@dataclass(frozen=True)
class JobFields:
    """What every kind of job has: its name (the report's id), what it waits for, its FROM."""

    name: str
    depends_on: tuple[str, ...]
    base_reference: str

    report_kind: ClassVar[Literal["cell", "base"]]  # the kind of its record in the report

    def result(self, status: Status, **values: Any) -> CellResult:
        """This job's record in the report (a cell's with the advisories its plan found)."""
        if isinstance(self, CellJob):
            values.setdefault("advisories", self.rendered.cell.advisories)
        return CellResult(
            id=self.name, kind=self.report_kind, status=status, base_image=self.base_reference, **values
        )


@dataclass(frozen=True)
class BaseJob(JobFields):
    """Build a local base from its context."""

    local_base: LocalBase
    context_digest: str

    report_kind: ClassVar[Literal["base"]] = "base"


@dataclass(frozen=True)
class CellJob(JobFields):
    """Build a cell from its rendered inputs, on its base."""

    rendered: RenderedCell
    base_error: str | None = None  # its pulled base could not be had: the job fails with this
    external_digest: str | None = None  # for cells on a pulled base
    base_image: tuple[str, str] | None = None  # that base's (name inspected, image id)

    report_kind: ClassVar[Literal["cell"]] = "cell"


Job = BaseJob | CellJob


def base_job_name(base: LocalBase) -> str:
    return f"base-{base.id}"


def built_from(cell: Cell, resolved: Mapping[tuple[str, str], ResolvedBase]) -> str:
    """What a cell's Dockerfile is rendered FROM: its resolved base (mirrored, pinned), else its own."""
    resolution = resolved.get((cell.base_image, cell.platform))
    return cell.base_image if resolution is None else resolution.build_from


def base_jobs(plan: Plan, cells: Sequence[Cell], hasher: FileHasher) -> list[BaseJob]:
    """The local bases ``cells`` derive from, each after the bases it derives from."""
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
    return [
        BaseJob(
            name=base_job_name(base),
            depends_on=tuple(base_job_name(by_image[p]) for p in local_base_froms(base) if p in by_image),
            base_reference=", ".join(local_base_froms(base)),
            local_base=base,
            context_digest=local_base_digest(base, hasher),
        )
        for base in needed.values()
    ]


def cell_jobs(
    plan: Plan,
    cells: Sequence[Cell],
    rendered: Sequence[RenderedCell],  # each of ``cells`` rendered FROM ``built_from`` it
    resolved: Mapping[tuple[str, str], ResolvedBase],  # by (reference, platform)
    day: date,
) -> list[CellJob]:
    """A job per cell, waiting for its local base or for the cell it is built on."""
    publish = plan.matrix.publish
    produced = {
        reference: item.cell.id for item in rendered for reference in item.names(publish, day).references()
    }
    jobs: list[CellJob] = []
    for cell, item in zip(cells, rendered, strict=True):
        # its base as resolved: looked up by the cell's own base (the rendered one may be pinned)
        resolution = resolved.get((cell.base_image, cell.platform))
        depends: tuple[str, ...] = ()
        if (local := local_base_of(item.cell)) is not None:
            depends = (base_job_name(local),)
        elif item.cell.base_image in produced:  # a cell built on another cell of this matrix
            depends = (produced[item.cell.base_image],)
        jobs.append(
            CellJob(
                name=item.cell.id,
                depends_on=depends,
                base_reference=resolution.reference if resolution else item.cell.base_image,
                rendered=item,
                base_error=resolution.error if resolution else None,
                external_digest=resolution.digest if resolution else None,
                base_image=resolution.engine_image if resolution else None,
            )
        )
    return jobs


def pulled_bases(jobs: Iterable[Job]) -> tuple[tuple[str, str], ...]:
    """The (name inspected, image id) of each pulled base the cells of ``jobs`` are built on."""
    return tuple(sorted({job.base_image for job in jobs if isinstance(job, CellJob) and job.base_image}))


TAIL_LINES = 20  # a failed job's last log lines, kept in its record


class JobFailed(Exception):
    """A job's build failed: ``message`` is its one line, ``tail`` the log lines before it. Both
    are what an engine or a build step printed, masked as every error line is (``redact``)."""

    def __init__(self, message: str, tail: tuple[str, ...] = ()) -> None:
        # What a build printed (a step's error, the engine's, buildx's last line) is no shorter
        # than its longest line; the message is the report's error and a printed line, bounded
        # and cleaned like an ImagekitError's.
        message = safe_line(message, MESSAGE_CHARS)
        super().__init__(message)
        self.message = message
        # the report's error_tail: each line masked and bounded (a build's line may be 64 kB)
        self.tail = tuple(elided(redact(line)) for line in tail)
