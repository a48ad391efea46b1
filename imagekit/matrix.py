"""Stage 1: a validated matrix becomes a plan of concrete cells and refused combinations.

``expand`` implements GitHub Actions' matrix semantics on plain dicts; ``plan_matrix`` resolves
each combination against the compatibility data into a frozen ``Cell`` or a ``Refusal``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from itertools import product
from pathlib import Path
from typing import Any

from imagekit.compat import Compat, Stack, cuda_variant, load_compat, minor_of, version_key
from imagekit.errors import InputError
from imagekit.schema import AXIS_KEYS, BaseSpec, Matrix, validate_matrix
from imagekit.yamlsource import SourceDocument, as_mapping, format_path, read_yaml_file

Combination = dict[str, Any]

_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REFERENCE = re.compile(
    r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)


# -- expansion (GitHub Actions semantics) ---------------------------------------------------------


@dataclass(frozen=True)
class Expansion:
    combinations: tuple[Combination, ...]
    origins: tuple[str, ...]  # where each combination came from: "axes" or "include[i]"
    unused_excludes: tuple[int, ...]


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
    cuda_full: str | None  # full toolkit version in the base (12.1.1), None for cpu
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

    def select(self, patterns: Sequence[str]) -> tuple[Cell, ...]:
        """The cells whose id matches any shell-style pattern (all cells when none given)."""
        if not patterns:
            return self.cells
        return tuple(c for c in self.cells if any(fnmatchcase(c.id, p) for p in patterns))


# -- resolution -----------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _tag_safe(version: str) -> str:
    return version.replace("+", "-")


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def fill_placeholders(pattern: str, values: Mapping[str, str], where: str) -> str:
    """Replace ``{name}`` with ``values[name]``; nothing else (no attributes, no format specs).

    ``str.format`` would let a pattern reach attributes (``{torch.__class__}``) or ask for a
    billion-character padding; user patterns get plain substitution only.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            known = ", ".join("{" + k + "}" for k in values)
            raise InputError(f"{where}: unknown placeholder {{{name}}} in {pattern!r}; use {known}")
        return values[name]

    filled = _PLACEHOLDER.sub(substitute, pattern)
    if "{" in filled or "}" in filled:
        raise InputError(f"{where}: unbalanced brace in {pattern!r}")
    return filled


