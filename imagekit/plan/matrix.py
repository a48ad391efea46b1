"""Stage 1: a validated matrix becomes a plan of typed cells and refused combinations.

Three steps, each with its own module: ``imagekit.plan.expand`` crosses the axes (GitHub Actions'
include/exclude semantics), ``imagekit.plan.resolve`` turns each combination into a cell of its kind
or a refusal, and this module plans: unique ids and tags, front ends after their cells, the
matrix's paths kept inside its directory. The records themselves are ``imagekit.plan.cells``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.paths import inside
from imagekit.core.yamlsource import SourceDocument, as_mapping, format_path, read_yaml_file
from imagekit.facts.compat import Compat, load_compat
from imagekit.plan.cells import Cell, LocalBase, Plan, Refusal
from imagekit.plan.expand import check_size, collapse, expand
from imagekit.plan.pins import apply_pins
from imagekit.plan.resolve import Refused, Resolver
from imagekit.plan.schema import Matrix, validate_matrix


def plan_matrix(matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat | None = None) -> Plan:
    """Expand and resolve; raises InputError for a matrix that cannot be planned at all."""
    _check_paths(matrix, root, doc)
    resolver = Resolver(matrix, root, doc, compat or load_compat())
    axes = matrix.axes.as_dict()
    check_size(axes, matrix.include, matrix.exclude, doc.name)
    expansion = expand(
        axes,
        [entry.set_keys() for entry in matrix.include],
        [entry.set_keys() for entry in matrix.exclude],
    )
    warnings = [
        ("exclude", f"{doc.where(('exclude', index))}: exclude[{index}] matches no combination")
        for index in expansion.unused_excludes
    ]
    listed = _CellList(doc.name)
    refused: list[Refusal] = []
    for combination, origin in zip(expansion.combinations, expansion.origins, strict=True):
        try:
            resolved = resolver.resolve(combination, origin)
        except Refused as refusal:
            refused.append(Refusal(combination, origin, refusal.reason))
            continue
        for cell in resolved:
            listed.add(cell, origin, parent_of_frontend=len(resolved) > 1 and cell is resolved[0])
    cells = listed.cells
    warnings += [("advisories", line) for line in resolver.advisories.unused()]
    if not cells:
        detail = f"; first refusal: {refused[0].describe()}" if refused else ""
        raise InputError(f"{doc.name}: the matrix has no buildable cell{detail}")
    _refuse_shared_immutable_tags(cells, matrix, doc)
    local_bases = _local_bases(resolver, matrix, cells)
    return Plan(
        matrix=matrix,
        root=root,
        source_name=doc.name,
        cells=tuple(cells),
        refused=tuple(refused),
        warnings=collapse(warnings + resolver.warnings),
        local_bases=local_bases,
        compat=resolver.compat,
        advisory_policy=resolver.advisories,
    )


def _local_bases(resolver: Resolver, matrix: Matrix, cells: Sequence[Cell]) -> tuple[LocalBase, ...]:
    """Every base built from a local context, per platform a cell is built for, in `bases` order:
    also one that only other bases derive from (built for every platform its name can hold)."""
    used = tuple(dict.fromkeys(c.platform for c in cells))
    made = {name for name, _ in resolver.local_bases}
    for name, spec in matrix.bases.items():
        if spec.build is not None and name not in made:
            for platform in used if "{arch}" in (spec.image or "") else used[:1]:
                resolver.local_base(name, spec, platforms.get(platform))
    order = {name: index for index, name in enumerate(matrix.bases)}
    return tuple(
        base
        for _, base in sorted(
            resolver.local_bases.items(), key=lambda item: (order[item[0][0]], used.index(item[0][1]))
        )
    )


class _CellList:
    """The plan's cells in order: each id once (a front end's parent may be implied before it is
    listed), each readable tag once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.cells: list[Cell] = []
        self.by_id: dict[str, Cell] = {}
        self.by_tag: dict[str, Cell] = {}
        self.implied: set[str] = set()  # cells added as a front end's parent, not listed themselves

    def add(self, cell: Cell, origin: str, parent_of_frontend: bool) -> None:
        twin = self.by_id.get(cell.id)
        if twin is not None and (parent_of_frontend or twin.id in self.implied):
            if replace(twin, origin="") != replace(cell, origin=""):
                raise InputError(
                    f"{self.source}: {origin} asks for a front end of {cell.id} with other settings than"
                    " the cell itself (env, packages, build args); give them to the cell without"
                    " the front end, which the front end is built FROM"
                )
            if not parent_of_frontend:
                self.implied.discard(cell.id)  # listed after all: it keeps its place
            return
        if twin is not None:
            where = (
                "two axis values"  # e.g. torch "2.1" and "2.1.2", the same release
                if cell.origin == twin.origin == "axes"
                else f"{twin.origin} and {cell.origin}"
            )
            raise InputError(f"{self.source}: {where} make the same cell {cell.id}; list it once")
        # one published name per group of platforms: two cells of one platform must not share it
        tag_twin = self.by_tag.get(cell.image_tag)
        if tag_twin is not None:
            raise InputError(
                f"{self.source}: cells {tag_twin.id} and {cell.id} would share the tag"
                f" {cell.readable_tag!r}; add {{python}} or {{base}} to publish.tags.readable"
            )
        self._same_build_per_platform(cell)
        if parent_of_frontend:
            self.implied.add(cell.id)
        self.by_id[cell.id] = cell
        self.by_tag[cell.image_tag] = cell
        self.cells.append(cell)

    def _same_build_per_platform(self, cell: Cell) -> None:
        """The cells sharing a published name make one image index, so they must be one build
        for several platforms, not two builds that a pull would choose between by CPU."""
        for platform in platforms.NAMES:
            twin = self.by_tag.get(cell.readable_tag + platforms.get(platform).suffix)
            if twin is None or twin.platform == cell.platform:
                continue
            differ = [k for k in _GROUP_KEYS if getattr(twin, k) != getattr(cell, k)]
            if differ:
                raise InputError(
                    f"{self.source}: cells {twin.id} and {cell.id} would publish one index under"
                    f" {cell.readable_tag!r} but differ in {', '.join(differ)}; put the differing"
                    " key's placeholder in publish.tags.readable"
                )


