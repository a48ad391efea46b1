"""Admission on a cluster: a Kyverno ClusterPolicy (`imagekit k8s --policy kyverno`) or a Sigstore
policy-controller ClusterImagePolicy (`--policy sigstore`) that admits only images carrying a valid
imagekit attestation (``imagekit.attest.statements``), written next to the Job manifests
(``imagekit.k8s.manifests``).

Both check the digest a pod pulls: an image's manifest digest, or for a group of platforms the
index digest, whose attestation has the same predicate type and the same ``verdict`` and
``gpu.visible`` (``imagekit.attest.index``), so one policy admits both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from imagekit.attest.statements import CHECKED_PREDICATE, VALIDATED_PREDICATE

KYVERNO_POLICY_FILE = "imagekit-attestation-policy.kyverno.yaml"
KYVERNO_POLICY_NAME = "imagekit-verified-images"
SIGSTORE_POLICY_FILE = "imagekit-attestation-policy.sigstore.yaml"
SIGSTORE_POLICY_NAME = "imagekit-verified-images"
POLICIES = ("kyverno", "sigstore")  # what `imagekit k8s --policy` writes


def kyverno_policy(repositories: Sequence[str], public_pem: str, predicate_type: str) -> dict[str, Any]:
    """A Kyverno ClusterPolicy that admits a Pod's image from ``repositories`` only when its
    digest carries a DSSE attestation of ``predicate_type`` signed by ``public_pem`` (cosign's
    key-based layout, which imagekit writes), whose predicate says validated on a visible GPU.
    Kyverno resolves a tag to its digest and pins it (``mutateDigest``)."""
    references = sorted({f"{r}{suffix}" for r in repositories for suffix in (":*", "@*")})
    conditions = [
        {"key": "{{ verdict }}", "operator": "Equals", "value": "validated"},
        {"key": "{{ gpu.visible }}", "operator": "Equals", "value": True},
    ]
    if predicate_type.endswith("/checked-without-gpu/v1"):
        conditions = [{"key": "{{ verdict }}", "operator": "AnyIn", "value": ["validated", "checked"]}]
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": KYVERNO_POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "imagekit: verified GPU images only",
                "policies.kyverno.io/description": (
                    "Admits images of the published repository only by a digest that carries an"
                    f" imagekit verification attestation ({predicate_type}) signed by the given key."
                ),
            },
        },
        "spec": {
            "validationFailureAction": "Enforce",
            "background": False,
            "webhookTimeoutSeconds": 30,
            "rules": [
                {
                    "name": "imagekit-verification-attestation",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [
                        {
                            "imageReferences": references,
                            "required": True,
                            "verifyDigest": True,
                            "mutateDigest": True,
                            "attestations": [
                                {
                                    "type": predicate_type,
                                    "attestors": [
                                        {
                                            "count": 1,
                                            "entries": [
                                                {
                                                    "keys": {
                                                        "publicKeys": public_pem.strip(),
                                                        "signatureAlgorithm": "sha256",
                                                        "rekor": {"ignoreTlog": True},
                                                        "ctlog": {"ignoreSCT": True},
                                                    }
                                                }
                                            ],
                                        }
                                    ],
                                    "conditions": [{"all": conditions}],
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }


# -- Sigstore policy-controller ----------------------------------------------------------------------------

# What each predicate type's admission requires of the predicate: field path -> the values allowed.
# The CUE each ClusterImagePolicy evaluates is written from these (``cue_policy``), so the tests
# can hold real Statements (an image's, an index's) to the same conditions.
ADMISSION_CONDITIONS: Mapping[str, Mapping[str, tuple[object, ...]]] = {
    VALIDATED_PREDICATE: {"verdict": ("validated",), "gpu.visible": (True,)},
    CHECKED_PREDICATE: {"verdict": ("checked",)},
}


def cue_policy(predicate_type: str) -> str:
    """The CUE policy-controller unifies with the attestation's in-toto Statement (its decoded
    payload): the predicate type, and each of ``ADMISSION_CONDITIONS`` (a disjunction where more
    than one value is allowed). A Statement that does not unify is refused."""
    lines = [f"predicateType: {json.dumps(predicate_type)}", "predicate: {"]
    for path, allowed in ADMISSION_CONDITIONS[predicate_type].items():
        value = " | ".join(json.dumps(v) for v in allowed)
        lines.append(f"  {': '.join(path.split('.'))}: {value}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _sigstore_globs(repositories: Sequence[str]) -> list[dict[str, str]]:
    """policy-controller matches a glob against the reference's full name (``ghcr.io/acme/x:tag``,
    ``...@sha256:...``); ``*`` stops at ``/``, so ``repo:*`` and ``repo@*`` are this repository's
    tags and digests only (not ``repo-staging``). Docker Hub names are matched as resolved."""
    names = sorted(
        {"index.docker.io/" + r.split("/", 1)[1] if r.startswith("docker.io/") else r for r in repositories}
    )
    return [{"glob": f"{name}{suffix}"} for name in names for suffix in (":*", "@*")]


def sigstore_policy(repositories: Sequence[str], public_pem: str, predicate_type: str) -> dict[str, Any]:
    """A policy-controller ClusterImagePolicy (policy.sigstore.dev/v1beta1) that admits an image
    of ``repositories`` only when its digest carries an attestation of ``predicate_type`` signed by
    ``public_pem`` whose Statement passes ``cue_policy``. With the checked-without-GPU type, a
    gpu-validated attestation is accepted too: a second authority (authorities are alternatives,
    an image passes when one of them does). No ``ctlog``: imagekit signs with a key and writes no
    transparency-log entry, so the controller does not look for one."""
    kinds = [VALIDATED_PREDICATE] + ([CHECKED_PREDICATE] if predicate_type == CHECKED_PREDICATE else [])
    authorities = [
        {
            "name": f"imagekit-{kind.rstrip('/').split('/')[-2]}",
            "key": {"data": public_pem.strip() + "\n", "hashAlgorithm": "sha256"},
            "attestations": [
                {
                    "name": kind.rstrip("/").split("/")[-2],
                    "predicateType": kind,
                    "policy": {"type": "cue", "data": cue_policy(kind)},
                }
            ],
        }
        for kind in kinds
    ]
    return {
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": {
            "name": SIGSTORE_POLICY_NAME,
            "annotations": {
                "imagekit.dev/description": (
                    "Admits images of the published repository only by a digest that carries an"
                    f" imagekit verification attestation ({predicate_type}) signed by the given key."
                ),
            },
        },
        "spec": {"mode": "enforce", "images": _sigstore_globs(repositories), "authorities": authorities},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a PEM key, a CUE policy) as literal blocks, as they are typed."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def render_policy(document: Mapping[str, Any]) -> str:
    """A policy document as the YAML file `k8s` writes (a PEM or a CUE policy a literal block)."""
    return yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False)
