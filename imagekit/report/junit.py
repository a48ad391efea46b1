"""Verification results as JUnit XML, the format every CI system shows as test results.

One ``<testsuite>`` per image, one ``<testcase>`` per check; a skipped check is ``<skipped>`` with
its reason, a failed one ``<failure>`` with its cause and fix. A run that produced no checks at all
(timeout, no JSON) is one failing test case named ``check-run``, and a ``failed`` verdict with no
failing check (a GPU check absent, no GPU visible) one named ``verdict``: a failed image is never
counted as a pass. Characters XML 1.0 forbids (ANSI escapes, other control characters) are dropped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from imagekit.core.atomic import atomic_write
from imagekit.probe.protocol import FAIL, PASS, SKIP
from imagekit.report.text import cuda_archs
from imagekit.report.verification import CheckRecord, Verification

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# Everything XML 1.0 does not allow: C0 controls but tab, newline and return; surrogates; FFFE/FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("", _ANSI.sub("", text))


def _element(parent: ET.Element, tag: str, **attributes: str) -> ET.Element:
    return ET.SubElement(parent, tag, {k: _clean(v) for k, v in attributes.items()})


def _case(suite: ET.Element, classname: str, check: CheckRecord) -> None:
    case = _element(suite, "testcase", name=check.name, classname=classname, time=f"{check.duration_s:.3f}")
    if check.status == SKIP:
        _element(case, "skipped", message=check.reason or "skipped")
    elif check.status != PASS:
        message = check.cause or check.reason or f"{check.name} failed"
        failure = _element(case, "failure", message=message, type=check.status)
        failure.text = _clean(
            "\n".join(
                f"{key}: {value}"
                for key, value in (
                    ("expected", check.expected),
                    ("actual", check.actual),
                    ("detail", check.detail),
                    ("fix", check.fix),
                )
                if value
            )
        )


def _why(result: Verification) -> str:
    if result.error:
        return result.error
    if result.gpu_requested and result.emulated and result.platform is not None:
        return f"failed: a GPU was requested, but the run was emulated ({result.platform.text})"
    if result.gpu_requested and not result.gpu_visible:
        return "failed: a GPU was requested but none was visible in the container"
    return "failed: the GPU checks (cuda_available, gemm_gpu) did not both pass"


def junit_xml(results: Sequence[Verification]) -> str:
    root = ET.Element("testsuites", name="imagekit verify")
    for result in results:
        checks = result.checks or (
            CheckRecord(name="check-run", status=FAIL, required=True, cause=result.error),
        )
        if result.verdict == "failed" and all(c.status in (PASS, SKIP) for c in checks):
            # failed, yet no check failed: the verdict itself is the failing case
            checks = (*checks, CheckRecord(name="verdict", status=FAIL, required=True, cause=_why(result)))
        failures = sum(1 for c in checks if c.status not in (PASS, SKIP))
        skipped = sum(1 for c in checks if c.status == SKIP)
        suite = _element(
            root,
            "testsuite",
            name=result.target,
            tests=str(len(checks)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
            time=f"{result.duration_s:.3f}",
        )
        properties = ET.SubElement(suite, "properties")
        for name, value in (("image", result.image), ("gpus", result.gpus), ("verdict", result.label)):
            _element(properties, "property", name=name, value=value)
        if result.platform is not None:  # where it ran: the machine, emulated or not
            _element(properties, "property", name="machine", value=result.platform.machine or "?")
            _element(properties, "property", name="emulated", value=str(result.emulated).lower())
        if archs := cuda_archs(result):  # the GPUs the image serves (as the probe read them)
            _element(properties, "property", name="cuda-archs", value=archs)
        for check in checks:
            _case(suite, result.target, check)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: Path, results: Sequence[Verification]) -> None:
    atomic_write(path, junit_xml(results))
