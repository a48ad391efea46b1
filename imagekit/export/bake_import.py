"""Feed ``docker buildx bake --metadata-file`` back into ``.imagekit/report.json``.

Bake writes one object per target (``containerimage.digest``, ``containerimage.config.digest``,
``image.name``...) plus ``buildx.*`` keys of its own (build warnings). Each cell target becomes a
``built`` record, so verify and publish work from the same report as after ``imagekit build``:

- its image id is what the engine shows for the image, which depends on the engine's image store
  (measured on dockerd 26, buildx 0.13.1): the *manifest* (or index) digest,
  ``containerimage.digest``, on the containerd store; the *config* digest,
  ``containerimage.config.digest``, on the overlay2 store. The file alone does not say which
  (a push reports both digests on either store), so the engine is asked which of the two it
  holds; without an answer, the config digest when the file has one, else the digest (an index
  with a provenance attestation has no config digest: that is the containerd store's);
- its image digest is ``containerimage.digest``;
- it is recorded as staged (what ``verify --pull`` and ``publish`` start from) when the registry's
  staging tag of the cell names that very digest: a bake ``--push`` happened, not just a load;
- its tags are the matrix's final tags (what ``publish`` promotes to), not bake's staging tag.

Cells already in the report and not in the file are kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit.core import naming
from imagekit.core.clock import timestamp
from imagekit.core.errors import EnvironmentProblem, InputError, RegistryError, one_line
from imagekit.core.limits import MAX_RECORDS, STATE_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import (
    BAKE_TARGET,
    FREE_SHORT,
    IMAGE_DIGEST,
    IMAGE_REFERENCE,
    FreeText,
    SafeString,
    parse_json_object,
)
from imagekit.core.text import shown
from imagekit.export.targets import bake_target_name
from imagekit.plan.schema import Publish
from imagekit.render.dockerfile import RenderedCell
from imagekit.report.store import BuildReport, CellResult, Staged

if TYPE_CHECKING:
    from docker import APIClient

ENGINE = "docker buildx bake"


@dataclass(frozen=True)
class BakeTarget:
    name: str
    digest: str  # containerimage.digest: the manifest (or index) digest; overlay2 --load: the config's
    config_digest: str | None  # containerimage.config.digest: absent for an index
    names: tuple[str, ...]  # image.name, split at commas

    def image_id(self, holds: Callable[[str], bool]) -> str:
        """The engine's id of the image: whichever digest ``holds`` (the engine has it) says."""
        candidates = (self.digest, *((self.config_digest,) if self.config_digest else ()))
        return next((c for c in candidates if holds(c)), self.config_digest or self.digest)


def nothing_held(_: str) -> bool:
    return False


def nothing_staged(_repository: str, _tag: str) -> str | None:
    return None


_FIX = "pass the file `docker buildx bake --metadata-file` wrote"


def _checked(check: SafeString | FreeText, value: object, where: str) -> str:
    """``value`` when it is a string ``check`` accepts; else an InputError naming ``where``."""
    problem = check.problem(value) if isinstance(value, str) else f"{repr(value)[:80]} is not a string"
    if problem is not None:
        raise InputError(f"{where}: {problem}; {_FIX}")
    assert isinstance(value, str)
    return value


def read_metadata(path: Path) -> dict[str, BakeTarget]:
    """Bake's metadata file, every value imagekit uses checked by its type: target names (they are
    printed) and digests (they become image ids and references) included."""
    try:
        raw = read_regular_file(path, STATE_BYTES, "the file `docker buildx bake --metadata-file` wrote")
    except FileNotFoundError:
        raise InputError(f"no bake metadata file at {path}; pass bake's --metadata-file") from None
    data = parse_json_object(
        raw, str(path), "bake metadata file", "pass the file bake's --metadata-file wrote"
    )
    if len(data) > MAX_RECORDS:
        raise InputError(f"{path}: {len(data):,} targets; imagekit reads at most {MAX_RECORDS:,}")
    targets: dict[str, BakeTarget] = {}
    for name, entry in data.items():
        if name.startswith("buildx.") or not isinstance(entry, Mapping):
            continue  # bake's own keys, e.g. buildx.build.warnings
        where = f"{path}: target {shown(name)}"
        _checked(BAKE_TARGET, name, f"{path}: {shown(name)}")
        digest = _checked(IMAGE_DIGEST, entry.get("containerimage.digest"), f"{where}: containerimage.digest")
        config = entry.get("containerimage.config.digest")
        config_digest = (
            None
            if config is None
            else _checked(IMAGE_DIGEST, config, f"{where}: containerimage.config.digest")
        )
        raw_names = entry.get("image.name")
        names = () if raw_names is None else tuple(
            _checked(IMAGE_REFERENCE, n, f"{where}: image.name")
            for n in _checked(FREE_SHORT, raw_names, f"{where}: image.name").split(",")
            if n
        )  # fmt: skip
        targets[name] = BakeTarget(name, digest, config_digest, names)
    if not targets:
        raise InputError(f"{path}: no target with a containerimage.digest (was it written by bake?)")
    return targets


