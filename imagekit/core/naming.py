"""Image naming, in one place: repositories, every kind of tag, references and label keys.

Every other module asks here; none formats ``repo:tag`` or an ``imagekit.*`` key itself. The
kinds of tag, as data (docker-library keeps its tag aliases the same way):

- readable: moving, says what is inside (``2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04``); its pattern
  comes from the matrix (``publish.tags.readable`` or a base's ``tag``);
- immutable: never move once pushed (``{readable}-{date}``, ``{readable}-{digest}``);
- staging: where a build lands in a registry before it is verified and promoted
  (``staging-<input digest, 12 hex>``); never a final tag;
- published: the readable and immutable tags with a suffix that says how far the image was
  verified (``-checked``, ``-unverified``; none for GPU-validated).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

from imagekit.core.errors import InputError
from imagekit.core.platforms import Platform
from imagekit.core.text import shown
from imagekit.probe import protocol

# -- limits of the distribution spec and the engine -------------------------------------------------

MAX_TAG = 128
MAX_REFERENCE = 255  # the distribution spec's limit on a repository name; a whole reference too
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")  # an image id or a manifest digest
REFERENCE = re.compile(
    r"(?:[a-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)

# -- labels -------------------------------------------------------------------------------------------

LABEL_PREFIX = "imagekit."


def label(name: str) -> str:
    """The full key of one of imagekit's own labels: ``label("torch") -> "imagekit.torch"``."""
    return LABEL_PREFIX + name


CELL_LABEL = label("cell")
FRONTEND_LABEL = label("frontend")  # jupyter | ssh on a front-end image
FRONTEND_CHECK_LABEL = label("frontend-check")  # its front-end check script
CHECK_SCRIPT_LABEL = label("check-script")
INPUT_DIGEST_LABEL = label("input-digest")  # what the image was built from (the skip decision)
CONTEXT_DIGEST_LABEL = label("context-digest")  # a local base's context
BASE_DIGEST_LABEL = label("base-digest")  # the base image the cell was built on
VERSION_LABEL = label("version")  # imagekit's version that built it
LOCAL_BASE_LABEL = label("base")  # a local base's name, on bake targets
VERIFY_RUN_LABEL = label("verify-run")  # on check containers: which run made them
TARGET_LABEL = label("target")  # on check containers: which cell or image they check
OCI_PREFIX = "org.opencontainers.image."
OCI_BASE_DIGEST_LABEL = OCI_PREFIX + "base.digest"  # the base image's manifest digest (a registry's)

# The labels that tell the check script what an image must hold (its --expect-* options).
EXPECTED_LABELS: tuple[str, ...] = tuple(protocol.EXPECT_OPTIONS)


def expectations(labels: Mapping[str, str]) -> dict[str, str]:
    """What an image promises, from its ``imagekit.*`` labels (absent or empty ones left out)."""
    return {name: labels[label(name)] for name in EXPECTED_LABELS if labels.get(label(name))}


def annotation(name: str) -> str:
    """A Kubernetes annotation key in imagekit's domain: ``imagekit/cell``."""
    return f"{LABEL_PREFIX.rstrip('.')}/{name}"


# -- references ---------------------------------------------------------------------------------------


def repository(registry: str | None, path: str) -> str:
    """``registry/path``, or just ``path`` for local names."""
    return f"{registry}/{path}" if registry else path


def reference(repository_name: str, tag: str) -> str:
    return f"{repository_name}:{tag}"


def by_digest(repository_name: str, digest: str) -> str:
    return f"{repository_name}@{digest}"


