"""The project's limits on its own code: no module in imagekit/ over 600 lines, and no function in
imagekit/ or scripts/ over cyclomatic complexity 20 as radon counts it (``radon cc``). An offender
is named with its size, so the message says what to split."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "imagekit"
SCRIPTS = REPO / "scripts"
MAX_LINES = 600
MAX_COMPLEXITY = 20
LINE_ALLOWANCES: dict[str, int] = {}  # module -> its own limit, while it is being split


def modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 50, f"found only {len(found)} modules under {PACKAGE}"
    return found


def shown(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_no_module_is_over_600_lines() -> None:
    over = []
    for path in modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = LINE_ALLOWANCES.get(path.relative_to(PACKAGE).as_posix(), MAX_LINES)
        if lines > limit:
            over.append(f"{shown(path)} ({lines} lines, at most {limit})")
    assert not over, f"modules over {MAX_LINES} lines; split them by concept: " + ", ".join(over)


def functions(code: str) -> Iterator[Any]:
    """Every function, method and closure radon finds in ``code``, each once. radon's blocks are
    the top-level functions, the classes and their methods; closures and the methods of nested
    classes hang below them."""
    from radon.complexity import cc_visit
    from radon.visitors import Class

    def within(block: Any) -> Iterator[Any]:
        if isinstance(block, Class):
            for item in (*block.methods, *block.inner_classes):
                yield from within(item)
        else:
            yield block
            for closure in block.closures:
                yield from within(closure)

    for block in cc_visit(code):
        # A top-level class's methods are blocks of their own: only its nested classes are new.
        for item in block.inner_classes if isinstance(block, Class) else (block,):
            yield from within(item)


def test_no_function_is_over_complexity_20() -> None:
    try:
        import radon  # noqa: F401
    except ImportError:
        pytest.fail("radon is missing: pip install -e '.[dev]' installs it")
    over = []
    for path in [*modules(), *sorted(SCRIPTS.glob("*.py"))]:
        for function in functions(path.read_text(encoding="utf-8")):
            if function.complexity > MAX_COMPLEXITY:
                over.append(f"{shown(path)}:{function.lineno} {function.fullname} ({function.complexity})")
    assert not over, (
        f"functions over cyclomatic complexity {MAX_COMPLEXITY} (radon); extract well-named helpers: "
        + ", ".join(over)
    )
