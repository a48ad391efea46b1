"""The build stage's options: one frozen record, ``BuildOptions``, each setting declared once with
its type, its default, the flag that sets it and the matrix key it reads when that flag is not
given; and the one function that merges the command line over the matrix into it, ``resolve``.

The flags themselves (their spellings, their defaults) are ``imagekit.builds.command_line``'s
``BuildCommand``; a setting names the field of it that sets it. A builder, a compression or a
registry given on the command line overrides the matrix's ``build.builder``,
``build.compression`` or ``publish.registry``, and is checked with the matrix's own refusals
(``imagekit.plan.rules.check_build_settings``) before any work, as the run will use it.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit.builds.command_line import BuildCommand, flag
from imagekit.core.build_kinds import BuilderKind, Compression, chosen, default_compression
from imagekit.core.errors import InputError
from imagekit.core.naming import LABEL_PREFIX
from imagekit.core.text import printable, shown
from imagekit.plan.source import SourceState
from imagekit.registry.client import Backoff

if TYPE_CHECKING:
    from imagekit.plan.cells import Plan
    from imagekit.plan.schema import Matrix

FLAG = "flag"  # the metadata key of the BuildCommand field that sets a setting
MATRIX_KEY = "matrix"  # ... and of the matrix key (dotted) it reads when that flag is not given


def given_by(command_field: str, matrix: str | None = None) -> dict[str, str | None]:
    """A setting's source: ``BuildCommand.<command_field>``, over the matrix's ``matrix`` key."""
    return {FLAG: command_field, MATRIX_KEY: matrix}


@dataclass(frozen=True)
class BuildOptions:
    """Every build setting, resolved once from the command line and the matrix (``resolve``)."""

    today: date
    jobs: int = field(default=1, metadata=given_by("jobs"))
    force: bool = field(default=False, metadata=given_by("force"))
    timeout_s: float | None = field(default=None, metadata=given_by("timeout"))
    fail_fast: bool = field(default=False, metadata=given_by("fail_fast"))
    pin_base_digests: bool = field(default=False, metadata=given_by("pin_base_digests"))
    # prefix -> replacement: the command line's; the builder puts the matrix's `mirrors` after them
    mirrors: tuple[tuple[str, str], ...] = field(default=(), metadata=given_by("mirror"))
    cache_from: bool = field(default=True, metadata=given_by("cache_from"))
    network_mode: str | None = field(default=None, metadata=given_by("network"))
    extra_labels: tuple[tuple[str, str], ...] = field(default=(), metadata=given_by("label"))
    # stage every cell built or unchanged in the registry
    push: bool = field(default=False, metadata=given_by("push"))
    # host[:port] for staging and cache sources
    registry: str | None = field(default=None, metadata=given_by("registry", "publish.registry"))
    backoff: Backoff = field(default_factory=Backoff)
    builder: BuilderKind = field(default="classic", metadata=given_by("builder", "build.builder"))
    # of the BuildKit builder's images
    compression: Compression = field(default="gzip", metadata=given_by("compression", "build.compression"))
    # a buildx builder, or a Docker context, to build on
    buildx_builder: str | None = field(default=None, metadata=given_by("buildx_builder"))
    secret_files: tuple[tuple[str, Path], ...] = field(default=(), metadata=given_by("secret"))
    source: SourceState = field(default_factory=SourceState)  # the checkout's labels, BuildKit's epoch


def _setting(name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(BuildOptions) if f.name == name)


def merged(name: str, command: BuildCommand, matrix: Matrix) -> Any:
    """Setting ``name`` as this run takes it: its flag's value where the flag was given, else the
    matrix's key (its default when the matrix leaves it out), else the flag's default."""
    setting = _setting(name)
    value = getattr(command, setting.metadata[FLAG])
    key = setting.metadata[MATRIX_KEY]
    if value is None and key is not None:
        return operator.attrgetter(key)(matrix)
    return value


def resolve(
    command: BuildCommand,
    plan: Plan,
    *,
    today: date,
    source: SourceState,
    mirrors: tuple[tuple[str, str], ...] = (),
    labels: tuple[tuple[str, str], ...] = (),
) -> BuildOptions:
    """The build stage's options: ``command``'s flags over ``plan``'s matrix, each checked as the
    run will use it, in the order a person fixes them (the registry, then the builder and what
    needs it, then the secrets). ``mirrors`` and ``labels`` are ``command``'s, already checked
    (before any file was read)."""
    from imagekit.plan.matrix import registry_host
    from imagekit.plan.rules import check_build_settings
    from imagekit.plan.schema import BuildSettings

    matrix = plan.matrix
    registry: str | None = merged("registry", command, matrix)
    if command.push or command.registry is not None:  # --push needs one; a --registry is checked
        registry = registry_host(command.registry, plan, command.matrix)
    builder: BuilderKind = chosen(BuilderKind, merged("builder", command, matrix), flag("builder"), "builder")
    given = merged("compression", command, matrix)  # None: the matrix leaves it to the builder
    compression: Compression = (
        default_compression(builder)
        if given is None
        else chosen(Compression, given, flag("compression"), "compression")
    )
    settings = BuildSettings(builder=builder, compression=compression)
    needing = [flag(name) for name in ("buildx_builder", "secret") if getattr(command, name)]
    if needing and not settings.on_buildkit:
        raise InputError(f"{', '.join(needing)} needs the BuildKit builder: add --builder buildkit")
    # the matrix's own refusals (credentials, zstd) on the settings this run uses, before any work
    check_build_settings(matrix, settings, "imagekit build")
    return BuildOptions(
        today=today,
        jobs=command.jobs,
        force=command.force,
        timeout_s=command.timeout,
        fail_fast=command.fail_fast,
        pin_base_digests=command.pin_base_digests,
        mirrors=mirrors,
        cache_from=command.cache_from,
        network_mode=command.network,
        extra_labels=labels,
        push=command.push,
        registry=registry,
        builder=builder,
        compression=compression,
        buildx_builder=command.buildx_builder,
        secret_files=_secret_files(command.secret or [], matrix),
        source=source,
    )


def checked_labels(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``--label``'s pairs, each a label key and value docker takes and none under imagekit's own
    prefix (what it checks, skips and publishes by)."""
    from imagekit.core.safetypes import LABEL_KEY, LABEL_VALUE

    for key, value in pairs:
        problem = LABEL_KEY.problem(key) or LABEL_VALUE.problem(value)
        if problem is not None:
            raise InputError(f"--label {shown(key)}: {problem}")
        if key.startswith(LABEL_PREFIX):
            raise InputError(
                f"--label {key}: labels under {LABEL_PREFIX}* are imagekit's own (what it checks,"
                " skips and publishes by); choose another key"
            )
    return pairs


def checked_mirrors(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``--mirror``'s pairs, each side an image prefix (a registry host and repository path)."""
    from imagekit.plan.schema_values import IMAGE_PREFIX

    for pair in pairs:
        for prefix in pair:
            problem = IMAGE_PREFIX.problem(prefix)
            if problem is not None:
                raise InputError(f"--mirror {shown('='.join(pair))}: {problem}")
    return pairs


def _secret_files(given: list[str], matrix: Matrix) -> tuple[tuple[str, Path], ...]:
    """``--secret ID=FILE`` as (id, file) pairs, each id one the matrix's credentials name."""
    secrets: dict[str, Path] = {}
    for item in given:
        secret_id, sep, file = item.partition("=")
        if not sep or not secret_id or not file:
            raise InputError(f"--secret {printable(item)!r}: expected ID=FILE (the value is read from FILE)")
        secrets[secret_id] = Path(file)
    known = {c.secret for c in matrix.sources.pip.credentials}
    unknown = sorted(set(secrets) - known)
    if unknown:
        raise InputError(
            f"--secret {unknown[0]}: the matrix names no such secret (sources.pip.credentials:"
            f" {', '.join(sorted(known)) or 'none'})"
        )
    return tuple(sorted(secrets.items()))
