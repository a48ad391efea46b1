"""Kyverno admission policies `imagekit k8s --policy` writes (``imagekit.k8s.admission`` has the
other kind and the CLI's choices). Which Kyverno kind admits an imagekit attestation is decided by
the verifier behind it, not by the document: imagekit signs with a key and writes no
transparency-log entry, so a verifier admits only where "ignore the log" is honoured for
attestations. Read in kyverno/kyverno at v1.17.0 to v1.19.0 (and main, 2026-08-21):

- ``kyverno``: the ``ClusterPolicy`` (``kyverno.io/v1`` ``verifyImages``). Its cosign verifier
  (``pkg/image/verifiers/cpol/cosign/cosign.go`` ``buildCosignOptions``, v1.19.0) passes
  ``keys.rekor.ignoreTlog`` to cosign's ``CheckOpts.IgnoreTlog``, and ``FetchAttestations``
  (``cpol/cosign/verifier.go``) only logs cosign's ``bundleVerified``: a key-signed attestation
  without a log entry is admitted, as ``cosign verify-attestation --insecure-ignore-tlog`` does.
  Served by Kyverno 1.13 (per-rule ``failureAction``) to 1.19; deprecated since 1.17, its removal
  planned for 1.20. It cannot admit "this type or that one" (every attestation a rule lists must
  be found), so it is written for the validated policy only (``cluster_policy_problem``).
- ``kyverno-ivpol``: an ``ImageValidatingPolicy`` (``policies.kyverno.io/v1``), its checks CEL over
  the verified Statement. Its attestation verifier (``pkg/image/verifiers/ivpol/cosign/verifier.go``
  ``VerifyAttestationSignature``) refuses every attestation cosign verified without a log bundle
  ("cosign bundle verification failed"), whatever ``ctlog.insecureIgnoreTlog`` says, in every
  release up to 1.19.0: kyverno/kyverno#17109, its fix #17217 unmerged. It is written for a Kyverno
  that carries that fix; on 1.17 to 1.19 it denies every imagekit image.
- ``kyverno-legacy``: the former name of ``kyverno``'s ClusterPolicy, the same document.

Both admit an image of the published repositories only by a digest carrying a verification
attestation signed by the key, whose predicate says what its type claims
(``statements.PREDICATE_CONDITIONS``). The ImageValidatingPolicy asking for checked admits a
gpu-validated digest too (``statements.admitted_types``) in one CEL expression.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from imagekit.attest.statements import PREDICATE_CONDITIONS, VERIFICATION_PREDICATES, admitted_types
from imagekit.core.errors import InputError

KYVERNO_POLICY_FILE = "imagekit-attestation-policy.kyverno.yaml"  # the ClusterPolicy
KYVERNO_IVPOL_POLICY_FILE = "imagekit-attestation-policy.kyverno-ivpol.yaml"
# The upstream issue that keeps the ImageValidatingPolicy from admitting (module docstring)
KYVERNO_TLOG_ISSUE = "kyverno/kyverno#17109"
KYVERNO_POLICY_NAME = "imagekit-verified-images"
ATTESTOR = "imagekit"  # the attestor's name in the ImageValidatingPolicy, as CEL refers to it
WEBHOOK_TIMEOUT_S = 30  # verifying fetches the attestations from the registry

# The attestation's name in the ImageValidatingPolicy (a CEL identifier) per predicate type:
# the verdict it stands for.
_ATTESTATION_NAMES = {kind: verdict for verdict, kind in VERIFICATION_PREDICATES.items()}


def _description(predicate_type: str) -> str:
    return (
        "Admits images of the published repository only by a digest that carries an imagekit"
        f" verification attestation ({' or '.join(admitted_types(predicate_type))}) signed by the given key."
    )


def _cel(value: object) -> str:
    """A CEL literal for a condition's value: JSON's strings and booleans are CEL's too."""
    if not isinstance(value, str | bool):
        raise TypeError(f"no CEL literal for {value!r}")
    return json.dumps(value)


