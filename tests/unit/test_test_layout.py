"""The tests mirror the code: a module of behaviour, imagekit/<package>/<module>.py, has its tests in
tests/unit/<package>/test_<module>.py (or, for the slow tier, tests/slow/<package>/test_<module>.py),
so that whoever changes a module finds its tests by its name, and a test file says by its name which
module it exercises.

A module of behaviour is a module of a package (a directory of imagekit/ with an ``__init__.py``)
that defines a function or a method. Left out, as holding nothing to run of their own:
- a package's ``__init__.py`` and ``__main__.py``;
- pure declarations, a module with no ``def`` (constants and enums: ``core/limits.py``,
  ``export/formats.py``, ``probe/protocol.py``), exercised through the modules that use them;
- imagekit/data and imagekit/frontends, files shipped into images rather than packages (the
  layer order, tests/unit/test_layers.py, places them so too).

A test file in tests/unit/<package>/ or tests/slow/<package>/ is named after a module of that
package: ``test_<module>.py``, or ``test_<module>_<aspect>.py`` where one module's tests are split
by aspect (``test_client_deadlines.py``: the engine client's deadlines). A file named after no
module is allowed only from CROSS_CUTTING, each with its reason. Files at the top of tests/unit and
tests/slow are the repository's own checks (this one, the layer order, code limits) and the tests of
scripts/ and bench/: they mirror no package and are not checked here.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "imagekit"
TIERS = (REPO / "tests" / "unit", REPO / "tests" / "slow")
# The share of modules of behaviour that must have a test file of their name (issue 47: 90%).
MIN_SHARE = 0.90
# Test files named after no module, each testing what no one module owns. Keep this short: a file
# that exercises one module belongs in that module's file.
CROSS_CUTTING: dict[str, str] = {
    "unit/k8s/test_cleanup_labels.py": "every object any k8s writer makes carries the label README's "
    "clean-up deletes by",
    "unit/k8s/test_readme_examples.py": "README's Kubernetes examples are what the writers write",
}


def packages(package_dir: Path) -> list[Path]:
    return sorted(p for p in package_dir.iterdir() if (p / "__init__.py").is_file())


def behaviour_modules(package_dir: Path = PACKAGE) -> dict[str, list[str]]:
    """Each package's modules of behaviour (see the module docstring), by name."""
    found: dict[str, list[str]] = {}
    for package in packages(package_dir):
        for path in sorted(package.glob("*.py")):
            if path.stem in {"__init__", "__main__"}:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree)):
                found.setdefault(package.name, []).append(path.stem)
    return found


def files_of(package: str, tiers: Sequence[Path]) -> list[Path]:
    return sorted(f for tier in tiers for f in (tier / package).glob("test_*.py"))


def untested(modules: dict[str, list[str]], tiers: Sequence[Path] = TIERS) -> list[str]:
    """``package/module`` for each module of behaviour with no test file of its name."""
    return [
        f"{package}/{module}"
        for package, names in modules.items()
        for module in names
        if not any(f.stem == f"test_{module}" for f in files_of(package, tiers))
    ]


def named_after_no_module(package_dir: Path = PACKAGE, tiers: Sequence[Path] = TIERS) -> list[str]:
    """Test files (as paths below their tiers' parent) whose name names no module of their package."""
    unmatched = []
    for package in packages(package_dir):
        names = {path.stem for path in package.glob("*.py")}
        for file in files_of(package.name, tiers):
            stem = file.stem.removeprefix("test_")
            if not any(stem == name or stem.startswith(name + "_") for name in names):
                unmatched.append(file.relative_to(file.parent.parent.parent).as_posix())
    return unmatched


def test_modules_of_behaviour_have_a_test_file_of_their_name() -> None:
    modules = behaviour_modules()
    total = sum(len(names) for names in modules.values())
    assert total > 100, f"found only {total} modules of behaviour below {PACKAGE}"
    missing = untested(modules)
    share = 1 - len(missing) / total
    assert share >= MIN_SHARE, (
        f"{share:.1%} of {total} modules have a test file of their name (at least {MIN_SHARE:.0%}); "
        "add tests/unit/<package>/test_<module>.py for: " + ", ".join(missing)
    )


def test_every_test_file_is_named_after_a_module_or_is_cross_cutting() -> None:
    unmatched = named_after_no_module()
    allowed = set(CROSS_CUTTING)
    stray = [name for name in unmatched if name not in allowed]
    assert not stray, (
        "test files named after no module: rename each after the module it exercises (or split it "
        "by module); a test of no one module goes in CROSS_CUTTING with its reason: " + ", ".join(stray)
    )
    stale = sorted(allowed - set(unmatched))
    assert not stale, f"allowed names that are gone or now match a module; remove them: {', '.join(stale)}"


def test_the_checks_find_a_module_without_tests_and_a_file_named_after_none(tmp_path: Path) -> None:
    # The checks above pass on this tree; here they are shown to fail on one that breaks the rule.
    package = tmp_path / "imagekit" / "pkg"
    package.mkdir(parents=True)
    for name, text in {
        "__init__": "def version() -> str: ...\n",  # never counted
        "client": "class Client:\n    def get(self) -> None: ...\n",  # a method: behaviour
        "limits": "BYTES = 1\n",  # a declaration
        "naming": "def tag() -> None: ...\n",
    }.items():
        (package / f"{name}.py").write_text(text)
    (tmp_path / "imagekit" / "data").mkdir()  # no package: nothing of it is counted
    (tmp_path / "imagekit" / "data" / "script.py").write_text("def main() -> None: ...\n")
    tiers = (tmp_path / "tests" / "unit", tmp_path / "tests" / "slow")
    for tier, name in ((0, "test_client_deadlines"), (1, "test_client"), (0, "test_helpers")):
        (tiers[tier] / "pkg").mkdir(parents=True, exist_ok=True)
        (tiers[tier] / "pkg" / f"{name}.py").write_text("")
    modules = behaviour_modules(tmp_path / "imagekit")
    assert modules == {"pkg": ["client", "naming"]}
    assert untested(modules, tiers) == ["pkg/naming"]  # the slow tier's test_client counts
    assert named_after_no_module(tmp_path / "imagekit", tiers) == ["unit/pkg/test_helpers.py"]
