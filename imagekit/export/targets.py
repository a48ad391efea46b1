"""Exports of a plan for other engines: GitHub Actions' ``strategy.matrix``, plain JSON, and a
``docker buildx bake`` file with one target per cell.

A cell's build context is assembled by imagekit (Dockerfile, the in-image check script, the
wheelhouse); bake needs it on disk, so ``materialise_contexts`` writes each cell's context under
``DIR/<cell-id>/`` and the bake targets point there.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path, PurePosixPath
from typing import Any

from imagekit.core import naming, platforms
from imagekit.core.atomic import atomic_write
from imagekit.core.clock import REPRODUCIBLE_EPOCH
from imagekit.core.errors import InputError
from imagekit.core.paths import os_problem, refuse_links
from imagekit.core.safetypes import secret_env_name
from imagekit.core.text import shown
from imagekit.engine.buildx import compression_options, registry_cache
from imagekit.plan.cells import Cell, FrontendCell, LocalBase, Plan, local_base_of
from imagekit.plan.source import source_state
from imagekit.render.context import DOCKERFILE_NAME
from imagekit.render.contract import PIP_NETRC_SECRET
from imagekit.render.dockerfile import RenderedCell

GITHUB_MAX_JOBS = 256  # GitHub Actions' limit on the jobs one matrix may generate
_BAKE_NAME = re.compile(r"[^A-Za-z0-9_-]")


def bake_target_name(cell_id: str) -> str:
    """Bake target names allow ``[A-Za-z0-9_-]``: dots (versions) become underscores."""
    return _BAKE_NAME.sub("_", cell_id)


def base_target_name(base: LocalBase) -> str:
    return "base-" + bake_target_name(base.id)


# -- GitHub Actions and JSON -----------------------------------------------------------------------


def github_entry(cell: Cell) -> dict[str, str]:
    """One ``include`` entry: strings only, so every value reads the same in an expression. The
    platform and its arch pick the job's runner (an arm64 cell builds on an arm64 runner)."""
    return {
        "id": cell.id,
        "torch": cell.torch,
        "cuda": cell.cuda,
        "python": cell.python,
        "flavour": cell.flavour,
        "base": cell.base,
        "os": cell.os,
        "platform": cell.platform,
        "arch": platforms.get(cell.platform).arch,
    }


def github_matrix(cells: Sequence[Cell]) -> dict[str, Any]:
    """``{"include": [...]}`` for ``strategy.matrix: ${{ fromJSON(...) }}``."""
    if not cells:
        raise InputError("the matrix has no cells; GitHub Actions refuses an empty strategy.matrix")
    if len(cells) > GITHUB_MAX_JOBS:
        raise InputError(
            f"{len(cells)} cells, but GitHub Actions runs at most {GITHUB_MAX_JOBS} jobs per matrix;"
            " split the run with --only GLOB"
        )
    return {"include": [github_entry(cell) for cell in cells]}


def json_export(plan: Plan, rendered: Sequence[RenderedCell], today: date) -> dict[str, Any]:
    """Every cell with what an external tool needs to build it: versions, base, args, tags, labels."""
    cells = []
    source = source_state(plan.root)
    for item in rendered:
        entry: dict[str, Any] = item.cell.summary()
        entry["readable_tag"] = item.cell.readable_tag
        entry["tags"] = list(item.names(plan.matrix.publish, today).references())
        entry["input_digest"] = item.input_digest
        entry["build_args"] = dict(item.build_args)
        entry["build_labels"] = item.build_labels(source)
        local = local_base_of(item.cell)
        entry["local_base"] = local.image if local else None
        cells.append(entry)
    return {"matrix": plan.source_name, "repository": plan.repository, "cells": cells}


# -- buildx bake -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaterialisedContext:
    cell_id: str
    directory: Path
    files: int


# Files at least this large (wheels) are hard-linked, not copied; smaller ones (imagekit's own
# check script) are copied, so that editing a context in place never edits the source.
_LINK_BYTES = 1 << 20


