"""The build stage's options (imagekit.builds.options): each setting declared once, with the flag
that sets it and the matrix key it reads; ``resolve``, the one merge of the command line over the
matrix, and its refusals in their words."""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path
from typing import Any, get_args

import pytest

from imagekit.builds.command_line import BuildCommand
from imagekit.builds.options import (
    FLAG,
    MATRIX_KEY,
    BuildOptions,
    checked_labels,
    checked_mirrors,
    merged,
    resolve,
)
from imagekit.core.build_kinds import BuilderKind, Compression
from imagekit.core.errors import InputError
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import BuildSettings, PipCredential
from imagekit.plan.source import SourceState
from tests.conftest import REPO

DAY = date(2026, 12, 1)
MATRIX = REPO / "matrix.yaml"  # build: classic, gzip (the defaults); publish.registry: ghcr.io
# The command's own options, no build setting: what it reads, where it writes, what it runs after.
COMMANDS_OWN = {"matrix", "only", "state_dir", "as_json", "then_verify", "gpus", "verify_timeout"}


@pytest.fixture(scope="module")
def plan() -> Plan:
    return load_plan(MATRIX)


def _with(plan: Plan, **matrix: Any) -> Plan:
    """``plan`` with its matrix's top-level ``matrix`` keys replaced."""
    return dataclasses.replace(plan, matrix=plan.matrix.model_copy(update=matrix))


def _resolved(plan: Plan, **flags: Any) -> BuildOptions:
    return resolve(BuildCommand(matrix=MATRIX, **flags), plan, today=DAY, source=SourceState())


def test_every_option_of_the_command_is_a_setting_or_the_commands_own() -> None:
    """An option added to ``imagekit build`` reaches the stage or is named here as the command's."""
    set_by = {f.metadata[FLAG] for f in dataclasses.fields(BuildOptions) if FLAG in f.metadata}
    assert set_by | COMMANDS_OWN == {f.name for f in dataclasses.fields(BuildCommand)}
    assert not set_by & COMMANDS_OWN


def test_a_setting_the_matrix_holds_defaults_as_the_matrix_does() -> None:
    """Each matrix key a setting reads exists, and the stage's default is the schema's."""
    keyed = {f.name: f for f in dataclasses.fields(BuildOptions) if f.metadata.get(MATRIX_KEY)}
    assert {f.metadata[MATRIX_KEY] for f in keyed.values()} == {
        "build.builder",
        "build.compression",
        "publish.registry",
    }
    settings = BuildSettings()
    assert (keyed["builder"].default, keyed["compression"].default) == (
        settings.builder,
        settings.layer_compression,
    )


def test_the_matrix_decides_what_no_flag_says(plan: Plan) -> None:
    options = _resolved(plan)
    assert (options.builder, options.compression, options.registry) == ("classic", "gzip", "ghcr.io")
    buildkit = _with(plan, build=BuildSettings(builder="buildkit", compression="zstd"))
    options = _resolved(buildkit)
    assert (options.builder, options.compression) == ("buildkit", "zstd")


def test_a_compression_nothing_names_is_the_chosen_builders_default(plan: Plan) -> None:
    """zstd with BuildKit (every engine that pulls these images takes it: issue 49), gzip with the
    classic builder, whichever of the flag and the matrix chose the builder."""
    assert _resolved(plan).compression == "gzip"
    assert _resolved(plan, builder="buildkit").compression == "zstd"
    buildkit = _with(plan, build=BuildSettings(builder="buildkit"))
    assert _resolved(buildkit).compression == "zstd"
    assert _resolved(buildkit, compression="gzip").compression == "gzip"
    assert _resolved(buildkit, builder="classic").compression == "gzip"


def test_a_flag_overrides_the_matrix(plan: Plan) -> None:
    buildkit = _with(plan, build=BuildSettings(builder="buildkit", compression="zstd"))
    options = _resolved(buildkit, builder="buildkit", compression="gzip", registry="127.0.0.1:5000")
    assert (options.builder, options.compression, options.registry) == ("buildkit", "gzip", "127.0.0.1:5000")
    assert merged("builder", BuildCommand(builder="classic"), buildkit.matrix) == "classic"
    assert merged("builder", BuildCommand(), buildkit.matrix) == "buildkit"


