"""What a node pulls to run a cell's image, counted from the registry's manifests alone.

A manifest's ``layers[]`` descriptors carry ``size``, the blob's byte count: the compressed bytes a
node downloads (OCI image-spec, descriptor). A cell's pull cost is those plus its config, each blob
digest once: a node's content store is keyed by digest, and containerd's unpacker fetches only a
blob its content store lacks, so a layer one image names twice (the same tar at two places) is
downloaded once. What is counted is bytes fetched, not disk: containerd unpacks a snapshot per
chain (a layer over its parents), so a repeated layer is unpacked at each place it stands; the
unpacked size is the diff_ids' tars', which no manifest gives. The largest layer is named by its
Dockerfile step (the config's ``history[]`` without its ``empty_layer`` entries lines up with
``layers[]``). "Shared" is by layer digest, across repositories too: a layer two cells hold is
fetched once by a node that runs both.

Everything here is computation on bytes already read (no I/O): ``measure`` asks the registry only
through the reader it is given (``imagekit.registry.client.Registry``). The manifest and config are
the registry's word, trusted no more than a file: both are read as the image record every reader
takes (``imagekit.registry.manifest``), so an absurd layer list or size, a blob of no image's
media type or a config whose diff_ids are not one per layer is a RegistryError (one line), and a
history that does not line up leaves the step "unknown", never a crash.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Protocol

from imagekit.core.errors import RegistryError
from imagekit.core.limits import LAYER_BYTES_MAX, MAX_IMAGE_LAYERS, STEP_CHARS
from imagekit.core.platforms import Platform
from imagekit.core.safetypes import RECORD_CONFIG, Count, ImageDigest, Items, Number, ShortText, parse_json
from imagekit.core.text import printable
from imagekit.registry.manifest import Manifest

UNKNOWN_STEP = "unknown"
LayerSize = Annotated[int, Number(0, LAYER_BYTES_MAX, integer=True)]


@dataclass(frozen=True)
class Blob:
    """One blob a pull fetches: a layer or the config, by digest, with the manifest's size."""

    __pydantic_config__ = RECORD_CONFIG

    digest: ImageDigest
    size: LayerSize


@dataclass(frozen=True)
class PullCost:
    """What a fresh node fetches for one cell's platform manifest (compressed bytes)."""

    __pydantic_config__ = RECORD_CONFIG

    manifest: ImageDigest  # the platform's image manifest that was counted
    config: Blob
    layers: Annotated[tuple[Blob, ...], Items(MAX_IMAGE_LAYERS)]
    largest_step: ShortText = UNKNOWN_STEP  # the Dockerfile step that made the largest layer
    shared: Count = 0  # bytes of its layers that another cell of the report holds too
    # the Dockerfile step of each layer (``steps``); empty in records of earlier releases
    steps: Annotated[tuple[ShortText, ...], Items(MAX_IMAGE_LAYERS)] = ()

    @property
    def total(self) -> int:
        """The bytes a node without any of them fetches: each blob digest once."""
        return sum({blob.digest: blob.size for blob in (self.config, *self.layers)}.values())

    @property
    def largest(self) -> Blob | None:
        """The largest layer (the first of equals); None for an image of no layers."""
        return max(self.layers, key=lambda layer: layer.size, default=None)

    def as_json(self) -> dict[str, Any]:
        largest = self.largest
        return {
            **asdict(self),
            "layers": [asdict(layer) for layer in self.layers],
            "total": self.total,
            "largest_size": largest.size if largest else 0,
        }


@dataclass(frozen=True)
class MatrixPull:
    """A fresh node running every counted cell: distinct bytes against the images' sum and the
    floor (``floor_key``), and what it unpacks (``unpacked_chains``)."""

    cells: int
    distinct: int  # each layer and config digest once
    summed: int  # each cell's total, as if nothing were shared
    floor: int = 0  # each layer's content once (``floor_key``), each config once
    chains: int = 0  # the snapshots a node unpacks: one per distinct chain of layer digests
    chain_bytes: int = 0  # the compressed bytes of those: each layer once per chain it stands in


class ImageReader(Protocol):
    """What ``measure`` asks of a registry (``imagekit.registry.client.Registry`` answers it)."""

    def image_for(self, repository: str, digest: str, platform: Platform) -> tuple[Manifest, bytes]: ...

    def blob_length(self, repository: str, digest: str) -> int | None: ...


def gib(size: int) -> str:
    """A byte count as a person compares it with a cap: ``8.00 GiB``, ``512.0 MiB``, ``7 bytes``."""
    if size >= 2**30:
        return f"{size / 2**30:.2f} GiB"
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size:,} bytes"


def steps(config: bytes, layers: int) -> tuple[str, ...]:
    """The Dockerfile step of each layer: the config's history without its ``empty_layer``
    entries, one per layer, each clipped to one printable line; all "unknown" when the history
    is missing or does not line up with the layers (a squashed or hand-made image)."""
    unknown = (UNKNOWN_STEP,) * layers
    try:
        data: Any = parse_json(config)
    except ValueError:
        return unknown
    history = data.get("history") if isinstance(data, dict) else None
    if not isinstance(history, list):
        return unknown
    made = [h for h in history if not (isinstance(h, dict) and h.get("empty_layer") is True)]
    if len(made) != layers or not all(isinstance(h, dict) for h in made):
        return unknown
    return tuple(_one_line(entry.get("created_by")) for entry in made)


def _one_line(created: Any) -> str:
    """A step as one printable line of at most STEP_CHARS. A longer one is cut and ends with a
    digest of the whole line: the floor keys a layer by its step (``floor_key``), and two steps
    that differ only past the cut (the other dependencies of two torch releases, whose triton pins
    come late in the line) must stay two."""
    text = " ".join(printable(created).split()) if isinstance(created, str) else ""
    if len(text) <= STEP_CHARS:
        return text or UNKNOWN_STEP
    whole = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{text[: STEP_CHARS - len(whole) - 5]}... #{whole}"