def _place(source: Path, target: Path) -> None:
    """A hard link for a large file when source and target share a file system (a wheelhouse is
    tens of GB), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if source.stat().st_size >= _LINK_BYTES:
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)


# Written into each bake context: the mark that a later export may replace the directory whole.
CONTEXT_MARK = ".imagekit-bake-context"


def _written_by_imagekit(directory: Path) -> bool:
    """Whether ``directory`` is a bake context an earlier export made (it holds the mark, a
    regular file). Anything else there is someone's, and is never removed."""
    try:
        return stat.S_ISREG(os.lstat(directory / CONTEXT_MARK).st_mode)
    except OSError:
        return False


def materialise_context(rendered: RenderedCell, directory: Path, root: Path) -> MaterialisedContext:
    """Write one cell's build context to ``directory`` (inside ``root``, the --context-dir),
    replacing what an earlier run left there; never through (or by removing) a symbolic link."""
    refuse_links(directory, root)
    if directory.exists() and not _written_by_imagekit(directory):
        raise InputError(
            f"{directory} exists and is not a bake context imagekit wrote (no {CONTEXT_MARK} in it);"
            " imagekit replaces only its own: move it away, or pass another --context-dir"
        )
    try:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
    except OSError as exc:
        raise os_problem(exc, directory, "make the bake context") from None
    atomic_write(
        directory / CONTEXT_MARK,
        "written by `imagekit matrix --format bake`; replaced by the next\n",
        inside=root,
    )
    atomic_write(directory / DOCKERFILE_NAME, rendered.dockerfile, inside=root)
    for name, source in rendered.context_files:
        # the directory was just made empty: only the name itself could lead out of it
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
            raise InputError(f"cell {rendered.cell.id}: context path {shown(name)} leaves its directory")
        target = directory / name
        try:
            _place(source, target)
        except OSError as exc:
            raise InputError(f"cannot write {target} for the bake context: {exc.strerror}") from None
    return MaterialisedContext(rendered.cell.id, directory, len(rendered.context_files) + 1)


def materialise_contexts(rendered: Sequence[RenderedCell], context_dir: Path) -> list[MaterialisedContext]:
    return [materialise_context(item, context_dir / item.cell.id, context_dir) for item in rendered]


def _local_bases(rendered: Sequence[RenderedCell]) -> dict[str, LocalBase]:
    bases: dict[str, LocalBase] = {}
    for item in rendered:
        base = local_base_of(item.cell)
        if base is not None:
            bases.setdefault(base.id, base)
    return bases


# The environment variable a BuildKit bake file's targets read the pip index netrc from (bake's
# `secret: id=...,env=...`): the whole netrc, one `machine HOST login LOGIN password TOKEN` per
# credential. An env var, not a file, so that no path to a secret is in the bake file, and CI
# secrets map onto it directly.
BAKE_NETRC_ENV = "IMAGEKIT_PIP_NETRC"


def bake_netrc_hint(plan: Plan) -> str | None:
    """What the user must set before baking a BuildKit export with index credentials (None: nothing)."""
    credentials = plan.matrix.sources.pip.credentials
    if not plan.matrix.build.on_buildkit or not credentials:
        return None
    lines = " ".join(
        f"machine {c.host} login {c.login} password ${secret_env_name(c.secret)}" for c in credentials
    )
    return (
        f"set {BAKE_NETRC_ENV} to the index netrc before `docker buildx bake` ({lines!r}, the"
        " values filled in): buildx mounts an unset variable as an empty file, and a cached step"
        " never notices"
    )


def _refuse_host_network(item: RenderedCell) -> None:
    """bake 0.13.1 drops `network` and `entitlements` and has no `--allow`: a `RUN --network=host`
    step fails there with `network.host is not allowed`, so such a cell is refused here."""
    if "--network=host" in item.dockerfile:
        raise InputError(
            f"cell {item.cell.id}: its Dockerfile has a RUN --network=host step, which docker buildx"
            " bake cannot allow (no --allow network.host): build it with"
            " `imagekit build --builder buildkit` instead"
        )


