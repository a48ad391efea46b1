"""Stage 1: a validated matrix becomes a plan of concrete cells and refused combinations.

``expand`` implements GitHub Actions' matrix semantics on plain dicts; ``plan_matrix`` resolves
each combination against the compatibility data into a frozen ``Cell`` or a ``Refusal``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from fnmatch import fnmatchcase
from functools import cached_property
from itertools import product
from pathlib import Path
from typing import Any

from imagekit import naming, rules
from imagekit.compat import Compat, Stack, load_compat
from imagekit.errors import InputError
from imagekit.limits import MAX_COMBINATIONS, MAX_EXPANSION_STEPS, WARNINGS_SHOWN
from imagekit.paths import inside
from imagekit.schema import AXIS_KEYS, BaseSpec, Matrix, validate_matrix
from imagekit.versions import cuda_variant, minor_of, version_key
from imagekit.yamlsource import SourceDocument, as_mapping, format_path, read_yaml_file

Combination = dict[str, Any]


# -- expansion (GitHub Actions semantics) ---------------------------------------------------------


@dataclass(frozen=True)
class Expansion:
    combinations: tuple[Combination, ...]
    origins: tuple[str, ...]  # where each combination came from: "axes" or "include[i]"
    unused_excludes: tuple[int, ...]


def check_size(
    axes: Mapping[str, Sequence[Any]], include: Sequence[object], exclude: Sequence[object], source: str
) -> int:
    """The number of combinations the matrix asks for, from its axis lengths alone; refused past
    ``MAX_COMBINATIONS`` before a single one is made (three axes of 200 would be 8 million)."""
    lengths = [len(values) for values in axes.values()]
    crossed = math.prod(lengths) if lengths else 0
    combinations = crossed + len(include)
    if combinations > MAX_COMBINATIONS:
        shape = " x ".join(str(n) for n in lengths) or "no axes"
        extra = f" + {len(include)} include entries" if include else ""
        raise InputError(
            f"{source}: the matrix makes {combinations:,} combinations ({shape}{extra}); imagekit plans"
            f" at most {MAX_COMBINATIONS:,}: split it into several matrices, or shorten the axes"
        )
    steps = crossed * (len(include) + len(exclude))
    if steps > MAX_EXPANSION_STEPS:
        raise InputError(
            f"{source}: {crossed:,} combinations x {len(include) + len(exclude):,} include/exclude"
            f" entries is {steps:,} comparisons; imagekit allows {MAX_EXPANSION_STEPS:,}: list fewer"
            " entries, or split the matrix"
        )
    return combinations


def collapse(warnings: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Warnings as printed: each once, at most ``WARNINGS_SHOWN`` of a kind, then one line that
    counts the rest (100,000 unknown versions must not print 100,000 lines)."""
    out: list[str] = []
    seen: set[str] = set()
    hidden: dict[str, int] = {}
    shown_of: dict[str, int] = {}
    for kind, text in warnings:
        if text in seen:
            continue
        seen.add(text)
        if shown_of.get(kind, 0) < WARNINGS_SHOWN:
            shown_of[kind] = shown_of.get(kind, 0) + 1
            out.append(text)
        else:
            hidden[kind] = hidden.get(kind, 0) + 1
    for kind, count in hidden.items():
        out.append(f"... and {count:,} more warning{'s' if count > 1 else ''} like it ({kind})")
    return tuple(out)


