"""The Kyverno documents `imagekit k8s --policy kyverno|kyverno-ivpol` writes, held by
check-jsonschema to the CRDs' published schemas (tests/fixtures/crds/, their source and release in
its README), read strictly as the API server reads them (``crd_schema``): every field the document
writes must be one the CRD declares, with the type and values it allows. Offline: the schemas are
local files."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from imagekit.attest import statements as attest
from imagekit.k8s.admission import render_policy
from imagekit.k8s.kyverno import cluster_policy, image_validating_policy
from tests.unit.attest_samples import private_pem, public_pem_of
from tests.unit.k8s.crd_schema import strict_schema, write_strict_schema

PUB = public_pem_of(private_pem()).decode()
REPOSITORIES = ["ghcr.io/acme/pytorch", "docker.io/acme/pytorch-frontends"]
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"

Writer = Callable[[Sequence[str], str, str], dict[str, Any]]
# fixture -> (apiVersion, kind, what writes it, the predicate types it is written for)
SCHEMAS: dict[str, tuple[str, str, Writer, tuple[str, ...]]] = {
    "kyverno/1.17.0/imagevalidatingpolicy-v1.json": (
        "policies.kyverno.io/v1",
        "ImageValidatingPolicy",
        image_validating_policy,
        (attest.VALIDATED_PREDICATE, attest.CHECKED_PREDICATE),
    ),
    "kyverno/1.19.0/imagevalidatingpolicy-v1.json": (
        "policies.kyverno.io/v1",
        "ImageValidatingPolicy",
        image_validating_policy,
        (attest.VALIDATED_PREDICATE, attest.CHECKED_PREDICATE),
    ),
    "kyverno/1.13.0/clusterpolicy-v1.json": (
        "kyverno.io/v1",
        "ClusterPolicy",
        cluster_policy,
        (attest.VALIDATED_PREDICATE,),
    ),
    "kyverno/1.19.0/clusterpolicy-v1.json": (
        "kyverno.io/v1",
        "ClusterPolicy",
        cluster_policy,
        (attest.VALIDATED_PREDICATE,),
    ),
}


def check_jsonschema(schema: Path, documents: Sequence[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--schemafile", str(schema), *map(str, documents)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("fixture", list(SCHEMAS))
def test_the_written_documents_validate_with_check_jsonschema(fixture: str, tmp_path: Path) -> None:
    api_version, kind, write, predicate_types = SCHEMAS[fixture]
    documents = []
    for i, predicate_type in enumerate(predicate_types):
        document = write(REPOSITORIES, PUB, predicate_type)
        assert (document["apiVersion"], document["kind"]) == (api_version, kind)
        path = tmp_path / f"policy-{i}.yaml"
        path.write_text(render_policy(document))  # the YAML `imagekit k8s` writes
        documents.append(path)
    done = check_jsonschema(write_strict_schema(fixture, tmp_path), documents)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok -- validation done" in done.stdout


def _unknown_spec_field(document: dict[str, Any]) -> None:
    document["spec"]["validationFailureActionz"] = "Enforce"


def _unknown_nested_field(document: dict[str, Any]) -> None:
    if document["kind"] == "ClusterPolicy":
        document["spec"]["rules"][0]["verifyImages"][0]["attestations"][0]["predicate"] = "x"
    else:
        document["spec"]["attestors"][0]["cosign"]["key"]["pem"] = "x"


def _bad_enum(document: dict[str, Any]) -> None:
    if document["kind"] == "ClusterPolicy":
        document["spec"]["rules"][0]["verifyImages"][0]["failureAction"] = "Deny"
    else:
        document["spec"]["validationActions"] = ["Enforce"]


def _bad_type(document: dict[str, Any]) -> None:
    if document["kind"] == "ClusterPolicy":
        document["spec"]["webhookTimeoutSeconds"] = "30"
    else:
        document["spec"]["webhookConfiguration"]["timeoutSeconds"] = "30"


@pytest.mark.parametrize("fixture", list(SCHEMAS))
@pytest.mark.parametrize("edit", [_unknown_spec_field, _unknown_nested_field, _bad_enum, _bad_type])
def test_the_strict_schema_refuses_what_the_server_would(fixture: str, edit: Callable[..., None]) -> None:
    """The check can fail: an unknown field anywhere, a value outside an enum, a wrong type."""
    _, _, write, (predicate_type, *_) = SCHEMAS[fixture]
    document = write(REPOSITORIES, PUB, predicate_type)
    validator = jsonschema.Draft7Validator(strict_schema(fixture))
    assert not list(validator.iter_errors(document))
    edit(document)
    assert list(validator.iter_errors(document)), edit.__name__


def test_check_jsonschema_reports_an_unknown_field(tmp_path: Path) -> None:
    fixture = "kyverno/1.19.0/imagevalidatingpolicy-v1.json"
    document = image_validating_policy(REPOSITORIES, PUB, attest.VALIDATED_PREDICATE)
    document["spec"]["validationFailureAction"] = "Enforce"  # the ClusterPolicy's, not this kind's
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(document))
    done = check_jsonschema(write_strict_schema(fixture, tmp_path), [path])
    assert done.returncode == 1 and "validationFailureAction" in done.stdout + done.stderr
