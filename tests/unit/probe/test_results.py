"""A check's record (imagekit/probe/results.py): an exception inside a check becomes its failure."""

from __future__ import annotations

from imagekit.probe import arguments, context, results
from tests.unit.probe_runs import (
    clean_env,
)


def test_exception_in_a_check_becomes_its_failure() -> None:
    def boom(ctx: context.Context) -> results.CheckResult:
        raise RuntimeError("kaboom")

    ctx = context.Context(arguments.Expect(), clean_env())
    result = results.run_check("boom", boom, ctx)
    assert result.status == "fail"
    assert result.cause is not None and "RuntimeError: kaboom" in result.cause