def expand(
    axes: Mapping[str, Sequence[Any]],
    include: Sequence[Mapping[str, Any]],
    exclude: Sequence[Mapping[str, Any]],
) -> Expansion:
    """Cross the axes, drop what ``exclude`` matches, then apply ``include``.

    As in GitHub Actions: an exclude entry removes every combination that has all of its
    key/values (a partial match). Each include entry is merged into every *original*
    combination whose axis values it does not contradict (keys that are not axes may be added,
    and overwrite what an earlier include added); an entry that fits no original combination
    becomes a combination of its own. Combinations made by include are never extended.
    """
    keys = list(axes)
    originals: list[Combination] = (
        [dict(zip(keys, values, strict=True)) for values in product(*(axes[k] for k in keys))] if keys else []
    )
    unused: list[int] = []
    for index, rule in enumerate(exclude):
        kept = [c for c in originals if not all(c.get(k) == v for k, v in rule.items())]
        if len(kept) == len(originals):
            unused.append(index)
        originals = kept

    origins = ["axes"] * len(originals)
    added: list[Combination] = []
    for index, entry in enumerate(include):
        matched = False
        for combination in originals:
            if all(combination[k] == v for k, v in entry.items() if k in axes):
                combination.update(entry)
                matched = True
        if not matched:
            added.append(dict(entry))
            origins.append(f"include[{index}]")
    return Expansion(tuple(originals + added), tuple(origins), tuple(unused))


# -- resolved records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalBase:
    """A base image built from a local context before the cells that use it."""

    name: str
    image: str
    context: Path
    dockerfile: str
    args: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Cell:
    """One image to build: every version fixed, every string already validated."""

    id: str
    origin: str
    base: str  # the key in `bases`
    base_image: str
    local_base: LocalBase | None
    os: str
    flavour: str
    torch: str
    torchvision: str | None
    torchaudio: str | None
    cuda: str  # CUDA minor ("12.1") or "cpu"
    cuda_full: str | None  # full toolkit version in the base (12.1.1); None for cpu and plain bases
    variant: str  # wheel variant: cu121, cpu
    cudnn: str | None  # cuDNN major torch uses ("8"), or the stack's full version
    python: str
    python_from_base: bool
    stack: Stack | None
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    build_args: tuple[tuple[str, str], ...]
    readable_tag: str
    unknown: bool  # admitted through allow_unknown
    numpy_cap: str | None = None  # "<2" where torch was compiled against NumPy 1.x
    # The base image brings CUDA and the NVIDIA environment (nvidia/cuda, NGC); on a plain base a
    # CUDA wheel brings CUDA's libraries itself and the image sets the NVIDIA environment.
    base_carries_cuda: bool = False
    frontend: str | None = None  # jupyter | ssh: built FROM its parent cell's image
    parent: str | None = None  # the id of that cell

    @property
    def is_cuda(self) -> bool:
        return self.cuda != "cpu"

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "torch": self.torch,
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "cuda": self.cuda,
            "cuda_full": self.cuda_full,
            "cudnn": self.cudnn,
            "python": self.python,
            "base": self.base,
            "base_image": self.base_image,
            "flavour": self.flavour,
            "os": self.os,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class Refusal:
    combination: Mapping[str, Any]
    origin: str
    reason: str

    def describe(self) -> str:
        keys = ", ".join(f"{k}={self.combination[k]}" for k in AXIS_KEYS if k in self.combination)
        return f"{keys or self.origin}: {self.reason}"


@dataclass(frozen=True)
class Plan:
    matrix: Matrix
    root: Path  # the directory the matrix file lives in; relative paths start here
    source_name: str
    cells: tuple[Cell, ...]
    refused: tuple[Refusal, ...]
    warnings: tuple[str, ...] = field(default=())
    # every base built from a local context, also one that only other bases derive from
    local_bases: tuple[LocalBase, ...] = field(default=())
    compat: Compat = field(default_factory=load_compat, compare=False, repr=False)  # the facts it used

    @property
    def repository(self) -> str:
        """Where this matrix's images are named: ``registry/repository`` (or a local name)."""
        return naming.repository(self.matrix.publish.registry, self.matrix.publish.repository)

    @cached_property
    def _cells_by_id(self) -> dict[str, Cell]:
        return {c.id: c for c in self.cells}

    def cell(self, cell_id: str) -> Cell:
        found = self._cells_by_id.get(cell_id)
        if found is None:
            raise InputError(f"{self.source_name}: no cell {cell_id}; see `imagekit plan`")
        return found

    def with_parents(self, cells: Sequence[Cell]) -> tuple[Cell, ...]:
        """``cells`` and, first, the cells their front ends are built FROM that are not among them."""
        chosen = {c.id for c in cells}
        parents = [self.cell(c.parent) for c in cells if c.parent and c.parent not in chosen]
        unique = {p.id: p for p in parents}
        return (*unique.values(), *cells)

    def select(self, patterns: Sequence[str]) -> tuple[Cell, ...]:
        """The cells whose id matches any shell-style pattern (all cells when none given)."""
        chosen = set(select_ids([c.id for c in self.cells], patterns, self.source_name))
        return tuple(c for c in self.cells if c.id in chosen)


