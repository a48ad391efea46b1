"""Verification results as JUnit XML, the format every CI system shows as test results.

One ``<testsuite>`` per image, one ``<testcase>`` per check; a skipped check is ``<skipped>`` with
its reason, a failed one ``<failure>`` with its cause and fix. A run that produced no checks at all
(timeout, no JSON) is one failing test case named ``check-run``, so it is never counted as a pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from imagekit.atomic import atomic_write
from imagekit.verify import CheckRecord, Verification


def _case(suite: ET.Element, classname: str, check: CheckRecord) -> None:
    case = ET.SubElement(
        suite, "testcase", name=check.name, classname=classname, time=f"{check.duration_s:.3f}"
    )
    if check.status == "skip":
        ET.SubElement(case, "skipped", message=check.reason or "skipped")
    elif check.status != "pass":
        message = check.cause or check.reason or f"{check.name} failed"
        failure = ET.SubElement(case, "failure", message=message, type=check.status)
        failure.text = "\n".join(
            f"{key}: {value}"
            for key, value in (
                ("expected", check.expected),
                ("actual", check.actual),
                ("detail", check.detail),
                ("fix", check.fix),
            )
            if value
        )


def junit_xml(results: Sequence[Verification]) -> str:
    root = ET.Element("testsuites", name="imagekit verify")
    for result in results:
        checks = result.checks or (
            CheckRecord(name="check-run", status="fail", required=True, cause=result.error),
        )
        failures = sum(1 for c in checks if c.status not in ("pass", "skip"))
        skipped = sum(1 for c in checks if c.status == "skip")
        suite = ET.SubElement(
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
            ET.SubElement(properties, "property", name=name, value=value)
        for check in checks:
            _case(suite, result.target, check)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: Path, results: Sequence[Verification]) -> None:
    atomic_write(path, junit_xml(results))