class _Resolver:
    def __init__(self, matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat) -> None:
        self.matrix = matrix
        self.root = root
        self.doc = doc
        self.compat = compat
        self.warnings: list[str] = []
        self.local_bases: dict[str, LocalBase] = {}

    def where(self, path: tuple[str | int, ...]) -> str:
        return f"{self.doc.where(path)}: {format_path(path)}"

    def local_base(self, name: str, spec: BaseSpec) -> LocalBase | None:
        if spec.build is None:
            return None
        if name not in self.local_bases:
            where = self.where(("bases", name, "build", "context"))
            context = self.root / spec.build.context
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

    def resolve(self, combination: Combination, origin: str) -> Cell:
        merged: Combination = {**self.matrix.defaults.set_keys(), **combination}
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
        allow_unknown = bool(merged.get("allow_unknown", self.matrix.allow_unknown))
        if spec.stack is not None:
            return self._stack_cell(merged, origin, base_name, spec)
        return self._wheel_cell(merged, origin, base_name, spec, allow_unknown)

    def _stack_cell(self, merged: Combination, origin: str, base_name: str, spec: BaseSpec) -> Cell:
        assert spec.stack is not None
        stack = self.compat.stacks.get(spec.stack)
        if stack is None:
            raise InputError(
                f"{self.where(('bases', base_name, 'stack'))}: unknown stack {spec.stack!r};"
                f" imagekit knows {', '.join(self.compat.stacks)}"
            )
        image = spec.image or stack.image
        fixed = f"{image} is a fixed stack (torch {stack.torch}, CUDA {stack.cuda}, Python {stack.python})"
        cuda = minor_of(stack.cuda)
        if merged.get("cuda") not in (None, cuda, stack.cuda):
            raise _Refused(
                f"{fixed}: it never crosses the CUDA axis, so CUDA {merged['cuda']} cannot exist;"
                " give it its own row through include"
            )
        if merged.get("torch") not in (None, stack.torch):
            raise _Refused(f"{fixed}: installing torch {merged['torch']} would replace NVIDIA's build")
        if merged.get("python") not in (None, stack.python):
            raise _Refused(f"{fixed}: it has no Python {merged['python']}")
        pip = self.matrix.sources.pip
        if merged.get("pip_packages") and (pip.find_links or pip.no_index):
            raise _Refused(
                f"{fixed}: its extra pip packages go into the base's own Python, which a wheelhouse"
                " build stage cannot reach; install them from an index for this row"
            )
        flavour = merged.get("flavour") or "devel"
        if flavour not in stack.flavours:
            raise _Refused(f"{fixed}: it has no {flavour} flavour (only {', '.join(stack.flavours)})")
        cudnn_major = version_key(stack.cudnn)[0]
        return self._cell(
            merged,
            origin,
            base_name,
            spec,
            image=image,
            os_name=spec.os or stack.os,
            flavour=flavour,
            torch=stack.torch,
            vision_audio=(None, None),
            cuda=cuda,
            cuda_full=stack.cuda,
            cudnn=stack.cudnn,
            cudnn_major=cudnn_major,
            python=stack.python,
            python_from_base=True,
            stack=stack,
            unknown=False,
        )

    def _wheel_cell(
        self, merged: Combination, origin: str, base_name: str, spec: BaseSpec, allow_unknown: bool
    ) -> Cell:
        compat = self.compat
        requested = merged.get("torch")
        if requested is None:
            raise InputError(f"{self.doc.name}: {origin} gives a combination without `torch`")
        torch = compat.resolve_torch(requested)
        release = compat.torch_release(torch)
        unknown = False
        if release is None or release.patch(torch) is None:
            newest = compat.newest_torch()
            if len(version_key(torch)) < 3:
                raise _Refused(
                    f"torch {torch} is not in imagekit's table, so its latest patch is unknown;"
                    f" write the full version ({torch}.0)"
                )
            if release is None and version_key(torch) < version_key(newest):
                raise _Refused(f"torch {torch} is not a release imagekit knows (2.0 to {newest})")
            if not allow_unknown:
                what = "newer than" if release is None else "a patch missing from"
                raise _Refused(
                    f"torch {torch} is {what} imagekit's compatibility table (newest {newest});"
                    " set allow_unknown: true to build it anyway"
                )
            unknown = True
            self.warnings.append(
                f"torch {torch} is not in the compatibility table; admitted by allow_unknown"
            )

        carries_cuda = spec.cuda if spec.cuda is not None else "{cuda" in (spec.image or "")
        if carries_cuda and not merged.get("cuda"):
            raise InputError(f"{self.doc.name}: {origin} gives a combination on {base_name} without `cuda`")
        cuda = str(merged.get("cuda") or "cpu")
        if carries_cuda and cuda == "cpu":
            raise _Refused(f"base {base_name} carries CUDA; a cpu build belongs on a base without it")
        if not carries_cuda and cuda != "cpu":
            raise _Refused(f"base {base_name} has no CUDA toolkit; use cuda: cpu or a CUDA base")
        if "cuda" in merged and cuda != "cpu":
            cuda = minor_of(cuda)
        reason = compat.refusal_torch_cuda(torch, cuda)
        if reason:
            raise _Refused(reason)
        pip = self.matrix.sources.pip
        if release is not None and pip.torch_index_url is None and not pip.find_links:
            # torch then comes from the general index (PyPI), which carries one build per release
            wanted = cuda_variant(cuda)
            if wanted != release.pypi_default:
                raise _Refused(
                    f"with no torch_index_url torch comes from PyPI, whose torch {release.minor} is the"
                    f" {release.pypi_default} build, not {wanted}; set sources.pip.torch_index_url"
                )

        cuda_full: str | None = None
        if cuda != "cpu":
            cuda_release = compat.cuda_release(cuda)
            if merged.get("cuda_full"):
                cuda_full = str(merged["cuda_full"])
                if minor_of(cuda_full) != cuda:
                    raise _Refused(f"cuda_full {cuda_full} is not a CUDA {cuda} release")
            elif cuda_release is not None:
                cuda_full = cuda_release.image_version
            elif allow_unknown:
                raise _Refused(
                    f"CUDA {cuda} is not in the compatibility table; set cuda_full (e.g. {cuda}.0)"
                )
            else:
                raise _Refused(
                    f"CUDA {cuda} is not in imagekit's compatibility table; set allow_unknown: true"
                    " and cuda_full"
                )

        python_from_base = spec.python is not None
        os_name = spec.os
        assert os_name is not None  # schema: a non-stack base names its OS
        python = merged.get("python") or spec.python
        if python is None:
            system = compat.operating_systems.get(os_name)
            if system is None:
                raise InputError(
                    f"{self.where(('bases', base_name))}: imagekit does not know {os_name}'s Python;"
                    " set python on the base or the cell"
                )
            python = system.pythons[0]
        if python_from_base and python != spec.python:
            raise _Refused(f"base {base_name} brings Python {spec.python}, not {python}")
        if not python_from_base:
            reason = compat.refusal_os_python(os_name, python)
            if reason:
                raise _Refused(reason)
        reason = compat.refusal_python(torch, python)
        if reason:
            raise _Refused(reason)

        flavour = merged.get("flavour") or "devel"
        if spec.flavours is not None and flavour not in spec.flavours:
            raise _Refused(f"base {base_name} serves only {', '.join(spec.flavours)}")

        cudnn_major = (release.cudnn_major if release else 9) if cuda != "cpu" else None
        patch = release.patch(torch) if release else None
        vision = merged.get("torchvision") or (patch.torchvision if patch else None)
        audio = merged.get("torchaudio") or (patch.torchaudio if patch else None)
        if unknown and (vision is None or audio is None):
            self.warnings.append(
                f"torch {torch}: no known torchvision/torchaudio pairing; set torchvision and"
                " torchaudio (or 'none') to install them"
            )
        return self._cell(
            merged,
            origin,
            base_name,
            spec,
            image=spec.image or "",
            os_name=os_name,
            flavour=flavour,
            torch=torch,
            vision_audio=(vision, audio),
            cuda=cuda,
            cuda_full=cuda_full,
            cudnn=str(cudnn_major) if cudnn_major else None,
            cudnn_major=cudnn_major,
            python=python,
            python_from_base=python_from_base,
            stack=None,
            unknown=unknown,
        )

    def _cell(
        self,
        merged: Combination,
        origin: str,
        base_name: str,
        spec: BaseSpec,
        *,
        image: str,
        os_name: str,
        flavour: str,
        torch: str,
        vision_audio: tuple[str | None, str | None],
        cuda: str,
        cuda_full: str | None,
        cudnn: str | None,
        cudnn_major: int | None,
        python: str,
        python_from_base: bool,
        stack: Stack | None,
        unknown: bool,
    ) -> Cell:
        release = self.compat.torch_release(torch)
        cudnn_tag = ""
        if cudnn_major == 8 and cuda != "cpu":
            cudnn_tag = self.compat.cudnn_tag(cuda, cudnn_major)
        image_values = {
            "cuda": cuda,
            "cuda_full": cuda_full or "",
            "cudnn": str(cudnn_major or ""),
            "cudnn_tag": cudnn_tag,
            "flavour": flavour,
            "os": os_name,
            "python": python,
        }
        base_image = fill_placeholders(image, image_values, self.where(("bases", base_name, "image")))
        if not _REFERENCE.fullmatch(base_image):
            raise InputError(
                f"{self.where(('bases', base_name, 'image'))}: {base_image!r} is not a valid image reference"
            )
        stack_label = (
            "cpu" if cuda == "cpu" else f"cuda{cuda}" + (f"-cudnn{cudnn_major}" if cudnn_major else "")
        )
        tag_values = {
            "torch": _tag_safe(torch),
            "cuda": cuda,
            "cudnn": str(cudnn_major or "none"),
            "stack": stack_label,
            "flavour": flavour,
            "os": os_name,
            "python": f"py{python}",
            "base": base_name,
        }
        tag_path = ("bases", base_name, "tag") if spec.tag else ("publish", "tags", "readable")
        readable = fill_placeholders(
            spec.tag or self.matrix.publish.tags.readable, tag_values, self.where(tag_path)
        )
        if not _TAG.fullmatch(readable):
            raise InputError(f"{self.where(tag_path)}: {readable!r} is not a valid image tag")
        vision, audio = vision_audio
        accel = "cpu" if cuda == "cpu" else f"cuda{cuda}"
        cell_id = f"{base_name}-torch{_tag_safe(torch)}-{accel}-py{python}-{flavour}"
        return Cell(
            id=cell_id,
            origin=origin,
            base=base_name,
            base_image=base_image,
            local_base=self.local_base(base_name, spec),
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
            python_from_base=python_from_base,
            stack=stack,
            pip_packages=tuple(merged.get("pip_packages") or ()),
            apt_packages=tuple(merged.get("apt_packages") or ()),
            env=tuple(sorted((merged.get("env") or {}).items())),
            build_args=tuple(sorted((merged.get("build_args") or {}).items())),
            readable_tag=readable,
            unknown=unknown,
            numpy_cap=release.numpy if release else None,
        )