def select_ids(ids: Sequence[str], patterns: Sequence[str], source: str) -> list[str]:
    """The ids matching any of ``patterns`` (every id when none given): what ``--only`` means
    everywhere. A pattern list that matches nothing is an input error, never an empty result."""
    if not patterns:
        return list(ids)
    chosen = [i for i in ids if any(fnmatchcase(i, p) for p in patterns)]
    if not chosen:
        shown = " ".join(f"--only {p}" for p in patterns)
        raise InputError(f"{shown} matches no cell of {source}; see `imagekit plan`")
    return chosen


# -- resolution -----------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refuse_unless(order: tuple[rules.Rule, ...], request: rules.Request, compat: Compat) -> None:
    reason = rules.first_refusal(order, request, compat)
    if reason is not None:
        raise _Refused(reason)


class _Resolver:
    """Turns one combination into a Cell: defaults merged, versions resolved, rules applied."""

    def __init__(self, matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat) -> None:
        self.matrix = matrix
        self.root = root
        self.doc = doc
        self.compat = compat
        self.warnings: list[tuple[str, str]] = []  # (kind, text)
        self.local_bases: dict[str, LocalBase] = {}
        self._where: dict[tuple[str | int, ...], str] = {}
        pip = matrix.sources.pip
        self.wheelhouse = bool(pip.find_links or pip.no_index)
        self.torch_source: rules.TorchSource = (
            "wheelhouse" if pip.find_links else "index" if pip.torch_index_url else "pypi"
        )

    def where(self, path: tuple[str | int, ...]) -> str:
        # asked twice per cell (its base's image and tag entries) and read only on an error: each
        # base's answer is worked out once
        found = self._where.get(path)
        if found is None:
            found = self._where[path] = f"{self.doc.where(path)}: {format_path(path)}"
        return found

    def local_base(self, name: str, spec: BaseSpec) -> LocalBase | None:
        if spec.build is None:
            return None
        if name not in self.local_bases:
            where = self.where(("bases", name, "build", "context"))
            context = self.root / spec.build.context
            # a context (or its Dockerfile) linked from elsewhere would be read and hashed
            inside(context, self.root, where)
            inside(
                context / spec.build.dockerfile, context, self.where(("bases", name, "build", "dockerfile"))
            )
            if not (context / spec.build.dockerfile).is_file():
                raise InputError(
                    f"{where}: no {spec.build.dockerfile} in {context}; create it or fix the path"
                )
            assert spec.image is not None  # a local build names the image it produces
            self.local_bases[name] = LocalBase(
                name=name,
                image=spec.image,
                context=context,
                dockerfile=spec.build.dockerfile,
                args=tuple(sorted(spec.build.args.items())),
            )
        return self.local_bases[name]

    def resolve(self, combination: Combination, origin: str) -> tuple[Cell, ...]:
        """The combination's cell; for a front end, the cell it is built FROM first, then it."""
        merged: Combination = {**self.matrix.defaults.set_keys(), **combination}
        frontend = merged.pop("frontend", None) or "none"
        base_name = merged.get("base")
        if base_name is None:
            if len(self.matrix.bases) != 1:
                raise InputError(
                    f"{self.doc.name}: {origin} gives a combination without `base`; add a base axis"
                    " or set defaults.base"
                )
            base_name = next(iter(self.matrix.bases))
        spec = self.matrix.bases.get(base_name)
        if spec is None:
            raise InputError(
                f"{self.doc.name}: {origin} names base {base_name!r}, which `bases` does not"
                f" define (defined: {', '.join(self.matrix.bases)})"
            )
        if spec.stack is not None:
            cell = self._stack_cell(merged, origin, base_name, spec, frontend)
        else:
            cell = self._wheel_cell(merged, origin, base_name, spec)
        if frontend == "none":
            return (cell,)
        return cell, self._frontend_cell(cell, frontend, origin)

    def _frontend_cell(self, parent: Cell, frontend: str, origin: str) -> Cell:
        """A front end FROM its parent cell's image (shares every layer below); its tags say which."""
        where = self.where(("publish", "tags", "readable"))
        publish = self.matrix.publish
        return replace(
            parent,
            id=naming.cell_id(
                parent.base, parent.torch, parent.cuda, parent.python, parent.flavour, frontend
            ),
            origin=origin,
            base_image=naming.reference(
                naming.repository(publish.registry, publish.repository), parent.readable_tag
            ),
            local_base=None,
            readable_tag=naming.readable_tag(f"{parent.readable_tag}-{frontend}", {}, where),
            pip_packages=(),
            apt_packages=(),
            build_args=(),
            frontend=frontend,
            parent=parent.id,
        )

    def _stack_cell(
        self, merged: Combination, origin: str, base_name: str, spec: BaseSpec, frontend: str
    ) -> Cell:
        assert spec.stack is not None
        stack = self.compat.stacks.get(spec.stack)
        if stack is None:
            raise InputError(
                f"{self.where(('bases', base_name, 'stack'))}: unknown stack {spec.stack!r};"
                f" imagekit knows {', '.join(self.compat.stacks)}"
            )
        request = rules.Request(
            base=base_name,
            torch=stack.torch,
            cuda=minor_of(stack.cuda),
            python=stack.python,
            flavour=merged.get("flavour") or "devel",
            cuda_full=stack.cuda,
            carries_cuda=True,
            base_python=stack.python,
            os=spec.os or stack.os,
            stack=stack,
            image=spec.image or stack.image,
            asked_torch=merged.get("torch"),
            asked_cuda=merged.get("cuda"),
            asked_python=merged.get("python"),
            pip_packages=tuple(merged.get("pip_packages") or ()),
            wheelhouse=self.wheelhouse,
            frontend=frontend,
        )
        _refuse_unless(rules.STACK_RULES, request, self.compat)
        return self._cell(
            merged, origin, spec, request, cuda_full=stack.cuda, cudnn=stack.cudnn, companions=(None, None)
        )

    def _wheel_request(
        self, merged: Combination, origin: str, base_name: str, spec: BaseSpec
    ) -> rules.Request:
        requested = merged.get("torch")
        if requested is None:
            raise InputError(f"{self.doc.name}: {origin} gives a combination without `torch`")
        carries_cuda = spec.cuda if spec.cuda is not None else "{cuda" in (spec.image or "")
        if carries_cuda and not merged.get("cuda"):
            raise InputError(f"{self.doc.name}: {origin} gives a combination on {base_name} without `cuda`")
        cuda = str(merged.get("cuda") or "cpu")
        os_name = spec.os
        assert os_name is not None  # schema: a non-stack base names its OS
        python = merged.get("python") or spec.python
        if python is None:
            system = self.compat.operating_systems.get(os_name)
            if system is None:
                raise InputError(
                    f"{self.where(('bases', base_name))}: imagekit does not know {os_name}'s Python;"
                    " set python on the base or the cell"
                )
            python = system.pythons[0]
        return rules.Request(
            base=base_name,
            torch=self.compat.resolve_torch(requested),
            cuda=cuda if cuda == "cpu" else minor_of(cuda),
            python=python,
            flavour=merged.get("flavour") or "devel",
            allow_unknown=bool(merged.get("allow_unknown", self.matrix.allow_unknown)),
            cuda_written=merged.get("cuda"),
            cuda_full=str(merged["cuda_full"]) if merged.get("cuda_full") else None,
            carries_cuda=carries_cuda,
            base_python=spec.python,
            base_flavours=tuple(spec.flavours) if spec.flavours is not None else None,
            os=os_name,
            torch_source=self.torch_source,
            torchvision=merged.get("torchvision"),
            torchaudio=merged.get("torchaudio"),
            image=spec.image or "",
            pip_packages=tuple(merged.get("pip_packages") or ()),
        )

    def _wheel_cell(self, merged: Combination, origin: str, base_name: str, spec: BaseSpec) -> Cell:
        request = self._wheel_request(merged, origin, base_name, spec)
        _refuse_unless(rules.WHEEL_RULES, request, self.compat)
        torch = request.torch
        release = self.compat.torch_release(torch)
        patch = release.patch(torch) if release else None
        if patch is None:
            self.warnings.append(
                (
                    "allow_unknown",
                    f"torch {torch} is not in the compatibility table; admitted by allow_unknown",
                )
            )
        cudnn: str | None = None
        cuda_full = request.cuda_full
        if request.cuda != "cpu":
            known = self.compat.cuda_release(request.cuda)
            table = known.image_version if known and request.carries_cuda else None
            cuda_full = cuda_full or table
            cudnn = str(release.cudnn_major if release else 9)
        vision = merged.get("torchvision") or (patch.torchvision if patch else None)
        audio = merged.get("torchaudio") or (patch.torchaudio if patch else None)
        if patch is None and (vision is None or audio is None):
            self.warnings.append(
                (
                    "companions",
                    f"torch {torch}: no known torchvision/torchaudio pairing; set torchvision and"
                    " torchaudio (or 'none') to install them",
                )
            )
        return self._cell(
            merged, origin, spec, request, cuda_full=cuda_full, cudnn=cudnn, companions=(vision, audio)
        )

    def _cell(
        self,
        merged: Combination,
        origin: str,
        spec: BaseSpec,
        request: rules.Request,
        *,
        cuda_full: str | None,
        cudnn: str | None,
        companions: tuple[str | None, str | None],
    ) -> Cell:
        """Assemble the admitted ``request``: its base image, readable tag and id. ``cuda_full`` is
        the toolkit version the base image is chosen by (the request's, else the table's)."""
        torch, cuda, flavour, python, os_name = (
            request.torch,
            request.cuda,
            request.flavour,
            request.python,
            request.os,
        )
        release = self.compat.torch_release(torch)
        cudnn_major = version_key(cudnn)[0] if cudnn else None
        cudnn_tag = ""
        if cudnn_major == 8 and cuda != "cpu":
            cudnn_tag = self.compat.cudnn_tag(cuda, cudnn_major)
        image_values = {
            "cuda": cuda,
            "cuda_full": cuda_full or "",
            "cudnn": str(cudnn_major or ""),
            "cudnn_tag": cudnn_tag,
            "flavour": flavour,
            # nvidia/cuda's own flavours: a runtime cell needs only `base` (the NVIDIA environment
            # and cudart), since torch's wheel brings every other CUDA library itself
            "image_flavour": "devel" if flavour == "devel" else "base",
            "os": os_name,
            "python": python,
        }
        image_where = self.where(("bases", request.base, "image"))
        base_image = naming.fill_placeholders(request.image, image_values, image_where)
        if not naming.is_reference(base_image):
            raise InputError(f"{image_where}: {base_image!r} is not a valid image reference")
        _refuse_unless(rules.IMAGE_RULES, replace(request, image=base_image), self.compat)
        tag_path = ("bases", request.base, "tag") if spec.tag else ("publish", "tags", "readable")
        readable = naming.readable_tag(
            spec.tag or self.matrix.publish.tags.readable,
            naming.tag_values(
                torch=torch,
                cuda=cuda,
                cudnn_major=cudnn_major,
                flavour=flavour,
                os=os_name,
                python=python,
                base=request.base,
            ),
            self.where(tag_path),
        )
        vision, audio = companions
        return Cell(
            id=naming.cell_id(request.base, torch, cuda, python, flavour),
            origin=origin,
            base=request.base,
            base_image=base_image,
            local_base=self.local_base(request.base, spec),
            os=os_name,
            flavour=flavour,
            torch=torch,
            torchvision=None if vision in (None, "none") else vision,
            torchaudio=None if audio in (None, "none") else audio,
            cuda=cuda,
            cuda_full=cuda_full,
            variant=cuda_variant(cuda),
            cudnn=cudnn,
            python=python,
            python_from_base=request.base_python is not None,
            stack=request.stack,
            pip_packages=tuple(merged.get("pip_packages") or ()),
            apt_packages=tuple(merged.get("apt_packages") or ()),
            env=tuple(sorted((merged.get("env") or {}).items())),
            build_args=tuple(sorted((merged.get("build_args") or {}).items())),
            readable_tag=readable,
            unknown=request.stack is None and (release is None or release.patch(torch) is None),
            numpy_cap=release.numpy if release else None,
            base_carries_cuda=request.carries_cuda,
        )