def pull_cost(manifest: Manifest, config: bytes, where: str) -> PullCost:
    """The pull cost of one image manifest and its config's bytes; RegistryError (one line) for
    what no image is (``Manifest.image``, ``ImageRecord.read_config``)."""
    then = "its pull cost is not counted"
    record = manifest.image(where, then)
    record.read_config(config, where, then)
    layers = tuple(Blob(layer.digest, layer.size) for layer in record.layers)
    made_by = steps(config, len(layers))
    cost = PullCost(manifest.digest, Blob(record.config.digest, record.config.size), layers, steps=made_by)
    largest = cost.largest
    if largest is None:
        return cost
    return replace(cost, largest_step=made_by[layers.index(largest)])


def check_answered(cost: PullCost, answered: int | None, where: str) -> None:
    """The registry's Content-Length for the largest layer's blob must be the manifest's size:
    a registry that says two things about one blob is not counted (nor published from)."""
    largest = cost.largest
    if largest is None or answered == largest.size:
        return
    said = "no Content-Length" if answered is None else f"{answered:,} bytes"
    raise RegistryError(
        f"{where}: the registry answers {said} for layer {largest.digest[:19]}, whose descriptor says"
        f" {largest.size:,}; its pull cost is not counted and nothing is published from it"
    )


def measure(reader: ImageReader, repository: str, digest: str, platform: Platform, where: str) -> PullCost:
    """The pull cost of ``repository@digest`` for ``platform`` (an index resolves to that
    platform's image), read from manifests and the config; the largest layer's size checked
    against the registry's HEAD of its blob. No layer is downloaded."""
    manifest, config = reader.image_for(repository, digest, platform)
    cost = pull_cost(manifest, config, where)
    if cost.largest is not None:
        check_answered(cost, reader.blob_length(repository, cost.largest.digest), where)
    return cost


def with_shared(costs: Mapping[str, PullCost]) -> dict[str, PullCost]:
    """Each cell's cost with ``shared`` = the bytes of its layers that another cell holds too
    (a digest counted once per cell, however often one image repeats it)."""
    holders = Counter(digest for cost in costs.values() for digest in {layer.digest for layer in cost.layers})
    return {
        cell: replace(
            cost, shared=sum({b.digest: b.size for b in cost.layers if holders[b.digest] > 1}.values())
        )
        for cell, cost in costs.items()
    }


def floor_key(layer: Blob, step: str, context: tuple[str, str]) -> tuple[str, ...]:
    """What a layer's content depends on, for the floor. A ``pip install`` of exact pins
    (``torch==2.1.2 ...``, ``nvidia-cublas-cu12==12.1.3.1``) writes the same files in any cell of
    the same Python and machine: keyed by its step and ``context`` (the cell's bottom layer, which
    differs per OS and machine, and its venv step, which names the Python), so two cells' layers
    of one wheel count once whichever layers lie below them. Any other layer (a base's, apt's, a
    step of no known history) by its digest: the base layers' distinct bytes."""
    if "pip install" in step and "==" in step and " -m venv " not in step:
        return ("step", step, *context)
    return ("digest", layer.digest)


def _context(cost: PullCost) -> tuple[str, str]:
    bottom = cost.layers[0].digest if cost.layers else ""
    venv = next((step for step in cost.steps if " -m venv " in step), "")
    return bottom, venv


def matrix_pull(costs: Iterable[PullCost]) -> MatrixPull | None:
    """What a fresh node fetches to run every cell (each digest once) against the images' sum and
    the floor: each layer content once (``floor_key``: base layers by digest, each exact-pin pip
    step, so each CUDA wheel, the other dependencies and one torch per release, once per Python and
    machine), each config once, every layer at its largest size seen. And what it unpacks:
    containerd unpacks a snapshot per chain (a layer over its parents), so a layer shared below
    different parents is unpacked again; manifests give no uncompressed sizes, so the chains'
    bytes are compressed ones. None when no cell was counted."""
    counted = list(costs)
    if not counted:
        return None
    distinct = {b.digest: b.size for cost in counted for b in (cost.config, *cost.layers)}
    floor: dict[tuple[str, ...], int] = {("config", c.config.digest): c.config.size for c in counted}
    chains: dict[tuple[str, ...], int] = {}
    for cost in counted:
        context = _context(cost)
        known = len(cost.steps) == len(cost.layers)
        for i, layer in enumerate(cost.layers):
            key = floor_key(layer, cost.steps[i] if known else UNKNOWN_STEP, context)
            floor[key] = max(floor.get(key, 0), layer.size)
            chains[tuple(b.digest for b in cost.layers[: i + 1])] = layer.size
    return MatrixPull(
        len(counted),
        sum(distinct.values()),
        sum(cost.total for cost in counted),
        floor=sum(floor.values()),
        chains=len(chains),
        chain_bytes=sum(chains.values()),
    )


def matrix_line(summary: MatrixPull) -> str:
    """The report's matrix-level line."""
    ratio = f" ({summary.distinct / summary.summed:.2f}x)" if summary.summed else ""
    floor = f" ({summary.distinct / summary.floor:.2f}x)" if summary.floor else ""
    return (
        f"pull: a fresh node fetches {gib(summary.distinct)} to run all {summary.cells} counted cells,"
        f" against {gib(summary.summed)} for the images one by one{ratio}"
        f" and a floor of {gib(summary.floor)}{floor}; it unpacks {summary.chains} layer snapshots"
        f" ({gib(summary.chain_bytes)} compressed, each layer once per chain of parents)"
    )