def plan_matrix(matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat | None = None) -> Plan:
    """Expand and resolve; raises InputError for a matrix that cannot be planned at all."""
    resolver = _Resolver(matrix, root, doc, compat or load_compat())
    expansion = expand(
        matrix.axes.as_dict(),
        [entry.set_keys() for entry in matrix.include],
        [entry.set_keys() for entry in matrix.exclude],
    )
    warnings = [
        f"{doc.where(('exclude', index))}: exclude[{index}] matches no combination"
        for index in expansion.unused_excludes
    ]
    cells: list[Cell] = []
    refused: list[Refusal] = []
    by_id: dict[str, Cell] = {}
    by_tag: dict[str, Cell] = {}
    for combination, origin in zip(expansion.combinations, expansion.origins, strict=True):
        try:
            cell = resolver.resolve(combination, origin)
        except _Refused as refusal:
            refused.append(Refusal(combination, origin, refusal.reason))
            continue
        twin = by_id.get(cell.id)
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
        by_id[cell.id] = cell
        by_tag[cell.readable_tag] = cell
        cells.append(cell)
    if not cells:
        detail = f"; first refusal: {refused[0].describe()}" if refused else ""
        raise InputError(f"{doc.name}: the matrix has no buildable cell{detail}")
    local_bases = tuple(
        local for name, spec in matrix.bases.items() if (local := resolver.local_base(name, spec)) is not None
    )
    return Plan(
        matrix=matrix,
        root=root,
        source_name=doc.name,
        cells=tuple(cells),
        refused=tuple(refused),
        warnings=tuple(warnings + resolver.warnings),
        local_bases=local_bases,
    )


def load_plan(path: Path, compat: Compat | None = None) -> Plan:
    """Read, validate and plan a matrix file: the one entry point every CLI verb uses."""
    doc = read_yaml_file(path)
    as_mapping(doc)
    matrix = validate_matrix(doc)
    return plan_matrix(matrix, path.resolve().parent, doc, compat)
