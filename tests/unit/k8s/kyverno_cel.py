"""An ImageValidatingPolicy's admission decision, its CEL evaluated by cel-python against the
attestations imagekit attaches: Kyverno's image verification library with its semantics
(kyverno/kyverno v1.19.0, pkg/cel/libs/imageverify/impl.go and
pkg/image/verification/evaluator/policy.go), over exactly what the policies imagekit writes use:

- ``images``: per container kind, the pod's image references that ``matchImageReferences`` matched
  (a glob in gobwas' syntax, where ``*`` is any run of characters), always a list;
- ``attestations``: each attestation's name to itself, ``attestors``: each attestor by name;
- ``verifyAttestationSignatures(image, attestation, [attestor])``: how many of the attestors'
  ``VerifyAttestationSignature`` return no error (impl.go L214-325; 0 for an image the policy does
  not match), that verifier modelled from its source in ``kyverno_verifier``, as of v1.19.0 or
  with kyverno/kyverno#17217 applied (``with_17217``);
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

from tests.unit.k8s.kyverno_verifier import Refused, StubRegistry, ivpol_verify_attestation_signature


def glob_matches(glob: str, image: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in glob.split("*")), image) is not None


@dataclass
class Evaluation:
    policy: Mapping[str, Any]
    registry: StubRegistry
    with_17217: bool = False
    verified: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def spec(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.policy["spec"]
        return spec

    def matches(self, image: str) -> bool:
        return any(glob_matches(m["glob"], image) for m in self.spec["matchImageReferences"])

    def verify(self, image: Any, name: Any, attestors: Any) -> celtypes.IntType:
        image, name = str(image), str(name)
        if not self.matches(image):
            return celtypes.IntType(0)
        (kind,) = [a["intoto"]["type"] for a in self.spec["attestations"] if a["name"] == name]
        count = 0
        for attestor in attestors:
            try:
                payloads = ivpol_verify_attestation_signature(
                    _native(attestor), kind, self.registry, image, self.with_17217
                )
            except Refused:
                continue
            # AddVerifiedIntotoPayloads keeps one payload per type, the last verified (kyverno/sdk
            # extensions/imagedataloader/loader.go L299-305 at 376d9112e381): extractPayload reads it
            self.verified[(image, name)] = payloads[-1]
            count += 1
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


def admitted(
    policy: Mapping[str, Any],
    registry: StubRegistry,
    pod_images: Mapping[str, Sequence[str]],
    with_17217: bool = False,
) -> bool:
    """Whether Kyverno admits a pod with ``pod_images`` (container kind -> references, pinned by
    digest as ``mutateDigest`` leaves them) under ``policy``: every validation evaluates to true;
    as Kyverno 1.17.0 to 1.19.0 decide, or with kyverno/kyverno#17217 (``with_17217``)."""
    evaluation = Evaluation(policy, registry, with_17217)
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