def _admits(predicate_type: str) -> str:
    """CEL, over one image reference ``image``: its digest carries an attestation of
    ``predicate_type`` that the key verifies, and the Statement says what its type claims.
    ``&&`` stops at the first false term, so no payload is read from an unverified attestation."""
    name = f"attestations.{_ATTESTATION_NAMES[predicate_type]}"
    payload = f"extractPayload(image, {name})"
    terms = [
        f"verifyAttestationSignatures(image, {name}, [attestors.{ATTESTOR}]) > 0",
        f"{payload}.predicateType == {_cel(predicate_type)}",
    ]
    for path, allowed in PREDICATE_CONDITIONS[predicate_type].items():
        field = f"{payload}.predicate.{path}"
        if len(allowed) == 1:
            terms.append(f"{field} == {_cel(allowed[0])}")
        else:
            terms.append(f"{field} in [{', '.join(_cel(v) for v in allowed)}]")
    return "(" + "\n    && ".join(terms) + ")"


def admission_expression(predicate_type: str) -> str:
    """The validation's CEL: every image the policy matched (``images`` maps containers,
    initContainers and ephemeralContainers to their references) is admitted by one of the
    attestation types a policy asking for ``predicate_type`` admits."""
    either = "\n  || ".join(_admits(kind) for kind in admitted_types(predicate_type))
    # one term a line: the YAML shows it as a literal block, as it would be typed
    return f"images.all(kind, images[kind].all(image,\n  {either}))\n"


def image_names(repositories: Sequence[str]) -> list[str]:
    """Every spelling of the repositories a pod's image can reach Kyverno as. A Docker Hub
    repository is spelled ``docker.io/acme/x``, ``index.docker.io/acme/x`` or ``acme/x``, and an
    official one ``library/x`` or ``x`` besides; the ClusterPolicy matches the name as Kyverno
    renders it (``pkg/utils/image/infos.go`` ``GetImageInfo``: ``docker.io/`` put before a name
    without a registry, not ``library/``, so ``x`` is ``docker.io/x``; the bare name when the
    default-registry mutation is off), the ImageValidatingPolicy as the pod spells it: a spelling
    not listed is an image neither policy looks at."""
    names: set[str] = set()
    for repository in repositories:
        names.add(repository)
        if repository.startswith("docker.io/"):
            path = repository.removeprefix("docker.io/")
            paths = {path, path.removeprefix("library/")}
            names.update(f"{host}{p}" for p in paths for host in ("", "docker.io/", "index.docker.io/"))
    return sorted(names)


def image_globs(repositories: Sequence[str], bare: bool = False) -> list[str]:
    """The globs of the repository's tags and digests (``repo:*``, ``repo@*``; a literal ``:`` or
    ``@`` follows the name, so ``repo-staging`` is not matched), for every spelling
    (``image_names``). ``bare`` adds the name alone: an ImageValidatingPolicy sees ``repo`` as the
    pod spells it, without the ``:latest`` Kyverno gives it when it pulls (the ClusterPolicy
    sees the name with it)."""
    suffixes = ("", ":*", "@*") if bare else (":*", "@*")
    return [f"{name}{suffix}" for name in image_names(repositories) for suffix in suffixes]


