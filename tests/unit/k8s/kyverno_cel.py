"""An ImageValidatingPolicy's admission decision, its CEL evaluated by cel-python against signed
attestations: a stand-in for Kyverno's image verification library with its semantics
(kyverno/kyverno v1.19.0, pkg/cel/libs/imageverify/impl.go and
pkg/image/verification/evaluator/policy.go), over exactly what the policies imagekit writes use:

- ``images``: per container kind, the pod's image references that ``matchImageReferences`` matched
  (a glob in gobwas' syntax, where ``*`` is any run of characters), always a list;
- ``attestations``: each attestation's name to itself, ``attestors``: each attestor by name;
- ``verifyAttestationSignatures(image, attestation, [attestor])``: how many of the attestors verify
  an in-toto attestation of the attestation's type attached to the image (0 for an image the
  policy does not match); here a DSSE envelope that ``attest.open_envelope`` opens with the
  attestor's key and whose Statement is of that type and about that digest;
- ``extractPayload(image, attestation)``: that verified Statement; an error for one not verified
  ("cannot be fetched before verifying").

An evaluation error denies the pod (the policy's ``failurePolicy: Fail``), as a false does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from imagekit.attest import statements as attest


def glob_matches(glob: str, image: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in glob.split("*")), image) is not None


@dataclass
class Registry:
    """The attestations attached to each digest: image reference -> DSSE envelopes."""

    attached: dict[str, list[bytes]] = field(default_factory=dict)


@dataclass
class Evaluation:
    policy: Mapping[str, Any]
    registry: Registry
    verified: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def spec(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.policy["spec"]
        return spec

    def matches(self, image: str) -> bool:
        return any(glob_matches(m["glob"], image) for m in self.spec["matchImageReferences"])

    def _key(self, attestor: Mapping[str, Any]) -> attest.PublicKey:
        key = load_pem_public_key(attestor["cosign"]["key"]["data"].encode())
        return attest.PublicKey(key, attest.key_id(key), attestor["name"])

    def verify(self, image: Any, name: Any, attestors: Any) -> celtypes.IntType:
        image, name = str(image), str(name)
        if not self.matches(image):
            return celtypes.IntType(0)
        (kind,) = [a["intoto"]["type"] for a in self.spec["attestations"] if a["name"] == name]
        digest = image.rsplit("@", 1)[-1].removeprefix("sha256:")
        count = 0
        for attestor in attestors:
            key = self._key(_native(attestor))
            for envelope in self.registry.attached.get(image, []):
                try:
                    statement = attest.open_envelope(envelope, key)
                except attest.AttestationError:
                    continue
                subjects = [s["digest"].get("sha256") for s in statement.get("subject", [])]
                if statement.get("predicateType") == kind and digest in subjects:
                    self.verified[(image, name)] = statement
                    count += 1
                    break
        return celtypes.IntType(count)

    def payload(self, image: Any, name: Any) -> Any:
        statement = self.verified.get((str(image), str(name)))
        if statement is None:
            return celpy.CELEvalError("failed to get payload: cannot be fetched before verifying")
        return celpy.json_to_cel(statement)


def _native(value: Any) -> Any:
    """A CEL value (a map from the ``attestors`` variable) as plain Python."""
    if isinstance(value, celtypes.MapType):
        return {str(k): _native(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [_native(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value


def compile_validations(policy: Mapping[str, Any]) -> list[Any]:
    """Each validation's expression parsed by cel-python (a syntax error fails here)."""
    env = celpy.Environment()
    return [env.compile(v["expression"]) for v in policy["spec"]["validations"]]


def admitted(policy: Mapping[str, Any], registry: Registry, pod_images: Mapping[str, Sequence[str]]) -> bool:
    """Whether Kyverno admits a pod with ``pod_images`` (container kind -> references, pinned by
    digest as ``mutateDigest`` leaves them) under ``policy``: every validation evaluates to true."""
    evaluation = Evaluation(policy, registry)
    spec = policy["spec"]
    images = {kind: [i for i in refs if evaluation.matches(i)] for kind, refs in pod_images.items()}
    activation = {
        "images": celpy.json_to_cel(images),
        "attestations": celpy.json_to_cel({a["name"]: a["name"] for a in spec["attestations"]}),
        "attestors": celpy.json_to_cel({a["name"]: a for a in spec["attestors"]}),
    }
    functions = {"verifyAttestationSignatures": evaluation.verify, "extractPayload": evaluation.payload}
    env = celpy.Environment()
    for ast in compile_validations(policy):
        try:
            result = env.program(ast, functions=functions).evaluate(activation)
        except celpy.CELEvalError:
            return False  # failurePolicy: Fail
        if not (isinstance(result, celtypes.BoolType) and bool(result)):
            return False
    return True