def split_reference(ref: str) -> tuple[str, str | None]:
    """``repo[:tag][@digest]`` -> (repository, tag or digest); the tag part never holds a '/'."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        # name:tag@digest pins the digest; the tag is only a note for people
        return split_reference(name)[0], digest
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, None


def registry_and_path(name: str) -> tuple[str, str] | None:
    """(registry host, repository path) of ``name`` when its first component names a registry
    (Docker's rule: a dot, a port or ``localhost``); None for a name without one (Docker Hub's)."""
    host, _, path = name.partition("/")
    if not path or not ("." in host or ":" in host or host == "localhost"):
        return None
    return host, path


def is_reference(ref: str) -> bool:
    if len(ref) > MAX_REFERENCE or REFERENCE.fullmatch(ref) is None:
        return False
    host, _, rest = ref.partition("/")
    port = host.rpartition(":")[2] if rest and ":" in host else ""
    return not port or int(port) <= 65535  # the pattern allows five digits: 99999 is no port


def pinned_reference(ref: str, needs_digest: str) -> tuple[str, str, str]:
    """``REGISTRY/REPOSITORY[:TAG]@sha256:<64 hex>`` -> (registry host, repository path, digest), or
    one InputError line naming what is missing: a command that checks what an image is takes it by
    digest (a tag can move between the check and its use), and names the registry it asks.
    ``needs_digest`` is the caller's sentence for a reference without a digest."""
    if "@" not in ref:
        raise InputError(f"{shown(ref)}: {needs_digest}")
    if not is_reference(ref):
        raise InputError(f"{shown(ref)}: not an image reference (REGISTRY/REPOSITORY@sha256:<64 hex>)")
    name, _, digest = ref.rpartition("@")  # REFERENCE holds one '@', before sha256:<64 hex>
    named = registry_and_path(split_reference(name)[0])
    if named is None:
        raise InputError(
            f"{shown(ref)}: names no registry host; write it in full"
            " (like 127.0.0.1:5000/team/torch@sha256:...)"
        )
    return *named, digest


# -- patterns -----------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


