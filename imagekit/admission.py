"""Admission on a cluster: a Kyverno ClusterPolicy that admits only images carrying a valid
imagekit attestation (``imagekit.attest``), written by `imagekit k8s --policy kyverno` next to the
Job manifests (``imagekit.k8s``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

KYVERNO_POLICY_FILE = "imagekit-attestation-policy.kyverno.yaml"
KYVERNO_POLICY_NAME = "imagekit-verified-images"


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


def render_policy(document: Mapping[str, Any]) -> str:
    """A policy document as the YAML file `k8s` writes (the PEM a literal block, as typed)."""
    return yaml.safe_dump(dict(document), sort_keys=False)
