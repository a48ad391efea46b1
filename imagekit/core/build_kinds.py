"""How an image is built: the closed sets of choices a matrix's ``build``, ``imagekit build``'s
flags and the engine's exporter share, each one ``Literal`` spelled here alone.

Everything that lists them, compares with them or says them in a message derives them from these
(``typing.get_args``): a builder added here is one the matrix schema, the flag check and its
message know at once. They live in core, below the engine (``imagekit.engine.buildx`` writes the
exporter's compression) and the matrix schema (``imagekit.plan.schema`` validates ``build`` by
them), and load nothing: the no-change answer reads ``imagekit build``'s options before anything
else is imported.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from imagekit.core.errors import InputError
from imagekit.core.text import printable

# classic: docker-py's build API; buildkit: `docker buildx build` (cache and secret mounts, zstd)
BuilderKind = Literal["classic", "buildkit"]
# the layer compression of the BuildKit builder's images (its exporter's compression=)
Compression = Literal["gzip", "zstd"]


def default_compression(builder: BuilderKind) -> Compression:
    """The layer compression a matrix that names none gets: zstd with BuildKit, gzip with classic.

    zstd is ~0.80x gzip's bytes and ~0.49x its pull-and-unpack time on the CUDA cell
    (BENCHMARKS.md, "Reproducible rebuild and zstd"), and every engine a user of these images
    runs pulls it: containerd >= 1.5 (every Kubernetes node on a supported containerd, k3s, and
    dockerd's containerd image store), Docker Engine >= 23.0 (moby#41759), CRI-O and podman
    (containers/image). Docker Engine 20.10 and older cannot ("archive/tar: invalid tar header",
    aws/amazon-ecs-agent#4179): ``build.compression: gzip`` (or ``--compression gzip``) is the
    setting for such a consumer. The classic builder's images are pushed by the engine, gzip only.
    """
    return "gzip" if builder == "classic" else "zstd"  # every builder but classic runs on BuildKit


def listed(kind: Any, conjunction: str = "and") -> str:
    """A closed set's values as a sentence says them: ``classic and buildkit``, ``a, b or c``."""
    values = [str(v) for v in get_args(kind)]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} {conjunction} {values[-1]}"


def chosen(kind: Any, value: str, flag: str, noun: str) -> Any:
    """``value`` when it is one of the closed set ``kind``; else the one line naming ``flag`` and
    every value it takes (``--builder 'x': the builders are classic and buildkit``)."""
    if value in get_args(kind):
        return value
    raise InputError(f"{flag} {printable(value)!r}: the {noun}s are {listed(kind)}")
