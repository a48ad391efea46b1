"""The protocol between the host and the probe (imagekit/probe/protocol.py): the one place its words
are spelled. A status, an option or an environment variable written out again elsewhere is a copy
that can drift (nine of its constants were unused while the probe spelled the same strings)."""

from __future__ import annotations

import ast
from pathlib import Path

from imagekit.probe import protocol
from imagekit.probe.results import CheckResult, failed, passed, skipped, summarize
from tests.conftest import REPO

PACKAGE = REPO / "imagekit"
PROTOCOL = PACKAGE / "probe" / "protocol.py"


def constants(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``path``'s code (docstrings are whole sentences and
    never equal a protocol word)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def spelled_again(words: set[str], root: Path) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in sorted(root.rglob("*.py"))
        if path != PROTOCOL
        for line, value in constants(path)
        if value in words
    ]


def test_the_statuses_are_spelled_only_in_the_protocol() -> None:
    """The probe writes them and the host (report, verify, lock) reads them: all through protocol."""
    assert set(protocol.STATUSES) == {"pass", "fail", "skip"}
    assert not spelled_again(set(protocol.STATUSES), PACKAGE)


def test_the_probe_spells_its_options_and_variables_only_through_the_protocol() -> None:
    words = {
        value
        for name, value in vars(protocol).items()
        if name.endswith(("_OPTION", "_ENV")) and isinstance(value, str)
    }
    words |= {*protocol.EXPECT_OPTIONS.values(), *protocol.EXPECT_ENV.values()}
    words |= set(protocol.FRONTEND_EXPECT_OPTIONS.values())
    assert {"--only", "IMAGEKIT_CHECK_SKIP", "--collective-worker", "--result-file"} <= words
    assert not spelled_again(words, PACKAGE / "probe")


def test_a_summary_counts_by_the_statuses_in_the_protocol_order() -> None:
    checks = [passed("a", 1, 1), failed("b", "cause", "fix"), skipped("c", "why"), passed("d", 1, 1)]
    summary = summarize(checks)
    assert tuple(summary) == protocol.SUMMARY_FIELDS
    assert [summary[s] for s in protocol.STATUSES] == [2, 1, 1]
    assert summary["required_failed"] == ["b"] and summary["ok"] is False
    assert tuple(vars(CheckResult("x", protocol.PASS))) == protocol.RESULT_FIELDS
