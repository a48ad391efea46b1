"""Admission on a cluster, written next to the Job manifests (``imagekit.k8s.manifests``) by
`imagekit k8s --policy`: a Kyverno ClusterPolicy (``kyverno``, or its former name
``kyverno-legacy``), a Kyverno ImageValidatingPolicy (``kyverno-ivpol``; both in
``imagekit.k8s.kyverno``, which says why ``kyverno`` is the ClusterPolicy) or a Sigstore
policy-controller ClusterImagePolicy (``sigstore``). Each admits only images carrying a valid
imagekit attestation (``imagekit.attest.statements``).

All check the digest a pod pulls: an image's manifest digest, or for a group of platforms the
index digest, whose attestation has the same predicate type and the same ``verdict`` and
``gpu.visible`` (``imagekit.attest.index``), so one policy admits both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from imagekit.attest.statements import (
    PREDICATE_CONDITIONS,
    VERIFICATION_PREDICATES,
    admitted_types,
    load_public_key,
)
from imagekit.core import naming
from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.k8s.kyverno import (
    KYVERNO_IVPOL_POLICY_FILE,
    KYVERNO_POLICY_FILE,
    cluster_policy,
    cluster_policy_problem,
    image_validating_policy,
)

if TYPE_CHECKING:
    from imagekit.plan.schema import Publish
    from imagekit.report.lockfile import LockEntry

SIGSTORE_POLICY_FILE = "imagekit-attestation-policy.sigstore.yaml"
SIGSTORE_POLICY_NAME = "imagekit-verified-images"
# what `imagekit k8s --policy` writes; kyverno-legacy is kyverno's former name (the same ClusterPolicy)
POLICIES = ("kyverno", "kyverno-ivpol", "kyverno-legacy", "sigstore")
CLUSTER_POLICY_NAMES = ("kyverno", "kyverno-legacy")


def check_policies(policies: Sequence[str] | None, key: Path | None, attestation_policy: str) -> Path | None:
    """The public key of ``--policy``, None without one; before anything is fetched or written,
    an InputError for a policy name imagekit does not write, a policy without ``--key``, and the
    Kyverno ClusterPolicy asked to admit checked images (it cannot admit validated ones beside)."""
    for policy in policies or ():
        if policy not in POLICIES:
            raise InputError(f"--policy {shown(policy)}: use {', '.join(POLICIES[:-1])} or {POLICIES[-1]}")
    if not policies:
        return None
    if key is None:
        raise InputError(
            f"--policy {policies[0]} needs --key PUB (the public key the attestations are signed with)"
        )
    predicate_type = VERIFICATION_PREDICATES.get(attestation_policy)
    if predicate_type is None:
        raise InputError(f"--attestation-policy {shown(attestation_policy)}: use validated or checked")
    for policy in policies:
        problem = cluster_policy_problem(predicate_type, policy)
        if policy in CLUSTER_POLICY_NAMES and problem is not None:
            raise InputError(problem)
    return key


def policy_files(
    policies: Sequence[str], repositories: Sequence[str], public_pem: str, predicate_type: str
) -> dict[str, str]:
    """The admission policy files (file name -> YAML) ``policies`` name, each admitting the
    ``repositories``' digests whose attestation ``public_pem`` verifies and ``predicate_type``'s
    policy accepts."""
    writers = {
        "kyverno": (KYVERNO_POLICY_FILE, cluster_policy),
        "kyverno-legacy": (KYVERNO_POLICY_FILE, cluster_policy),  # one file, however it is named
        "kyverno-ivpol": (KYVERNO_IVPOL_POLICY_FILE, image_validating_policy),
        "sigstore": (SIGSTORE_POLICY_FILE, sigstore_policy),
    }
    return {
        name: render_policy(write(repositories, public_pem, predicate_type))
        for policy, (name, write) in writers.items()
        if policy in policies
    }


def published_policy_files(
    policies: Sequence[str],
    publish: Publish,
    entries: Mapping[str, LockEntry],
    key: Path,
    attestation_policy: str,
) -> dict[str, str]:
    """``policy_files`` for what was published: the repositories ``entries`` name (the matrix's
    publish repository when there are none), attestations signed with the key at ``key``."""
    pem = load_public_key(key).pem()
    repositories = sorted({e.repository for e in entries.values()}) or [
        naming.repository(publish.registry, publish.repository)
    ]
    return policy_files(policies, repositories, pem, VERIFICATION_PREDICATES[attestation_policy])


# -- Sigstore policy-controller ----------------------------------------------------------------------------


def cue_policy(predicate_type: str) -> str:
    """The CUE policy-controller unifies with the attestation's in-toto Statement (its decoded
    payload): the predicate type, and each of its ``PREDICATE_CONDITIONS`` (a disjunction where more
    than one value is allowed). A Statement that does not unify is refused."""
    lines = [f"predicateType: {json.dumps(predicate_type)}", "predicate: {"]
    for path, allowed in PREDICATE_CONDITIONS[predicate_type].items():
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
    kinds = admitted_types(predicate_type)
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
