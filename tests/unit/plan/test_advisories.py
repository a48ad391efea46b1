"""Advisories at plan time: a cell that installs an affected torch (or venv pip/setuptools) at or above
the threshold is refused with the advisory, package, version and fix, unless the matrix waives it with
a reason; milder findings are listed; every bad waiver is one line, exit 2; the shipped matrix plans
with exactly its waivers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from imagekit.facts.advisories import VENV_TOOL_TOLERATED, load_advisories
from imagekit.plan.cells import StackCell, WheelCell
from imagekit.plan.matrix import load_plan
from tests.conftest import CUDA_BASE, REPO, run_cli

OLD = 'axes:\n  torch: ["2.5.1"]\n  cuda: ["12.1"]\n' + CUDA_BASE
CURRENT = 'axes:\n  torch: ["2.7.1"]\n  cuda: ["12.6"]\n' + CUDA_BASE  # CVE-2026-24747 (high) only


def _waive(*entries: str, threshold: str | None = None) -> str:
    text = "advisories:\n" + (f"  threshold: {threshold}\n" if threshold else "")
    return text + "  waive:\n" + "".join(f"    - {entry}\n" for entry in entries) if entries else text


def test_an_affected_torch_is_refused_with_the_advisory_package_version_and_fix(
    write_matrix: Callable[[str], Path],
) -> None:
    plan = load_plan(write_matrix(OLD + 'include:\n  - {torch: "2.7.1", cuda: "12.6"}\n'))
    assert [c.torch for c in plan.cells] == ["2.7.1"]
    (refusal,) = plan.refused
    assert refusal.describe().startswith(
        "torch=2.5.1, cuda=12.1: torch 2.5.1 is affected by CVE-2025-32434 (critical), fixed in 2.6.0: "
    )
    assert "waive it for this cell in advisories.waive with a reason" in refusal.reason
    result = run_cli("plan", "--matrix", str(write_matrix(OLD)))  # nothing left to build: exit 2
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert (
        "no buildable cell; first refusal: torch=2.5.1, cuda=12.1: torch 2.5.1 is affected" in result.stderr
    )


def test_a_waiver_admits_the_cells_it_selects_and_they_carry_its_reason(
    write_matrix: Callable[[str], Path],
) -> None:
    text = 'axes:\n  torch: ["2.5.1"]\n  cuda: ["11.8", "12.1"]\n' + CUDA_BASE
    waiver = '{id: CVE-2025-32434, torch: ["2.5"], cuda: ["12.1"], reason: "the last cu121 build"}'
    plan = load_plan(write_matrix(text + _waive(waiver)))
    (cell,) = plan.cells  # the waiver selects CUDA 12.1 only; "2.5" is its latest patch, 2.5.1
    assert cell.cuda == "12.1" and [r.combination["cuda"] for r in plan.refused] == ["11.8"]
    by_id = {f.id: f for f in cell.advisories}
    assert by_id["CVE-2025-32434"].waived == "the last cu121 build"
    assert by_id["CVE-2026-24747"].waived is None  # high: listed, below the threshold
    assert {f.id for f in cell.advisories if f.package != "torch"} <= VENV_TOOL_TOLERATED  # the venv tools
    summary = cell.summary()["advisories"]
    assert {"id": "CVE-2025-32434", "waived": "the last cu121 build"}.items() <= summary[0].items()
    shown = run_cli("plan", "--matrix", str(write_matrix(text + _waive(waiver))))
    assert shown.exit_code == 0
    assert (
        "advisory CVE-2025-32434 (critical): torch 2.5.1, fixed in 2.6.0; waived: the last cu121 build"
        in shown.stdout
    )


def test_findings_below_the_threshold_are_listed_and_at_it_refused(
    write_matrix: Callable[[str], Path],
) -> None:
    (cell,) = load_plan(write_matrix(CURRENT)).cells
    assert [(f.id, f.severity, f.waived) for f in cell.advisories] == [
        ("CVE-2026-24747", "high", None),
        ("CVE-2026-59890", "medium", None),  # the venv's setuptools 81 (VENV_TOOL_TOLERATED)
    ]
    newer = 'include:\n  - {torch: "2.14.1", cuda: "12.6"}\n'
    plan = load_plan(write_matrix(CURRENT + _waive(threshold="high") + newer))
    assert [c.torch for c in plan.cells] == ["2.14.1"]
    assert "torch 2.7.1 is affected by CVE-2026-24747 (high), fixed in 2.10.0" in plan.refused[0].reason


def test_a_stack_is_held_to_its_own_torch(write_matrix: Callable[[str], Path]) -> None:
    stack = "axes:\n  base: [ngc]\nbases:\n  ngc: {stack: ngc-pytorch-23.10}\n"
    refused = run_cli("plan", "--matrix", str(write_matrix(stack)))
    assert refused.exit_code == 2 and "torch 2.1.0a0+32f93b1 is affected by CVE-2025-32434" in refused.stderr
    waived = "{id: CVE-2025-32434, base: [ngc], reason: vendor build}"
    plan = load_plan(write_matrix(stack + _waive(waived, "{id: CVE-2024-48063, reason: no rpc}")))
    (cell,) = plan.cells
    assert isinstance(cell, StackCell)
    # a stack's Python is NVIDIA's: its pip and setuptools are not known, so not held against anything
    assert {f.package for f in cell.advisories} == {"torch"}
    assert {f.id: f.waived for f in cell.advisories if f.waived} == {
        "CVE-2025-32434": "vendor build",
        "CVE-2024-48063": "no rpc",
    }


def test_a_front_end_carries_its_cells_findings(write_matrix: Callable[[str], Path]) -> None:
    text = 'axes:\n  torch: ["2.5.1"]\n  cuda: ["12.1"]\n  frontend: [none, jupyter]\n' + CUDA_BASE
    parent, jupyter = load_plan(write_matrix(text + _waive("{id: CVE-2025-32434, reason: r}"))).cells
    assert jupyter.advisories == parent.advisories and parent.advisories


def test_a_waiver_that_selects_no_cell_is_a_warning(write_matrix: Callable[[str], Path]) -> None:
    stale = "{id: CVE-2025-32434, cuda: ['11.8'], reason: the 11.8 rows}"
    plan = load_plan(write_matrix(CURRENT + _waive(stale)))
    assert len(plan.cells) == 1
    assert any(
        "advisories.waive[0].id: the waiver of CVE-2025-32434 selects no cell it affects" in w
        for w in plan.warnings
    ), plan.warnings


BAD: dict[str, tuple[str, str]] = {
    "a waiver without a reason": (
        _waive("{id: CVE-2025-32434}"),
        "advisories.waive[0].reason: is required",
    ),
    "an empty reason": (
        _waive("{id: CVE-2025-32434, reason: '  '}"),
        "advisories.waive[0].reason: is empty; say why the cells are built anyway",
    ),
    "a reason of two lines": (
        _waive('{id: CVE-2025-32434, reason: "a\\nb"}'),
        "advisories.waive[0].reason: must be one line of printable text",
    ),
    "an unknown ID": (
        _waive("{id: CVE-2020-12345, reason: r}"),
        "advisories.waive[0].id: CVE-2020-12345 is not an advisory in imagekit/data/advisories.yaml;"
        " they are CVE-2025-32434,",
    ),
    "an alias instead of the ID": (
        _waive("{id: GHSA-53q9-r3pm-6pq6, reason: r}"),
        "GHSA-53q9-r3pm-6pq6 is not an advisory in imagekit/data/advisories.yaml; it is an alias of"
        " CVE-2025-32434: write that",
    ),
    "not an advisory ID": (_waive("{id: CVE-1-rm, reason: r}"), "'CVE-1-rm' is not an advisory ID"),
    "a hostile ID": (
        _waive("{id: 'CVE-1; rm -rf /', reason: r}"),
        "advisories.waive[0].id: 'CVE-1; rm -rf /'",
    ),
    "a torch the advisory does not affect": (
        _waive("{id: CVE-2025-32434, torch: ['2.5.1', '2.7.1'], reason: r}"),
        "advisories.waive[0].torch: torch 2.7.1 is not affected by CVE-2025-32434 (affected: <2.6.0),"
        " so there is nothing to waive; remove it",
    ),
    "a venv tool the venvs do not hold": (
        _waive("{id: CVE-2025-8869, reason: r}"),
        "advisories.waive[0].id: CVE-2025-8869 affects pip <25.3, and every venv holds pip",
    ),
    "an unknown threshold": (
        "advisories: {threshold: moderate}\n",
        "advisories.threshold: Input should be 'low', 'medium', 'high' or 'critical'",
    ),
    "an unknown key": (_waive("{id: CVE-2025-32434, reason: r, cells: [x]}"), "advisories.waive[0].cells"),
    "a file outside the matrix's directory": (
        "advisories: {file: ../elsewhere.yaml}\n",
        "advisories.file: '../elsewhere.yaml' must stay inside the matrix directory",
    ),
    "a missing file": ("advisories: {file: mine.yaml}\n", "advisories.file: "),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_advisory_settings_are_one_line_exit_2(case: str, write_matrix: Callable[[str], Path]) -> None:
    extra, message = BAD[case]
    result = run_cli("plan", "--matrix", str(write_matrix(OLD + extra)))
    assert result.exit_code == 2, result
    assert result.stderr.startswith("imagekit: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr, result.stderr


def test_a_matrixs_own_advisories_file_adds_refusals_and_its_errors_name_its_lines(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    entry = {
        "id": "CVE-2026-99999",
        "package": "setuptools",
        "affected": "<=81.0.0",
        "fixed": "81.1.0",
        "severity": "critical",
        "summary": "the site's scanner flags this setuptools",
        "source": "our scanner",
    }
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"advisories": [entry]}), encoding="utf-8")
    both = 'axes:\n  base: [cuda, ngc]\n  torch: ["2.7.1"]\n  cuda: ["12.6"]\n' + CUDA_BASE
    both += "  ngc: {stack: ngc-pytorch-23.10}\nexclude:\n  - {base: ngc, torch: '2.7.1'}\n"
    both += "include:\n  - {base: ngc}\n"
    waivers = _waive(
        "{id: CVE-2025-32434, base: [ngc], reason: r}", "{id: CVE-2024-48063, base: [ngc], reason: r}"
    )
    plan = load_plan(write_matrix(both + waivers + "  file: mine.yaml\n"))
    # every venv holds setuptools 81.0.0: the venv cell is refused, naming the site's advisory
    assert [type(c) for c in plan.cells] == [StackCell]
    reason = " ".join(r.reason for r in plan.refused)
    assert "setuptools 81.0.0 is affected by CVE-2026-99999 (critical), fixed in 81.1.0" in reason
    entry["affected"] = "<81.2.0,>=85"
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"advisories": [entry]}), encoding="utf-8")
    result = run_cli("plan", "--matrix", str(write_matrix(OLD + "advisories: {file: mine.yaml}\n")))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert f"imagekit: error: {tmp_path / 'mine.yaml'}:" in result.stderr
    assert "advisories[0].affected (CVE-2026-99999): '<81.2.0,>=85' is empty" in result.stderr


def test_the_shipped_matrix_plans_with_exactly_its_waivers() -> None:
    plan = load_plan(REPO / "matrix.yaml")
    assert plan.refused == () and len(plan.cells) == 29
    waived = {c.id: {f.id for f in c.advisories if f.waived} for c in plan.cells}
    seed = [f"cuda-ubuntu22.04-torch{t}-cuda{c}-py3.10-devel" for t in ("2.1.2", "2.2.2", "2.3.1", "2.4.1")
            for c in ("11.8", "12.1")]  # fmt: skip
    both = {"CVE-2025-32434", "CVE-2024-48063"}
    expected = dict.fromkeys(seed, both) | {
        "cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-devel": {"CVE-2025-32434"},
        "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-devel": {"CVE-2025-32434"},
        "cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime": {"CVE-2025-32434"},
        "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime": {"CVE-2025-32434"},
        "ngc-23.10-torch2.1.0a0-32f93b1-cuda12.2-py3.10-devel": both,
    }
    assert {cell: ids for cell, ids in waived.items() if ids} == expected
    assert plan.warnings == ()  # every waiver waives something
    reasons = {
        f.waived for c in plan.cells for f in c.advisories if f.id == "CVE-2025-32434" and c.cuda == "12.1"
    }
    assert "torch 2.5.1 is the last CUDA 12.1 build (2.6.0, the fix, has no cu121 wheel);" in " ".join(
        r or "" for r in reasons
    )
    # the fixed CUDA 11.8 build and the Blackwell-on-R570 row: only the high unpickler advisory, listed
    for cell in plan.cells:
        if cell.torch in ("2.7.1", "2.11.0"):
            assert [(f.id, f.waived) for f in cell.advisories] == (
                [("CVE-2026-24747", None)] if cell.torch == "2.7.1" else []
            ) + [("CVE-2026-59890", None)], cell.id
    # every venv holds the pinned pip and setuptools: no finding against them but the tolerated one
    assert all(f.package == "torch" or f.id in VENV_TOOL_TOLERATED for c in plan.cells for f in c.advisories)
    assert any(isinstance(c, WheelCell) for c in plan.cells) and load_advisories().venv_tools
