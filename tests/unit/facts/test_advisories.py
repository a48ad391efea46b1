"""imagekit/data/advisories.yaml as records: the shipped file is valid and says what its sources say,
and every malformed entry is refused naming the entry (a bug in the shipped file, one InputError
line in a matrix's own file)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from imagekit.core.errors import InputError
from imagekit.facts.advisories import (
    AdvisoryDataError,
    load_advisories,
    parse_advisories,
    parse_range,
    read_advisory_file,
)
from imagekit.facts.compat import load_compat, read_data

SHIPPED: dict[str, Any] = read_data("advisories.yaml")


def test_the_shipped_file_is_valid_and_names_what_every_venv_holds() -> None:
    advisories = load_advisories()
    assert {a.package for a in advisories.entries} == {"torch", "pip", "setuptools"}
    assert all(a.source.strip() and a.summary for a in advisories.entries)
    assert advisories.venv_requirements() == (
        f"pip=={advisories.venv_tools['pip']}",
        f"setuptools=={advisories.venv_tools['setuptools']}",
    )
    # every venv's tools are fixed for every advisory above medium the file lists; the medium one
    # setuptools 81 keeps (82 removed the pkg_resources older torch imports) is each cell's finding
    found = advisories.affecting(advisories.venv_tools)
    assert [(a.id, a.severity) for a, _ in found] == [("CVE-2026-59890", "medium")]


def test_the_shipped_facts_are_the_advisories_own() -> None:
    advisories = load_advisories()
    weights_only = advisories.get("CVE-2025-32434")
    assert weights_only is not None and weights_only.severity == "critical" and weights_only.fixed == "2.6.0"
    assert weights_only.affects("2.5.1") and not weights_only.affects("2.6.0")
    # NGC 23.10's own build (a pre-release with a local part) is affected too
    assert weights_only.affects(load_compat().stacks["ngc-pytorch-23.10"].torch)
    unpickler = advisories.get("CVE-2026-24747")
    assert unpickler is not None and unpickler.severity == "high"
    assert unpickler.affects("2.9.1") and not unpickler.affects("2.10.0")
    assert advisories.by_alias("GHSA-53q9-r3pm-6pq6") is weights_only
    # what Ubuntu 22.04's ensurepip leaves in a venv is affected: why every venv is upgraded
    found = {a.id for a, _ in advisories.affecting({"pip": "22.0.2", "setuptools": "59.6.0"})}
    assert {"CVE-2023-5752", "CVE-2025-8869", "CVE-2022-40897", "CVE-2024-6345", "CVE-2025-47273"} <= found


@pytest.mark.parametrize(
    ("text", "lower", "upper"),
    [("<2.6.0", None, "2.6.0"), (">=2.0, <=2.5.1", "2.0", "2.5.1"), ("<2.5.1,>2.5.0", "2.5.0", "2.5.1")],
)
def test_a_range_is_a_lower_and_an_upper_bound(text: str, lower: str | None, upper: str) -> None:
    found = parse_range(text)
    assert found.upper == Version(upper) and found.lower == (Version(lower) if lower else None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "must be a range"),
        (">=2.6.0", "has no upper bound"),
        ("<2.6.0,<2.7.0", "two upper bounds"),
        ("==2.5.1", "is not a bound"),
        ("<2.*", "not a PEP 440 specifier set"),
        (">=2.6.0,<2.1.0", "is empty"),
        (">2.5.0,<2.5.0", "is empty"),
        ("<2.6 or so", "not a PEP 440 specifier set"),
    ],
)
def test_an_empty_inverted_or_open_range_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_range(text)


def _changed(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    raw = copy.deepcopy(SHIPPED)
    change(raw)
    return raw


def _entry(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        raw["advisories"][0][key] = value

    return change


FIRST = SHIPPED["advisories"][0]["id"]
BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "inverted range": (_entry("affected", ">=2.6.0,<2.0"), f"advisories[0].affected ({FIRST}): "),
    "empty range": (_entry("affected", ""), f"advisories[0].affected ({FIRST}): must be a range"),
    "fixed inside the range": (
        _entry("fixed", "2.5.1"),
        f"advisories[0].fixed ({FIRST}): 2.5.1 is inside the affected range <2.6.0",
    ),
    "fixed below the range": (
        lambda raw: raw["advisories"][0].update(affected=">=2.0,<2.6.0", fixed="1.13.1"),
        "1.13.1 is older than the affected range",
    ),
    "fixed not a version": (_entry("fixed", 2.6), "is not a PEP 440 version; write it quoted"),
    "unknown severity": (_entry("severity", "moderate"), "'moderate' is not one of low, medium, high"),
    "unknown package": (_entry("package", "pytorch"), "'pytorch' is not one of torch, pip, setuptools"),
    "no summary": (_entry("summary", " "), "set a one-line summary"),
    "two-line summary": (_entry("summary", "a\nb"), "one printable line"),
    "no source": (_entry("source", ""), "set a source note"),
    "unknown key": (_entry("cvss", 9.3), "advisories[0].cvss: unknown key"),
    "bad ID": (_entry("id", "CVE-25-1"), "is not an advisory ID"),
    "duplicate ID": (
        lambda raw: raw["advisories"].append(copy.deepcopy(raw["advisories"][0])),
        f"{FIRST} is listed twice (also {FIRST})",
    ),
    "an alias another entry's ID": (
        lambda raw: raw["advisories"][1]["aliases"].append(FIRST),
        f"{FIRST} is listed twice",
    ),
    "venv tool affected": (
        lambda raw: raw["venv_tools"].update(pip="22.0.2"),
        "venv_tools.pip: pip 22.0.2 is affected by",
    ),
    "venv tool missing": (lambda raw: raw["venv_tools"].pop("setuptools"), "venv_tools.setuptools: "),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_shipped_file_is_refused_naming_the_entry(case: str) -> None:
    change, message = BROKEN[case]
    with pytest.raises(AdvisoryDataError) as caught:
        parse_advisories(_changed(change), shipped=True)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_matrixs_own_file_is_one_input_error_line_naming_file_line_and_entry(tmp_path: Path) -> None:
    known = load_advisories()
    mine = {
        "advisories": [
            {
                "id": "CVE-2026-99999",
                "package": "torch",
                "affected": ">=2.14.0,<2.14.2",
                "fixed": "2.14.2",
                "severity": "high",
                "summary": "a site's own finding",
                "source": "our scanner, 2026-12-07",
            }
        ]
    }
    path = tmp_path / "advisories.yaml"
    path.write_text(yaml.safe_dump(mine), encoding="utf-8")
    added = read_advisory_file(path, "matrix.yaml:3:3: advisories.file", known)
    assert [a.id for a in added.entries] == ["CVE-2026-99999"] and added.venv_tools == known.venv_tools
    mine["advisories"][0]["fixed"] = "2.14.1"
    path.write_text(yaml.safe_dump(mine), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_advisory_file(path, "matrix.yaml:3:3: advisories.file", known)
    assert caught.value.message.startswith(f"{path}:")  # its line and column
    assert "advisories[0].fixed (CVE-2026-99999): 2.14.1 is inside the affected range" in caught.value.message
    # an ID imagekit's own file lists, or its own venv_tools, are not a matrix's to change
    mine["advisories"][0].update(fixed="2.14.2", id="CVE-2025-32434")
    path.write_text(yaml.safe_dump(mine), encoding="utf-8")
    with pytest.raises(InputError, match="listed twice \\(also imagekit's own CVE-2025-32434\\)"):
        read_advisory_file(path, "m", known)
    path.write_text(yaml.safe_dump({"venv_tools": {"pip": "1.0"}, "advisories": []}), encoding="utf-8")
    with pytest.raises(InputError, match="venv_tools: unknown key; this file has advisories, source"):
        read_advisory_file(path, "m", known)
    with pytest.raises(InputError, match=r"m: .*nothing-here\.yaml: no such file"):
        read_advisory_file(tmp_path / "nothing-here.yaml", "m", known)