# A plan fills the same few patterns for every cell (tags, base images): each is split once.
@lru_cache(maxsize=1024)
def _pieces(pattern: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``"{a}-x{b}"`` -> (("", "-x", ""), ("a", "b")): the literal text around each placeholder."""
    parts = _PLACEHOLDER.split(pattern)
    return tuple(parts[0::2]), tuple(parts[1::2])


def placeholders(pattern: str) -> tuple[str, ...]:
    """The names a pattern fills: ``"{readable}-{date}" -> ("readable", "date")``."""
    return _pieces(pattern)[1]


def fill_placeholders(pattern: str, values: Mapping[str, str], where: str) -> str:
    """Replace ``{name}`` with ``values[name]``; nothing else (no attributes, no format specs).

    ``str.format`` would let a pattern reach attributes (``{torch.__class__}``) or ask for a
    billion-character padding; user patterns get plain substitution only.
    """

    literals, names = _pieces(pattern)
    out = [literals[0]]
    for name, literal in zip(names, literals[1:], strict=True):
        if name not in values:
            known = ", ".join("{" + k + "}" for k in values)
            raise InputError(f"{where}: unknown placeholder {{{name}}} in {pattern!r}; use {known}")
        out += (values[name], literal)
    filled = "".join(out)
    if "{" in filled or "}" in filled:
        raise InputError(f"{where}: unbalanced brace in {pattern!r}")
    return filled


# -- cell ids and readable tags -----------------------------------------------------------------------


def tag_safe(version: str) -> str:
    """A version as it may appear in a tag or a cell id (``2.1.0a0+32f93b1 -> 2.1.0a0-32f93b1``)."""
    return version.replace("+", "-")


def accelerator(cuda: str) -> str:
    return "cpu" if cuda == "cpu" else f"cuda{cuda}"


def stack_label(cuda: str, cudnn_major: int | None) -> str:
    """``{stack}`` in a tag: ``cuda12.1-cudnn8``, ``cuda12.4-cudnn9``, ``cpu``."""
    if cuda == "cpu":
        return "cpu"
    return f"cuda{cuda}" + (f"-cudnn{cudnn_major}" if cudnn_major else "")


def cell_id(
    base: str,
    torch: str,
    cuda: str,
    python: str,
    flavour: str,
    frontend: str | None = None,
    platform: Platform | None = None,
) -> str:
    """A cell's id: what --only matches, the generated directory, the report's key. The default
    platform adds nothing (ids from before the platform axis stay); another adds its suffix."""
    cell = f"{base}-torch{tag_safe(torch)}-{accelerator(cuda)}-py{python}-{flavour}"
    return (f"{cell}-{frontend}" if frontend else cell) + (platform.suffix if platform else "")


def tag_values(
    *, torch: str, cuda: str, cudnn_major: int | None, flavour: str, os: str, python: str, base: str
) -> dict[str, str]:
    """The placeholders a readable tag pattern may use."""
    return {
        "torch": tag_safe(torch),
        "cuda": cuda,
        "cudnn": str(cudnn_major or "none"),
        "stack": stack_label(cuda, cudnn_major),
        "flavour": flavour,
        "os": os,
        "python": f"py{python}",
        "base": base,
    }


def readable_tag(pattern: str, values: Mapping[str, str], where: str) -> str:
    tag = fill_placeholders(pattern, values, where)
    if not TAG.fullmatch(tag):
        raise InputError(f"{where}: {tag!r} is not a valid image tag")
    return tag


# -- a built cell's names -----------------------------------------------------------------------------

STAGING_PREFIX = "staging-"
# Tags say how far an image was verified, so nobody mistakes a CPU-checked image for a GPU one.
LEVEL_SUFFIX: Mapping[str, str] = {"validated": "", "checked": "-checked", "built": "-unverified"}


def short_digest(input_digest: str) -> str:
    """``{digest}`` in a tag: the first 12 hex digits of the cell's input digest."""
    return input_digest.removeprefix("sha256:")[:12]


def staging_tag(input_digest: str) -> str:
    """Where a cell's image waits in a registry until it is verified and promoted."""
    return f"{STAGING_PREFIX}{short_digest(input_digest)}"


def build_cache(staging_name: str, image_tag: str) -> str:
    """The BuildKit registry cache of a cell (``staging_name``: registry/staging repository): one
    per cell, not per input digest, so a cell whose last step changed finds every earlier step
    there. ``imagekit build --builder buildkit`` and the bake export read and write the same one."""
    return reference(f"{staging_name}/buildcache", image_tag)


def immutable_tags(readable: str, patterns: Iterable[str], day: date, input_digest: str) -> tuple[str, ...]:
    """The readable tag first, then each immutable pattern filled in (duplicates dropped)."""
    values = {"readable": readable, "date": day.strftime("%Y%m%d"), "digest": short_digest(input_digest)}
    out = [readable]
    for pattern in patterns:
        tag = fill_placeholders(pattern, values, "publish.tags.immutable")
        if len(tag) > MAX_TAG:
            raise InputError(f"publish.tags.immutable: {tag!r} is longer than {MAX_TAG} characters")
        if not TAG.fullmatch(tag):
            raise InputError(f"publish.tags.immutable: {tag!r} is not a valid image tag")
        if tag not in out:
            out.append(tag)
    return tuple(out)


def published_tags(tags: Iterable[str], level: str, cell: str) -> tuple[str, ...]:
    """A cell's tags as published at ``level``: each with the level's suffix, readable first."""
    out: list[str] = []
    for tag in tags:
        final = tag + LEVEL_SUFFIX[level]
        if len(final) > MAX_TAG:
            raise InputError(f"{cell}: tag {final!r} would be longer than {MAX_TAG} characters")
        if final not in out:
            out.append(final)
    if not out:
        raise InputError(f"{cell}: the build report names no tag for it; run `imagekit build`")
    return tuple(out)


@dataclass(frozen=True)
class ImageNames:
    """Where one cell's image lives: its repository and tags (readable first)."""

    repository: str
    tags: tuple[str, ...]

    @property
    def readable(self) -> str:
        return self.tags[0]

    def references(self) -> tuple[str, ...]:
        return tuple(reference(self.repository, tag) for tag in self.tags)


@dataclass(frozen=True)
class Tagging:
    """How a matrix names its cells' images (its ``publish``: repository, immutable patterns;
    ``imagekit.plan.schema.Publish.tagging`` makes it), and
    the one place a cell's tags are computed from it: the build tags its images by them
    (``imagekit.render.dockerfile``), the no-change record dates them again (``imagekit.builds.no_change``),
    and
    publish suffixes them by level (``imagekit.publish.policy``)."""

    repository: str
    patterns: tuple[str, ...]  # publish.tags.immutable

    @property
    def dated(self) -> bool:
        """Whether a pattern holds ``{date}``: whether the day changes the tags at all."""
        return any("date" in placeholders(pattern) for pattern in self.patterns)

    def tag_day(self, built_on: date | None) -> date | None:
        """The day to date tags by, for an image built on ``built_on``: that day when a pattern
        holds ``{date}``, any day when none does; None when one does and the day is not known."""
        return built_on if self.dated else _ANY_DAY

    def tags(self, readable: str, day: date, input_digest: str) -> tuple[str, ...]:
        """The tags of the image with readable tag ``readable`` and ``input_digest``, dated ``day``:
        the readable tag first, then each immutable pattern filled in."""
        return immutable_tags(readable, self.patterns, day, input_digest)

    def names(self, readable: str, day: date, input_digest: str) -> ImageNames:
        return ImageNames(self.repository, self.tags(readable, day, input_digest))


_ANY_DAY = date(2000, 1, 1)  # for tag patterns without {date}, which no day changes