def results_from_bake(
    targets: Mapping[str, BakeTarget],
    rendered: Sequence[RenderedCell],
    publish: Publish,
    day: date,
    holds: Callable[[str], bool] = nothing_held,
    staged_digest: Callable[[str, str], str | None] = nothing_staged,
) -> tuple[list[CellResult], list[str]]:
    """(a result per cell target found, target names that are no cell of the matrix). A target
    that two cells map to (``bake_target_name`` folds dots into underscores) is refused: its
    digest would be recorded for whichever cell came last.

    ``holds(digest)``: the engine has an image of that id. ``staged_digest(repository, tag)``: the
    manifest digest the publish registry has there (None: none, or no registry)."""
    by_name: dict[str, RenderedCell] = {}
    for each in rendered:
        name = bake_target_name(each.cell.id)
        first = by_name.setdefault(name, each)
        if first is not each and name in targets:
            raise InputError(
                f"bake target {name!r} is the name of two cells, {first.cell.id} and {each.cell.id};"
                " give them ids that differ in more than '.' and '_'"
            )
    results: list[CellResult] = []
    for name, target in targets.items():
        item = by_name.get(name)
        if item is None:
            continue
        tag = naming.staging_tag(item.input_digest)
        staged = None
        where = naming.reference(naming.repository(publish.registry, publish.staging_repository), tag)
        if (
            publish.registry is not None
            and where in target.names  # bake named it so: ask the registry whether it pushed it
            and staged_digest(publish.staging_repository, tag) == target.digest
        ):
            staged = Staged(publish.registry, publish.staging_repository, tag, target.digest)
        results.append(
            CellResult(
                id=item.cell.id,
                kind="cell",
                status="built",
                base_image=item.cell.base_image,
                image_id=target.image_id(holds),
                # The matrix's final tags, which publish promotes to; the image itself carries only
                # bake's staging tag (target.names) until it is verified and published.
                tags=item.names(publish, day).references(),
                input_digest=item.input_digest,
                image_digest=target.digest,
                built_on=day,
                staged=staged,
                advisories=item.cell.advisories,
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


@contextlib.contextmanager
def lookups(
    registry: str | None, warn: Callable[[str], None]
) -> Iterator[tuple[Callable[[str], bool], Callable[[str, str], str | None]]]:
    """What bake-import asks the engine (which image ids it holds) and the registry (what a
    staging tag names), for ``results_from_bake``. Either one out of reach is one ``warn`` line
    (the first problem): the import goes on without it."""
    import requests
    from docker.errors import DockerException

    from imagekit.engine.client import connect, inspect_image
    from imagekit.registry.client import open_registry

    problems: list[str] = []

    def noted(what: str, exc: Exception) -> None:
        if not problems:
            warn(f"bake-import: {what} ({one_line(exc)}); recorded from the metadata file alone")
        problems.append(what)

    # The engine is reached on the first question, not before: a metadata file that names no cell
    # (or is refused) asks it nothing and warns of nothing.
    engines: list[APIClient | None] = []

    def engine() -> APIClient | None:
        if not engines:
            try:
                engines.append(connect(pool_size=2))
            except EnvironmentProblem as exc:
                noted("no engine to ask which image id it shows", exc)
                engines.append(None)
        return engines[0]

    client = open_registry(registry) if registry is not None else None

    def holds(digest: str) -> bool:
        try:
            api = engine()
            return api is not None and inspect_image(api, digest) is not None
        except (DockerException, requests.RequestException, OSError) as exc:
            noted("the engine did not answer", exc)
            return False

    def staged_digest(repository: str, tag: str) -> str | None:
        try:
            return client.head_manifest(repository, tag) if client is not None else None
        except (EnvironmentProblem, RegistryError) as exc:
            noted(f"registry {registry} did not say what it staged", exc)
            return None

    try:
        yield holds, staged_digest
    finally:
        if client is not None:
            client.close()
        for api in engines:
            if api is not None:
                api.close()
