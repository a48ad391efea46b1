"""Base images: where each cell's base comes from (mirrors), that it is in the engine, its digest.

Pulled bases are resolved once per run before any build: mirrored (a site mirror, or a tag deleted
upstream), pulled with retries when the engine lacks them, and recorded by digest so a later run
can pin ``FROM name@sha256:...`` to exactly what an earlier one used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError

from imagekit.core import platforms
from imagekit.core.errors import InputError, one_line
from imagekit.core.limits import DOCKERFILE_BYTES
from imagekit.core.naming import split_reference
from imagekit.core.paths import read_regular_text
from imagekit.core.platforms import Platform
from imagekit.engine.client import alive, inspect_image, is_engine_failure, pull, repo_digest, unreachable
from imagekit.plan.cells import LocalBase, Plan
from imagekit.plan.pin_file import pins_path
from imagekit.plan.pins import pulled_bases, read_pins
from imagekit.registry.lookup import manifest_digest
from imagekit.report.store import BuildReport

DEFAULT_PLATFORM = platforms.get(platforms.DEFAULT)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S+))?", re.IGNORECASE | re.MULTILINE)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


def apply_mirrors(ref: str, mirrors: tuple[tuple[str, str], ...]) -> str:
    """Replace the longest matching name prefix (at a path, tag or digest boundary)."""
    name, _ = split_reference(ref)
    best: tuple[str, str] | None = None
    for source, target in mirrors:
        if (name == source or name.startswith(source + "/")) and (best is None or len(source) > len(best[0])):
            best = (source, target)
    if best is None:
        return ref
    return best[1] + ref[len(best[0]) :]


@dataclass(frozen=True)
class Pins:
    """What `imagekit pin-bases` found: each pulled base's digest now, and what its lock pinned."""

    path: Path  # the lock beside the matrix (``imagekit.plan.pin_file``)
    pins: dict[str, str]
    before: dict[str, str]  # empty: no lock, or one unreadable (what pin-bases replaces)


def current_pins(plan: Plan, matrix: Path, say: Callable[[str], None]) -> Pins:
    """Ask each registry the digest every base ``plan`` pulls names now (HEAD of the manifest or
    index, with imagekit's logins), saying each with how it compares to the lock; exit 2 when no
    cell pulls a base."""
    wanted = pulled_bases(plan.cells)
    path = pins_path(plan.root / matrix.name)
    if not wanted:
        raise InputError(f"{matrix}: no cell pulls a base from a registry (local bases only); nothing to pin")
    try:
        before = read_pins(path, matrix) if path.exists() else {}
    except InputError:
        before = {}  # an unreadable lock is what this command replaces
    mirrors = tuple(plan.matrix.mirrors.items())
    pins: dict[str, str] = {}
    for reference in wanted:
        # Through the matrix's mirror, where the build pulls: a digest names the same bytes there.
        pins[reference] = manifest_digest(apply_mirrors(reference, mirrors))
        old = before.get(reference)
        state = "unchanged" if old == pins[reference] else "new" if old is None else f"moved from {old}"
        say(f"{reference} {pins[reference]} ({state})")
    return Pins(path, pins, before)


@dataclass(frozen=True)
class ResolvedBase:
    reference: str  # after mirroring, before pinning: what the report records
    build_from: str  # what the Dockerfile's FROM says (pinned when asked)
    digest: str | None  # name@sha256:... or the image id
    error: str | None
    # (the name inspected, the image id it named): what a no-change run checks the engine for again
    engine_image: tuple[str, str] | None = None


def recorded_digests(previous: BuildReport | None) -> dict[str, str]:
    """base reference -> repo digest from the previous report, for reproducible pinning."""
    if previous is None:
        return {}
    return {
        r.base_image: r.base_digest for r in previous.cells if r.base_digest and "@sha256:" in r.base_digest
    }


def holds_platform(image: Mapping[str, Any], platform: Platform) -> bool:
    """Whether an inspected image is ``platform``'s (an image that does not say is taken as it is)."""
    arch = image.get("Architecture")
    return not arch or (arch == platform.arch and image.get("Os", platform.os) == platform.os)


def resolve_base(
    api: docker.APIClient,
    reference: str,
    pin: bool,
    recorded: Mapping[str, str],
    log: Callable[[str], None],
    platform: Platform = DEFAULT_PLATFORM,
    by_id: bool = False,
) -> ResolvedBase:
    """Make sure ``platform``'s image of the base is in the engine (pulling with retries) and learn
    its digest. With ``by_id`` the cell is built FROM the image id: the engine's store holds one
    platform per tag, so when a run pulls one base for two platforms the tag ends on the last."""
    wanted = recorded.get(reference) if pin else None
    target = wanted or reference
    try:
        image = inspect_image(api, target)
        if image is None or not holds_platform(image, platform):
            log(f"pulling {target} for {platform.name}")
            pull(api, target, platform=platform.name)
            image = inspect_image(api, target)
        if image is None:
            return ResolvedBase(reference, reference, None, f"{target} is not in the engine after pulling it")
        if not holds_platform(image, platform):
            return ResolvedBase(
                reference,
                reference,
                None,
                f"{target} has no {platform.name} image (the engine holds {image.get('Architecture')})",
            )
    except (APIError, requests.RequestException, OSError) as exc:
        if is_engine_failure(exc) and not alive(api):
            raise unreachable(exc) from None
        return ResolvedBase(reference, reference, None, f"cannot pull base {target}: {one_line(exc)}")
    digest = wanted or repo_digest(image, reference)
    if pin and digest is None:
        log(f"{reference} has no registry digest (a local image); built from its name, not pinned")
    return ResolvedBase(
        reference=reference,
        build_from=str(image["Id"]) if by_id else digest if pin and digest else reference,
        digest=digest or str(image["Id"]),
        error=None,
        engine_image=(target, str(image["Id"])),
    )


def local_base_froms(base: LocalBase) -> tuple[str, ...]:
    path = base.context / base.dockerfile
    try:
        text = read_regular_text(
            path, DOCKERFILE_BYTES, f"base {base.name}'s Dockerfile (bases.{base.name}.build)"
        )
    except FileNotFoundError as exc:
        raise InputError(f"base {base.name}: cannot read {path}: {exc.strerror}") from None
    # FROM ${BASE}: the image a build arg names (a per-platform base), as the engine fills it from
    # the base's args, else from the ARG default declared before the first FROM
    first = _FROM.search(text)
    declared = _ARG.findall(text[: first.start()] if first else text)
    values = {name: default for name, default in declared if default} | dict(base.args)
    return tuple(_VARIABLE.sub(lambda m: values.get(m[1] or m[2], m[0]), ref) for ref in _FROM.findall(text))