def plan_matrix(matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat | None = None) -> Plan:
    """Expand and resolve; raises InputError for a matrix that cannot be planned at all."""
    _check_paths(matrix, root, doc)
    resolver = _Resolver(matrix, root, doc, compat or load_compat())
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
    cells: list[Cell] = []
    refused: list[Refusal] = []
    by_id: dict[str, Cell] = {}
    by_tag: dict[str, Cell] = {}
    implied: set[str] = set()  # cells added as a front end's parent, not listed themselves
    for combination, origin in zip(expansion.combinations, expansion.origins, strict=True):
        try:
            resolved = resolver.resolve(combination, origin)
        except _Refused as refusal:
            refused.append(Refusal(combination, origin, refusal.reason))
            continue
        for cell in resolved:
            parent_of_frontend = len(resolved) > 1 and cell is resolved[0]
            twin = by_id.get(cell.id)
            if twin is not None and (parent_of_frontend or twin.id in implied):
                if replace(twin, origin="") != replace(cell, origin=""):
                    raise InputError(
                        f"{doc.name}: {origin} asks for a front end of {cell.id} with other settings than"
                        " the cell itself (env, packages, build args); give them to the cell without"
                        " the front end, which the front end is built FROM"
                    )
                if not parent_of_frontend:
                    implied.discard(cell.id)  # listed after all: it keeps its place
                continue
            if twin is not None:
                where = (
                    "two axis values"  # e.g. torch "2.1" and "2.1.2", the same release
                    if cell.origin == twin.origin == "axes"
                    else f"{twin.origin} and {cell.origin}"
                )
                raise InputError(f"{doc.name}: {where} make the same cell {cell.id}; list it once")
            tag_twin = by_tag.get(cell.readable_tag)
            if tag_twin is not None:
                raise InputError(
                    f"{doc.name}: cells {tag_twin.id} and {cell.id} would share the tag"
                    f" {cell.readable_tag!r}; add {{python}} or {{base}} to publish.tags.readable"
                )
            if parent_of_frontend:
                implied.add(cell.id)
            by_id[cell.id] = cell
            by_tag[cell.readable_tag] = cell
            cells.append(cell)
    if not cells:
        detail = f"; first refusal: {refused[0].describe()}" if refused else ""
        raise InputError(f"{doc.name}: the matrix has no buildable cell{detail}")
    _refuse_shared_immutable_tags(cells, matrix, doc)
    local_bases = tuple(
        local for name, spec in matrix.bases.items() if (local := resolver.local_base(name, spec)) is not None
    )
    return Plan(
        matrix=matrix,
        root=root,
        source_name=doc.name,
        cells=tuple(cells),
        refused=tuple(refused),
        warnings=collapse(warnings + resolver.warnings),
        local_bases=local_bases,
        compat=resolver.compat,
    )


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


def load_plan(path: Path, compat: Compat | None = None) -> Plan:
    """Read, validate and plan a matrix file: the one entry point every CLI verb uses."""
    doc = read_yaml_file(path)
    as_mapping(doc)
    matrix = validate_matrix(doc)
    return plan_matrix(matrix, path.resolve().parent, doc, compat)
