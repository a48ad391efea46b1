"""Feed ``docker buildx bake --metadata-file`` back into ``.imagekit/report.json``.

Bake writes one object per target (``containerimage.digest``, ``containerimage.config.digest``,
``image.name``...) plus ``buildx.*`` keys of its own (build warnings). Each cell target becomes a
``built`` record carrying the manifest digest and, as its image id, the config digest (what the
engine shows for an image bake ``--load``-ed, and what ``verify`` starts), so verify and publish
work from the same report as after ``imagekit build``. The record's tags are the matrix's final
tags (what ``publish`` promotes to), not bake's staging tag. Cells already in the report and not
in the file are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

from imagekit.clock import timestamp
from imagekit.errors import InputError
from imagekit.export import bake_target_name
from imagekit.naming import DIGEST
from imagekit.render import RenderedCell
from imagekit.schema import Publish
from imagekit.store import BuildReport, CellResult

ENGINE = "docker buildx bake"


@dataclass(frozen=True)
class BakeTarget:
    name: str
    digest: str  # containerimage.digest: the manifest (or index) digest
    config_digest: str | None  # containerimage.config.digest: the image id the engine shows
    names: tuple[str, ...]  # image.name, split at commas


def read_metadata(path: Path) -> dict[str, BakeTarget]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no bake metadata file at {path}; pass bake's --metadata-file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a JSON metadata file ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object of targets, found {type(data).__name__}")
    targets: dict[str, BakeTarget] = {}
    for name, entry in data.items():
        if name.startswith("buildx.") or not isinstance(entry, Mapping):
            continue  # bake's own keys, e.g. buildx.build.warnings
        digest = entry.get("containerimage.digest")
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise InputError(f"{path}: target {name}: no valid containerimage.digest ({digest!r})")
        config = entry.get("containerimage.config.digest")
        raw_names = entry.get("image.name")
        names = tuple(n for n in str(raw_names).split(",") if n) if isinstance(raw_names, str) else ()
        targets[name] = BakeTarget(
            name, digest, config if isinstance(config, str) and DIGEST.fullmatch(config) else None, names
        )
    if not targets:
        raise InputError(f"{path}: no target with a containerimage.digest (was it written by bake?)")
    return targets


def results_from_bake(
    targets: Mapping[str, BakeTarget], rendered: Sequence[RenderedCell], publish: Publish, day: date
) -> tuple[list[CellResult], list[str]]:
    """(a result per cell target found, target names that are no cell of the matrix)."""
    by_name = {bake_target_name(item.cell.id): item for item in rendered}
    results: list[CellResult] = []
    for name, target in targets.items():
        item = by_name.get(name)
        if item is None:
            continue
        results.append(
            CellResult(
                id=item.cell.id,
                kind="cell",
                status="built",
                base_image=item.cell.base_image,
                image_id=target.config_digest,
                # The matrix's final tags, which publish promotes to; the image itself carries only
                # bake's staging tag (target.names) until it is verified and published.
                tags=item.names(publish, day).references(),
                input_digest=item.input_digest,
                image_digest=target.digest,
            )
        )
    unknown = sorted(name for name in targets if name not in by_name and not name.startswith("base-"))
    return results, unknown


def merge(previous: BuildReport | None, results: Sequence[CellResult], matrix: str) -> BuildReport:
    """The previous report with ``results`` replacing the cells of the same id (order kept)."""
    fresh = {r.id: r for r in results}
    if previous is None:
        return BuildReport(
            matrix=matrix,
            started=timestamp(),
            duration_s=0.0,
            engine=ENGINE,
            cells=tuple(results),
            bases=(),
        )
    kept = tuple(fresh.pop(r.id) if r.id in fresh else r for r in previous.cells)
    return replace(previous, cells=kept + tuple(r for r in results if r.id in fresh))


def as_json(results: Sequence[CellResult], unknown: Sequence[str]) -> dict[str, Any]:
    return {
        "imported": [{"id": r.id, "image_digest": r.image_digest, "tags": list(r.tags)} for r in results],
        "unknown_targets": list(unknown),
    }
