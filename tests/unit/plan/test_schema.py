"""`imagekit schema`: a JSON Schema that editors can use, and that agrees with the validator."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from imagekit.core.safetypes import secret_env_name
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import BuildSettings
from tests.conftest import CUDA_BASE, REPO, run_cli


def schema() -> dict[str, object]:
    result = run_cli("schema")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def test_schema_is_a_valid_json_schema() -> None:
    document = schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["title"] == "imagekit matrix"
    assert set(document["required"]) == {"axes", "bases"}
    assert document["additionalProperties"] is False


def test_shipped_matrix_validates_against_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(schema())
    # what an editor sees: plain YAML 1.1 types (version is an int, unquoted versions floats)
    validator.validate(yaml.safe_load((REPO / "matrix.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "document",
    [
        {"axes": {"torch": ["2.1.2"]}, "bases": {"b": {"image": "x", "os": "debian12"}}, "extra": 1},
        {"axes": {"torch": ["2.1 2"]}, "bases": {"b": {"image": "x", "os": "debian12"}}},
        {"axes": {"torch": ["2.1.2"]}, "bases": {"b": {"image": "x\nRUN id", "os": "debian12"}}},
    ],
)
def test_schema_rejects_what_the_validator_rejects(document: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema()).validate(document)


def test_unquoted_versions_are_fine_for_editors_too() -> None:
    document = {
        "version": 1,
        "axes": {"torch": [2.1], "cuda": [12.1]},
        "bases": {"b": {"image": "x", "os": "u22"}},
    }
    jsonschema.Draft202012Validator(schema()).validate(document)


MATRIX = 'axes: {torch: ["2.14.1"], cuda: ["12.6"], base: [cuda]}\n' + CUDA_BASE


@pytest.mark.parametrize(
    ("credentials", "expected"),
    [
        (
            "{host: a.example.org, login: me, secret: 'hunter2=x'}",
            r"credentials\[0\]\.secret: .*is not a secret's id",
        ),
        (
            "{host: a.example.org, login: me, secret: 'my password'}",
            r"credentials\[0\]\.secret: .*holds a space",
        ),
        (
            "{host: a.example.org, login: me, secret: Pip-Index}",
            r"credentials\[0\]\.secret: .*is not a secret's id",
        ),
        (
            "{host: a.example.org, login: me, secret: pip, password: x}",
            r"credentials\[0\]\.password: unknown key",
        ),
        ("{host: a.example.org, login: 'me:pw', secret: pip}", r"credentials\[0\]\.login: .*is not a login"),
        (
            "{host: 'https://a.example.org', login: me, secret: pip}",
            r"credentials\[0\]\.host: .*is not a host name",
        ),
        ("{host: a.example.org, secret: pip}", r"credentials\[0\]\.login: is required"),
        ("{host: 'a.example.org:65536', login: me, secret: pip}", r"credentials\[0\]\.host: .*past 65535"),
        ("{host: 'a.example.org:', login: me, secret: pip}", r"credentials\[0\]\.host: .*is not a host name"),
        (
            "{host: 'a.example.org:8080/simple', login: me, secret: pip}",
            r"credentials\[0\]\.host: .*not a host",
        ),
    ],
)
def test_a_credential_names_a_secret_and_never_holds_one(
    credentials: str, expected: str, write_matrix: Callable[[str], Path]
) -> None:
    path = write_matrix(
        f"build: {{builder: buildkit}}\nsources: {{pip: {{credentials: [{credentials}]}}}}\n{MATRIX}"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    assert re.search(r"sources\.pip\." + expected, result.stderr), result.stderr
    assert result.stderr.count("\n") == 1


# A credential's host may carry its index URL's port (RELIABILITY's "credential host with a port"
# is admitted, decided in issue 45): pip finds a netrc login by the URL's host name alone (pip's
# vendored requests, utils.get_netrc_auth, strips the port), so the netrc names the host and the
# login is sent to every port of it (tests/unit/builds/backends/test_buildkit.py).
def test_a_credential_host_with_its_index_urls_port_is_admitted(write_matrix: Callable[[str], Path]) -> None:
    credential = "{host: '127.0.0.1:8080', login: ci-bot, secret: pip-index}"
    path = write_matrix(
        f"build: {{builder: buildkit}}\nsources: {{pip: {{credentials: [{credential}]}}}}\n{MATRIX}"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 0, result.stderr
    (found,) = load_plan(path).matrix.sources.pip.credentials
    assert found.host == "127.0.0.1:8080"


# The netrc holds one login per host name: two ports of one host are one host to it.
@pytest.mark.parametrize(
    ("first", "second"), [("a.example.org", "a.example.org"), ("a.example.org:8080", "a.example.org:8081")]
)
def test_one_login_per_index_host(first: str, second: str, write_matrix: Callable[[str], Path]) -> None:
    twice = f"{{host: {first}, login: me, secret: one}}, {{host: {second}, login: you, secret: two}}"
    path = write_matrix(
        f"build: {{builder: buildkit}}\nsources: {{pip: {{credentials: [{twice}]}}}}\n{MATRIX}"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2 and "listed twice" in result.stderr


def test_build_settings_default_to_the_classic_builder_and_refuse_unknown_keys(
    write_matrix: Callable[[str], Path],
) -> None:
    build = load_plan(write_matrix(MATRIX)).matrix.build
    assert build == BuildSettings(builder="classic", compression=None)
    assert build.layer_compression == "gzip"
    for bad, message in (
        ("{builder: kaniko}", "build.builder"),
        ("{cache: true}", "build.cache: unknown key"),
    ):
        result = run_cli("plan", "--matrix", str(write_matrix(f"build: {bad}\n{MATRIX}")))
        assert result.exit_code == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("build", "layers"),
    [
        ("{builder: buildkit}", "zstd"),  # every engine that pulls these images takes zstd (issue 49)
        ("{builder: buildkit, compression: gzip}", "gzip"),  # for a consumer that needs gzip
        ("{builder: buildkit, compression: zstd}", "zstd"),
        ("{builder: classic}", "gzip"),  # the engine pushes the classic builder's images: gzip only
        ("{}", "gzip"),
    ],
)
def test_the_layer_compression_is_the_matrixs_else_the_builders_default(
    write_matrix: Callable[[str], Path], build: str, layers: str
) -> None:
    settings = load_plan(write_matrix(f"build: {build}\n{MATRIX}")).matrix.build
    assert settings.layer_compression == layers
    # a --builder given later (render, build) derives it again: the matrix named none
    if settings.compression is None:
        assert settings.model_copy(update={"builder": "buildkit"}).layer_compression == "zstd"


def test_a_secrets_value_comes_from_its_environment_variable() -> None:
    assert secret_env_name("pip-index") == "IMAGEKIT_SECRET_PIP_INDEX"
    assert secret_env_name("a") == "IMAGEKIT_SECRET_A"


def test_publish_max_layer_size_takes_bytes_or_units_and_defaults_to_8_gib(
    write_matrix: Callable[[str], Path],
) -> None:
    assert load_plan(write_matrix(MATRIX)).matrix.publish.max_layer_size == 8 * 2**30
    for given, size in (("8GiB", 8 * 2**30), ("'500 MB'", 500 * 10**6), ("1234", 1234)):
        found = load_plan(write_matrix(f"publish: {{max_layer_size: {given}}}\n{MATRIX}"))
        assert found.matrix.publish.max_layer_size == size, given
    for bad in ("8 GiBs", "-1", "0", "true", "1.5", "2TiB", "'99999999999999999999'"):
        result = run_cli(
            "plan", "--matrix", str(write_matrix(f"publish: {{max_layer_size: {bad}}}\n{MATRIX}"))
        )
        assert result.exit_code == 2 and "publish.max_layer_size" in result.stderr, (bad, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