def image_validating_policy(
    repositories: Sequence[str], public_pem: str, predicate_type: str
) -> dict[str, Any]:
    """A Kyverno ImageValidatingPolicy admitting a Pod's images of ``repositories`` only by a
    digest whose attestation (cosign's key-based layout, which imagekit writes) ``public_pem``
    verifies and whose Statement passes ``admission_expression``. Kyverno resolves a tag to its
    digest and pins it (``mutateDigest``); imagekit writes no transparency-log entry, so none is
    looked for (``insecureIgnoreTlog``), which Kyverno's attestation verifier honours only with
    the fix for kyverno/kyverno#17109 (none released up to 1.19.0): see the module's docstring."""
    kinds = admitted_types(predicate_type)
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ImageValidatingPolicy",
        "metadata": {
            "name": KYVERNO_POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "imagekit: verified GPU images only",
                "policies.kyverno.io/description": _description(predicate_type),
            },
        },
        "spec": {
            "validationActions": ["Deny"],
            "failurePolicy": "Fail",
            "webhookConfiguration": {"timeoutSeconds": WEBHOOK_TIMEOUT_S},
            "evaluation": {"background": {"enabled": False}},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchImageReferences": [{"glob": glob} for glob in image_globs(repositories, bare=True)],
            "validationConfigurations": {"required": True, "verifyDigest": True, "mutateDigest": True},
            "attestors": [
                {
                    "name": ATTESTOR,
                    "cosign": {
                        "key": {"data": public_pem.strip() + "\n", "hashAlgorithm": "sha256"},
                        "ctlog": {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True},
                    },
                }
            ],
            "attestations": [{"name": _ATTESTATION_NAMES[kind], "intoto": {"type": kind}} for kind in kinds],
            "validations": [
                {
                    "expression": admission_expression(predicate_type),
                    "message": (
                        "an image of the published repository is admitted only by a digest carrying an"
                        f" imagekit verification attestation ({' or '.join(kinds)}) signed by the"
                        " policy's key; run `imagekit attest verify IMAGE --key PUB` to see why not"
                    ),
                }
            ],
        },
    }


def cluster_policy_problem(predicate_type: str, policy: str = "kyverno") -> str | None:
    """Why the ClusterPolicy (``--policy``'s ``policy``) cannot be written for ``predicate_type``'s
    policy; None when it can."""
    if admitted_types(predicate_type) == (predicate_type,):
        return None
    return (
        f"--policy {policy} cannot admit checked images: a Kyverno ClusterPolicy requires every"
        " attestation type it lists, so it would refuse gpu-validated ones; use --policy sigstore"
        " or --attestation-policy validated (--policy kyverno-ivpol admits either, but only on a"
        f" Kyverno whose ImageValidatingPolicy verifies attestations without a log: {KYVERNO_TLOG_ISSUE})"
    )


def cluster_policy(repositories: Sequence[str], public_pem: str, predicate_type: str) -> dict[str, Any]:
    """The Kyverno ClusterPolicy, for a policy that admits one attestation type (the validated
    one; ``cluster_policy_problem``), enforcing per rule (``verifyImages[].failureAction``, not
    the deprecated spec-level ``validationFailureAction``). ``rekor.ignoreTlog`` is what lets
    Kyverno's verifier admit a key-signed attestation without a log entry (module docstring);
    ``ctlog.ignoreSCT`` keeps it from loading the CT log's keys, which a key has no use for."""
    problem = cluster_policy_problem(predicate_type)
    if problem is not None:
        raise InputError(problem)
    conditions = [
        {"key": f"{{{{ {path} }}}}", "operator": "Equals", "value": allowed[0]}
        for path, allowed in PREDICATE_CONDITIONS[predicate_type].items()
    ]
    references = image_globs(repositories)  # Kyverno gives a name without a tag ``:latest``
    key = {
        "publicKeys": public_pem.strip(),
        "signatureAlgorithm": "sha256",
        "rekor": {"ignoreTlog": True},
        "ctlog": {"ignoreSCT": True},
    }
    verify = {
        "imageReferences": references,
        "failureAction": "Enforce",
        "required": True,
        "verifyDigest": True,
        "mutateDigest": True,
        "attestations": [
            {
                "type": predicate_type,
                "attestors": [{"count": 1, "entries": [{"keys": key}]}],
                "conditions": [{"all": conditions}],
            }
        ],
    }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": KYVERNO_POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "imagekit: verified GPU images only",
                "policies.kyverno.io/description": _description(predicate_type),
            },
        },
        "spec": {
            "background": False,
            "webhookTimeoutSeconds": WEBHOOK_TIMEOUT_S,
            "rules": [
                {
                    "name": "imagekit-verification-attestation",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [verify],
                }
            ],
        },
    }