def test_every_flag_reaches_its_setting(plan: Plan) -> None:
    options = resolve(
        BuildCommand(jobs=3, force=True, timeout=60.0, fail_fast=True, pin_base_digests=True, network="host"),
        plan,
        today=DAY,
        source=SourceState(revision="abc"),
        mirrors=(("a", "b"),),
        labels=(("k", "v"),),
    )
    assert (options.jobs, options.force, options.timeout_s, options.fail_fast) == (3, True, 60.0, True)
    assert (options.pin_base_digests, options.network_mode, options.today) == (True, "host", DAY)
    assert (options.mirrors, options.extra_labels, options.source.revision) == (
        (("a", "b"),),
        (("k", "v"),),
        "abc",
    )
    assert _resolved(plan, cache_from=False).cache_from is False


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"builder": "kaniko"}, "--builder 'kaniko': the builders are classic and buildkit"),
        ({"compression": "xz"}, "--compression 'xz': the compressions are gzip and zstd"),
        ({"secret": ["pip-index=/f"]}, "--secret needs the BuildKit builder: add --builder buildkit"),
        (
            {"buildx_builder": "remote", "secret": ["s=/f"]},
            "--buildx-builder, --secret needs the BuildKit builder: add --builder buildkit",
        ),
        ({"compression": "zstd"}, "imagekit build: build.compression: zstd applies to the BuildKit builder"),
        ({"registry": "bad host"}, "--registry 'bad host': "),
        ({"builder": "buildkit", "secret": ["no-equals"]}, "--secret 'no-equals': expected ID=FILE"),
        (
            {"builder": "buildkit", "secret": ["other=/f"]},
            "--secret other: the matrix names no such secret (sources.pip.credentials: none)",
        ),
    ],
)
def test_a_setting_the_run_cannot_use_is_refused_in_one_line(
    plan: Plan, flags: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError) as refused:
        _resolved(plan, **flags)
    assert refused.value.message.startswith(message), refused.value.message


def test_a_closed_sets_message_is_derived_from_its_literal() -> None:
    """A builder or a compression added to its Literal is one the refusal names, unedited."""
    assert get_args(BuilderKind) == ("classic", "buildkit") and get_args(Compression) == ("gzip", "zstd")


def test_push_needs_a_registry_from_the_flag_or_the_matrix(plan: Plan) -> None:
    nowhere = _with(plan, publish=plan.matrix.publish.model_copy(update={"registry": None}))
    assert _resolved(nowhere).registry is None  # nothing staged: none needed
    with pytest.raises(
        InputError, match=r"matrix.yaml: no registry; set publish.registry or pass --registry"
    ):
        _resolved(nowhere, push=True)
    assert _resolved(nowhere, push=True, registry="127.0.0.1:5000").registry == "127.0.0.1:5000"


def test_secrets_are_the_matrixs_credentials_read_from_files(plan: Plan) -> None:
    sources = plan.matrix.sources
    pip = sources.pip.model_copy(
        update={"credentials": [PipCredential(host="index.example.org", login="ci", secret="pip-index")]}
    )
    with_secret = _with(
        plan,
        build=BuildSettings(builder="buildkit"),
        sources=sources.model_copy(update={"pip": pip}),
    )
    options = _resolved(with_secret, secret=["pip-index=/run/token"], buildx_builder="remote")
    assert options.secret_files == (("pip-index", Path("/run/token")),) and options.buildx_builder == "remote"
    with pytest.raises(
        InputError, match=r"the matrix names no such secret \(sources.pip.credentials: pip-index\)"
    ):
        _resolved(with_secret, secret=["other=/f"])


def test_a_label_is_one_docker_takes_and_none_of_imagekits_own() -> None:
    assert checked_labels((("team", "ml"),)) == (("team", "ml"),)
    with pytest.raises(InputError, match=r"^--label imagekit\.torch: labels under imagekit\.\*"):
        checked_labels((("team", "ml"), ("imagekit.torch", "9")))
    with pytest.raises(InputError, match=r"^--label 'a\\nb': "):
        checked_labels((("a\nb", "1"),))


def test_each_side_of_a_mirror_is_an_image_prefix() -> None:
    pairs = (("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),)
    assert checked_mirrors(pairs) == pairs
    with pytest.raises(InputError, match=r"^--mirror 'nvidia/cuda=evil.example:99999/x': "):
        checked_mirrors((("nvidia/cuda", "evil.example:99999/x"),))
