"""What a build may reuse instead of building: the image a cell already built, in the engine.

Found by its input-digest label, narrowed by what an image built FROM the cell cannot inherit
(``cell_image``). One listing of the engine's labelled images serves every cell of a run: a
no-change rebuild costs one engine query, not one (plus an inspect) per cell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import docker

from imagekit.core import naming
from imagekit.render.dockerfile import RenderedCell
from imagekit.report.store import BuildReport, CellResult


def missing_labels(labels: Mapping[str, str], required: Sequence[tuple[str, str]]) -> list[str]:
    """The ``--label`` pairs an image built from a cell's inputs lacks (``key=value`` each): labels
    are not an input of the digest, and a reused image must not be handed out without them."""
    return [f"{key}={value}" for key, value in required if labels.get(key) != value]


def reusable(
    image: Mapping[str, Any] | None, required: Sequence[tuple[str, str]], write: Callable[[str], None]
) -> Mapping[str, Any] | None:
    """``image`` (built from a cell's inputs) when it also carries every ``--label`` asked for
    (``required``): the labels are not an input of the digest, and a skip must not hand out an
    image without them. Otherwise None, and the cell is built (every step but the labels cached)."""
    if image is None:
        return None
    missing = missing_labels(image.get("Labels") or {}, required)
    if missing:
        write(f"image {image['Id']} has this input digest but not --label {', '.join(missing)}; building")
        return None
    return image


class EngineImages:
    """The engine's images by input-digest label, listed once per run (on first use)."""

    def __init__(self, api: docker.APIClient, previous: BuildReport | None) -> None:
        self.api = api
        self.previous = previous  # its image ids say which labelled image is the cell's
        self._by_input_digest: dict[str, list[dict[str, Any]]] | None = None
        self._lock = threading.Lock()

    def cell_image(self, rendered: RenderedCell, tags: tuple[str, ...]) -> Mapping[str, Any] | None:
        """The image this cell already built from ``rendered``'s inputs (its image-list summary)."""
        with self._lock:
            if self._by_input_digest is None:
                index: dict[str, list[dict[str, Any]]] = {}
                for image in self.api.images(filters={"label": naming.INPUT_DIGEST_LABEL}):
                    digest = (image.get("Labels") or {}).get(naming.INPUT_DIGEST_LABEL)
                    if digest:
                        index.setdefault(digest, []).append(image)
                self._by_input_digest = index
            candidates = self._by_input_digest.get(rendered.input_digest, [])
        recorded = next(
            (r.image_id for r in (self.previous.cells if self.previous else ()) if r.id == rendered.cell.id),
            None,
        )
        return cell_image(candidates, rendered.input_digest, tags, recorded)


def cell_image(
    listing: Sequence[Mapping[str, Any]], input_digest: str, tags: Sequence[str], recorded: str | None
) -> Mapping[str, Any] | None:
    """Which of ``listing`` (image-list summaries) is the image a cell built from ``input_digest``.

    Its input-digest label is necessary but not enough: every image built FROM a cell inherits
    the cell's labels (a front end's build stage, any user's ``FROM`` image), and one of those is
    often the newest. What a derived image cannot inherit decides: the image id the previous report
    recorded for the cell, else one of the cell's own tags (``tags``: full references) still on it.
    None when no image qualifies: the cell is built again (from the layer cache, to the same id).
    """
    mine = [
        image
        for image in listing
        if (image.get("Labels") or {}).get(naming.INPUT_DIGEST_LABEL) == input_digest
    ]
    for image in mine:
        if recorded is not None and image.get("Id") == recorded:
            return image
    own = set(tags)
    tagged = [image for image in mine if own.intersection(image.get("RepoTags") or ())]
    return max(tagged, key=lambda image: int(image.get("Created") or 0), default=None)


def skipped(
    done: Callable[..., CellResult],
    image: Mapping[str, Any],
    tags: tuple[str, ...],
    input_digest: str,
    **values: Any,
) -> CellResult:
    """The record of a job whose image is already in the engine (``image``: inspect or list)."""
    return done(
        "skipped",
        image_id=str(image["Id"]),
        tags=tags,
        size=image.get("Size"),
        input_digest=input_digest,
        **values,
    )
