"""Step 2 of planning: each combination becomes a typed cell, or a refusal with its reason.

Defaults merged, versions resolved against the compatibility data, the ordered rules of
``imagekit.plan.rules`` applied; a base built from a local context is recorded once. Which kind of cell
a combination makes (``imagekit.plan.cells``) is decided here and nowhere else.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, cast

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.paths import inside
from imagekit.core.platforms import Platform
from imagekit.core.versions import cuda_variant, minor_of, version_key
from imagekit.core.yamlsource import SourceDocument, format_path
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.facts.compat import Compat
from imagekit.plan import rules
from imagekit.plan.advisories import AdvisoryPolicy
from imagekit.plan.cells import CellFields, FrontendCell, ImageCell, LocalBase, StackCell, WheelCell
from imagekit.plan.expand import Combination
from imagekit.plan.schema import BaseSpec, Matrix
from imagekit.plan.schema_values import ServedFrontend


class Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refuse_unless(order: tuple[rules.Rule, ...], request: rules.Request, compat: Compat) -> None:
    reason = rules.first_refusal(order, request, compat)
    if reason is not None:
        raise Refused(reason)


class Resolver:
    """Turns one combination into a Cell: defaults merged, versions resolved, rules applied."""

    def __init__(self, matrix: Matrix, root: Path, doc: SourceDocument, compat: Compat) -> None:
        self.matrix = matrix
        self.root = root
        self.doc = doc
        self.compat = compat
        self.warnings: list[tuple[str, str]] = []  # (kind, text)
        self.local_bases: dict[tuple[str, str], LocalBase] = {}  # by (name, platform)
        self._where: dict[tuple[str | int, ...], str] = {}
        pip = matrix.sources.pip
        self.wheelhouse = bool(pip.find_links or pip.no_index)
        self.torch_source: rules.TorchSource = (
            "wheelhouse" if pip.find_links else "index" if pip.torch_index_url else "pypi"
        )
        self.advisories = AdvisoryPolicy(matrix.advisories, root, doc, compat)

    def where(self, path: tuple[str | int, ...]) -> str:
        # asked twice per cell (its base's image and tag entries) and read only on an error: each
        # base's answer is worked out once
        found = self._where.get(path)
        if found is None:
            found = self._where[path] = f"{self.doc.where(path)}: {format_path(path)}"
        return found

    def local_base(self, name: str, spec: BaseSpec, platform: Platform) -> LocalBase | None:
        if spec.build is None:
            return None
        if (name, platform.name) not in self.local_bases:
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
            arch = {"arch": platform.arch}
            args_where = self.where(("bases", name, "build", "args"))
            self.local_bases[name, platform.name] = LocalBase(
                name=name,
                image=naming.fill_placeholders(spec.image, arch, self.where(("bases", name, "image"))),
                context=context,
                dockerfile=spec.build.dockerfile,
                args=tuple(
                    sorted(
                        (k, naming.fill_placeholders(v, arch, args_where)) for k, v in spec.build.args.items()
                    )
                ),
                platform=platform.name,
            )
            self._one_platform_per_tag(name, spec)
        return self.local_bases[name, platform.name]

    def _one_platform_per_tag(self, name: str, spec: BaseSpec) -> None:
        """The engine's store holds one platform per tag: a base built locally for two platforms
        under one name would be built twice into one tag, the second replacing the first."""
        images = [b.image for (n, _), b in self.local_bases.items() if n == name]
        if len(images) > len(set(images)):
            raise InputError(
                f"{self.where(('bases', name, 'image'))}: {spec.image!r} is built here for two"
                " platforms, but a local image tag holds one; put {arch} in it (e.g. :bookworm-{arch})"
            )

    def resolve(
        self, combination: Combination, origin: str
    ) -> tuple[ImageCell] | tuple[ImageCell, FrontendCell]:
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
        cell: ImageCell
        if spec.stack is not None:
            cell = self._stack_cell(merged, origin, base_name, spec, frontend)
        else:
            cell = self._wheel_cell(merged, origin, base_name, spec)
        if frontend == "none":
            return (cell,)
        return cell, self._frontend_cell(cell, cast(ServedFrontend, frontend), origin)

    def _frontend_cell(self, parent: ImageCell, frontend: ServedFrontend, origin: str) -> FrontendCell:
        """A front end FROM its parent cell's image (shares every layer below); its tags say which."""
        where = self.where(("publish", "tags", "readable"))
        publish = self.matrix.publish
        inherited = {f.name: getattr(parent, f.name) for f in fields(CellFields)}
        return FrontendCell(
            **{
                **inherited,
                "id": naming.cell_id(
                    parent.base,
                    parent.torch,
                    parent.cuda,
                    parent.python,
                    parent.flavour,
                    frontend,
                    platforms.get(parent.platform),
                ),
                "origin": origin,
                "base_image": naming.reference(
                    naming.repository(publish.registry, publish.repository), parent.image_tag
                ),
                "readable_tag": naming.readable_tag(f"{parent.readable_tag}-{frontend}", {}, where),
            },
            frontend=frontend,
            parent=parent.id,
        )

    def _stack_cell(
        self, merged: Combination, origin: str, base_name: str, spec: BaseSpec, frontend: str
    ) -> StackCell:
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
            platform=merged.get("platform") or platforms.DEFAULT,
        )
        _refuse_unless(rules.STACK_RULES, request, self.compat)
        common = self._common(
            merged, origin, spec, request, cuda_full=stack.cuda, cudnn=stack.cudnn, companions=(None, None)
        )
        # a stack brings its own Python environment: its pip and setuptools are not known here
        common["advisories"] = self._advisories(request, venv=False)
        release = self.compat.torch_release(stack.torch)
        numpy_cap = release.numpy if release else None
        return StackCell(**common, stack=stack, numpy_cap=numpy_cap, **self._additions(merged))

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
            nvcc_from_wheels=spec.nvcc == "wheels",
            base_python=spec.python,
            base_flavours=tuple(spec.flavours) if spec.flavours is not None else None,
            os=os_name,
            torch_source=self.torch_source,
            torchvision=merged.get("torchvision"),
            torchaudio=merged.get("torchaudio"),
            image=spec.image or "",
            pip_packages=tuple(merged.get("pip_packages") or ()),
            platform=merged.get("platform") or platforms.DEFAULT,
        )

    def _wheel_cell(self, merged: Combination, origin: str, base_name: str, spec: BaseSpec) -> WheelCell:
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
        common = self._common(
            merged, origin, spec, request, cuda_full=cuda_full, cudnn=cudnn, companions=(vision, audio)
        )
        common["advisories"] = self._advisories(request, venv=True)
        return WheelCell(
            **common,
            local_base=self.local_base(request.base, spec, platforms.get(request.platform)),
            python_from_base=request.base_python is not None,
            nvcc_from_wheels=request.nvcc_from_wheels
            and request.flavour == "devel"
            and request.cuda != "cpu",
            numpy_cap=release.numpy if release else None,
            **self._additions(merged),
        )

    def _advisories(self, request: rules.Request, venv: bool) -> tuple[AdvisoryFinding, ...]:
        """The advisories that affect what the cell installs, checked last (a combination refused
        by a rule is never held against them); one at or above the threshold, unwaived, refuses it."""
        installed = self.advisories.installed(request.torch, venv)
        found, refusal = self.advisories.findings(request, installed)
        if refusal is not None:
            raise Refused(refusal)
        return found

    @staticmethod
    def _additions(merged: Combination) -> dict[str, Any]:
        """What a cell adds to its base besides torch (a front end adds nothing of these)."""
        return {
            "pip_packages": tuple(merged.get("pip_packages") or ()),
            "apt_packages": tuple(merged.get("apt_packages") or ()),
            "build_args": tuple(sorted((merged.get("build_args") or {}).items())),
        }

    def _common(
        self,
        merged: Combination,
        origin: str,
        spec: BaseSpec,
        request: rules.Request,
        *,
        cuda_full: str | None,
        cudnn: str | None,
        companions: tuple[str | None, str | None],
    ) -> dict[str, Any]:
        """The fields every kind has, for the admitted ``request``: its base image, readable tag
        and id. ``cuda_full`` is the toolkit version the base image is chosen by (the request's,
        else the table's)."""
        torch, cuda, flavour, python, os_name = (
            request.torch,
            request.cuda,
            request.flavour,
            request.python,
            request.os,
        )
        platform = platforms.get(request.platform)
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
            # and cudart), since torch's wheel brings every other CUDA library itself; so does a
            # devel cell whose nvcc comes from NVIDIA's wheels (`nvcc: wheels`)
            "image_flavour": "devel" if flavour == "devel" and not request.nvcc_from_wheels else "base",
            "os": os_name,
            "python": python,
            "arch": platform.arch,
        }
        image_where = self.where(("bases", request.base, "image"))
        base_image = naming.fill_placeholders(request.image, image_values, image_where)
        if not naming.is_reference(base_image):
            raise InputError(f"{image_where}: {base_image!r} is not a valid image reference")
        _refuse_unless(rules.IMAGE_RULES, request.with_image(base_image), self.compat)
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
        return {
            "id": naming.cell_id(request.base, torch, cuda, python, flavour, platform=platform),
            "origin": origin,
            "base": request.base,
            "base_image": base_image,
            "os": os_name,
            "flavour": flavour,
            "torch": torch,
            "torchvision": None if vision in (None, "none") else vision,
            "torchaudio": None if audio in (None, "none") else audio,
            "cuda": cuda,
            "cuda_full": cuda_full,
            "variant": cuda_variant(cuda),
            "cudnn": cudnn,
            "python": python,
            "env": tuple(sorted((merged.get("env") or {}).items())),
            "readable_tag": readable,
            "platform": platform.name,
            "base_carries_cuda": request.carries_cuda,
        }