def _buildkit_target(plan: Plan, item: RenderedCell, staging_name: str, staging_ref: str) -> dict[str, Any]:
    """A BuildKit cell's target fields beyond the classic ones, each written out in full (bake's
    `inherits` appends lists: a cell would get another cell's cache)."""
    _refuse_host_network(item)
    publish = plan.matrix.publish
    output = ["type=image", f"name={staging_ref}"]
    fields: dict[str, Any] = {
        # provenance makes an index with the build's start time: never the same digest twice
        "attest": ["type=provenance,disabled=true"],
    }
    if publish.registry is not None:
        # No rewrite-timestamp: dockerd 26's image exporter always unpacks, which conflicts with it.
        output.append("push=true")
        cache_from, cache_to = registry_cache(naming.build_cache(staging_name, item.cell.image_tag))
        fields["cache-from"] = [cache_from]
        fields["cache-to"] = [cache_to]
    fields["output"] = [",".join((*output, *compression_options(item.build.layer_compression)))]
    if plan.matrix.sources.pip.credentials:
        fields["secret"] = [f"id={PIP_NETRC_SECRET},env={BAKE_NETRC_ENV}"]
    return fields


def bake_file(plan: Plan, rendered: Sequence[RenderedCell], context_dir: Path) -> dict[str, Any]:
    """A ``docker buildx bake`` JSON file: one target per cell, a target per local base.

    A cell on a local base names that base's target as the build context of its FROM image
    (``contexts: {image: "target:..."}``), so bake builds the base first, as ``imagekit build`` does.

    A cell target carries only a staging tag, never the final (readable, moving) tags: ``bake
    --push`` must not put an unverified image where users pull from. The final tags are written
    by ``imagekit publish`` after ``bake-import`` and ``verify``.

    A cell rendered for BuildKit also carries what ``imagekit build --builder buildkit`` passes:
    no provenance, the index netrc as a secret (from ``$IMAGEKIT_PIP_NETRC``, never a value here),
    the cell's registry cache and its compression; with a publish registry its output pushes the
    staging tag (``bake --push`` or not). Its steps' networks are in its Dockerfile; a
    ``--network=host`` step is refused (bake cannot allow it).
    """
    targets: dict[str, dict[str, Any]] = {}
    made_by: dict[str, str] = {}  # target name -> the cell or base it was made for
    group: list[str] = []
    publish = plan.matrix.publish
    staging = naming.repository(publish.registry, publish.staging_repository)
    source = source_state(plan.root)  # its labels and its time, as `imagekit build` gives them
    for name, base in sorted(_local_bases(rendered).items()):
        made_by[base_target_name(base)] = f"local base {name}"
        targets[base_target_name(base)] = {
            "context": str(base.context),
            "dockerfile": base.dockerfile,
            "args": dict(base.args),
            "tags": [base.image],
            "labels": {naming.LOCAL_BASE_LABEL: base.name},
            "platforms": [base.platform],
        }
    for item in rendered:
        cell = item.cell
        name = bake_target_name(cell.id)
        if name in made_by:
            raise InputError(f"{made_by[name]} and {cell.id} map to one bake target name {name!r}")
        made_by[name] = cell.id
        target: dict[str, Any] = {
            "context": str(context_dir / cell.id),
            "dockerfile": DOCKERFILE_NAME,
            "args": dict(item.build_args),
            "tags": [naming.reference(staging, naming.staging_tag(item.input_digest))],
            "labels": item.build_labels(source),
            "platforms": [cell.platform],
        }
        if item.build.on_buildkit:
            target.update(_buildkit_target(plan, item, staging, target["tags"][0]))
            # buildx's epoch for created times, as `imagekit build --builder buildkit` sets it
            target["args"]["SOURCE_DATE_EPOCH"] = str(REPRODUCIBLE_EPOCH)
        local = local_base_of(cell)
        if local is not None:
            target["contexts"] = {local.image: f"target:{base_target_name(local)}"}
        elif isinstance(cell, FrontendCell):
            # a front end: FROM its cell's image, which this bake file builds as another target
            target["contexts"] = {cell.base_image: f"target:{bake_target_name(cell.parent)}"}
        targets[name] = target
        group.append(name)
    return {"group": {"default": {"targets": group}}, "target": targets}
