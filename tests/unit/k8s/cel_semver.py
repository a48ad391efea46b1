"""Kubernetes' CEL semver library for cel-python, a test shim; and a device as a selector sees it.

cel-python evaluates CEL but has no Kubernetes library. The DRA selectors imagekit writes use
Kubernetes' semver functions, as k8s.io/apiserver/pkg/cel/library/semverlib.go defines them
(kubernetes/kubernetes, read at 2293553202fa21e3918086dc66cb4154ac7caac9); this shim has their
semantics, for what the selectors use:

- ``semver(s)``: blang/semver/v4's ``Parse``: exactly MAJOR.MINOR.PATCH, no leading zero in a
  number, an optional ``-prerelease`` and ``+build``; anything else is an error (so a selector
  written with ``semver('450.80.02')`` or ``semver('9.0')`` fails here as in a cluster). The
  two-argument, normalizing ``semver(s, true)`` is left out: imagekit never writes it.
- ``a.compareTo(b)`` (-1, 0, 1), ``a.isLessThan(b)``, ``a.isGreaterThan(b)``: semver 2.0.0
  precedence: the numbers in order; a pre-release below its release; pre-release identifiers
  compared numerically when both are numbers, a number below a word, words in ASCII order, a
  shorter list below a longer one it begins; build metadata ignored.
- ``major()``, ``minor()``, ``patch()``: the numbers.

:func:`device_activation` turns a ResourceSlice device into the ``device`` variable a selector
reads: ``device.driver``, ``device.attributes[domain][name]`` (a bare attribute name belongs to
the driver's domain; ``resource.kubernetes.io/pciBusID`` to its own) with each value of its type
(string, int, bool, version as a semver).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import celpy
from celpy import celtypes

_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


class Semver(celtypes.StringType):
    """A parsed version; its text is the version as written."""

    numbers: tuple[int, int, int]
    pre: tuple[str, ...]

    def __new__(cls, text: str) -> Semver:
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"semver: {text!r} is not a semantic version")
        value = super().__new__(cls, text)
        value.numbers = (int(match[1]), int(match[2]), int(match[3]))
        value.pre = tuple(match[4].split(".")) if match[4] else ()
        return value


def _identifier_key(identifier: str) -> tuple[int, int, str]:
    return (0, int(identifier), "") if identifier.isdigit() else (1, 0, identifier)


def compare(a: Semver, b: Semver) -> int:
    if a.numbers != b.numbers:
        return -1 if a.numbers < b.numbers else 1
    if a.pre == b.pre:
        return 0
    if not a.pre or not b.pre:  # a release is above its pre-releases
        return 1 if not a.pre else -1
    left, right = [_identifier_key(i) for i in a.pre], [_identifier_key(i) for i in b.pre]
    return -1 if left < right else 1


def _semvers(a: Any, b: Any) -> tuple[Semver, Semver]:
    if not isinstance(a, Semver) or not isinstance(b, Semver):
        raise TypeError(f"no such overload: {type(a).__name__}, {type(b).__name__}")
    return a, b


def _semver(text: Any) -> Semver:
    if not isinstance(text, str):
        raise TypeError("no such overload: semver takes a string")
    return Semver(str(text))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "semver": _semver,
    "compareTo": lambda a, b: celtypes.IntType(compare(*_semvers(a, b))),
    "isLessThan": lambda a, b: celtypes.BoolType(compare(*_semvers(a, b)) < 0),
    "isGreaterThan": lambda a, b: celtypes.BoolType(compare(*_semvers(a, b)) > 0),
    "major": lambda a: celtypes.IntType(_semvers(a, a)[0].numbers[0]),
    "minor": lambda a: celtypes.IntType(_semvers(a, a)[0].numbers[1]),
    "patch": lambda a: celtypes.IntType(_semvers(a, a)[0].numbers[2]),
}


def _value(attribute: dict[str, Any]) -> Any:
    ((kind, value),) = attribute.items()
    return {
        "string": celtypes.StringType,
        "int": celtypes.IntType,
        "bool": celtypes.BoolType,
        "version": Semver,
    }[kind](value)


def device_activation(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in device.get("attributes", {}).items():
        domain, _, bare = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[bare] = _value(attribute)
    cel_attributes = celtypes.MapType(
        {celtypes.StringType(d): celtypes.MapType({celtypes.StringType(k): v for k, v in a.items()})
         for d, a in attributes.items()}
    )  # fmt: skip
    return {"device": celtypes.MapType({"driver": celtypes.StringType(driver), "attributes": cel_attributes})}


_ENVIRONMENT = celpy.Environment()


def evaluate(expression: str, activation: dict[str, Any]) -> bool:
    """A selector's verdict on a device; an error (a bad literal, a missing attribute) raises."""
    program = _ENVIRONMENT.program(_ENVIRONMENT.compile(expression), functions=FUNCTIONS)
    result = program.evaluate(activation)
    if not isinstance(result, celtypes.BoolType):
        raise AssertionError(f"{expression}: evaluated to {result!r}, not a bool")
    return bool(result)