# What the platforms of one published name share (everything but how each is built).
_GROUP_KEYS = ("torch", "torchvision", "torchaudio", "cuda", "python", "flavour", "base")


def _check_paths(matrix: Matrix, root: Path, doc: SourceDocument) -> None:
    """Every directory the matrix names, once links are followed, is inside its directory: a link
    to elsewhere must not make render write there or a build read from there."""
    named: list[tuple[tuple[str | int, ...], str | None]] = [
        (("output",), matrix.output),
        (("templates",), matrix.templates),
        *(
            (("sources", "pip", "find_links", i), entry)
            for i, entry in enumerate(matrix.sources.pip.find_links)
        ),
    ]
    for path, relative in named:
        if relative is not None:
            inside(root / relative, root, f"{doc.where(path)}: {format_path(path)}")


# Any day: a run's cells share it.
_SOME_DAY = date(2000, 1, 1)


def _refuse_shared_immutable_tags(cells: Sequence[Cell], matrix: Matrix, doc: SourceDocument) -> None:
    """An immutable tag names one image forever. A pattern that holds ``{readable}`` (unique per
    cell, checked above) or ``{digest}`` (the cell's inputs) fills a tag of its own per cell; one
    that holds neither (``{date}`` alone, a constant) gives every cell of a run the same tag."""
    if len(cells) < 2:
        return
    for index, pattern in enumerate(matrix.publish.tags.immutable):
        if {"readable", "digest"} & set(naming.placeholders(pattern)):
            continue
        where = f"{doc.where(('publish', 'tags', 'immutable', index))}: publish.tags.immutable[{index}]"
        first, second = cells[0], cells[1]
        tag = naming.immutable_tags(first.readable_tag, (pattern,), _SOME_DAY, "0" * 64)[-1]
        raise InputError(
            f"{where}: {pattern!r} gives cells {first.id} and {second.id} (every cell of a run) the same"
            f" tag ({tag!r}), but an immutable tag names one image; put {{readable}} or {{digest}} in it"
        )


def load_plan(path: Path, compat: Compat | None = None, *, pinned: bool = True) -> Plan:
    """Read, validate and plan a matrix file: the one entry point every CLI verb uses. ``pinned``:
    its cells FROM the digests of the lock beside it (``imagekit.plan.pins``); only `pin-bases`,
    which writes the lock, plans without."""
    doc = read_yaml_file(path)
    as_mapping(doc)
    matrix = validate_matrix(doc)
    plan = plan_matrix(matrix, path.resolve().parent, doc, compat)
    if not pinned:
        return plan
    return replace(plan, cells=apply_pins(plan.cells, plan.root / path.name, matrix.require_base_pins))


def registry_host(value: str | None, plan: Plan, matrix: Path) -> str:
    """--registry (validated like the matrix's) or the matrix's publish.registry; exit 2 if none."""
    from pydantic import TypeAdapter, ValidationError

    from imagekit.core.safetypes import Registry
    from imagekit.core.text import shown

    if value is None:
        if not plan.matrix.publish.registry:
            raise InputError(f"{matrix}: no registry; set publish.registry or pass --registry HOST[:PORT]")
        return plan.matrix.publish.registry
    try:
        return str(TypeAdapter(Registry).validate_python(value))
    except ValidationError as exc:
        raise InputError(f"--registry {shown(value)}: {exc.errors()[0]['msg']}") from None
