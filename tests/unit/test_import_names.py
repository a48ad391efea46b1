"""No module of imagekit is renamed where it is imported (issue 47 item 4): a module is read under
the name its file has, so ``statements.Subject`` is found by grep where ``attest.Subject`` (an alias
of ``imagekit.attest.statements``) reads as the package. The one alias allowed is where the
importing module's own function already has the name (``cli/bake_import.py``'s command)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "imagekit"


def modules_of(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def renamed_modules(path: Path, modules: set[str]) -> list[str]:
    """``import imagekit.x as y`` and ``from imagekit import x as y`` (x a module) in ``path``, as
    ``line: module as alias``, unless ``path`` defines a function of x's own name at its top."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs = [(a.name, a) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            pairs = [(f"{node.module}.{a.name}", a) for a in node.names]
        else:
            continue
        for dotted, alias in pairs:
            short = dotted.rsplit(".", 1)[-1]
            if dotted in modules and alias.asname not in (None, short) and short not in own:
                found.append(f"{node.lineno}: {dotted} as {alias.asname}")
    return found


def test_no_module_is_renamed_where_it_is_imported() -> None:
    modules = modules_of(PACKAGE)
    renamed = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in renamed_modules(path, modules)
    ]
    assert not renamed, "import the module under its own name: " + "; ".join(renamed)


def test_an_alias_of_a_module_is_found_and_one_for_a_name_a_function_holds_is_not(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text("from imagekit.publish import policy as admission\nimport imagekit.report.text as t\n")
    modules = {"imagekit.publish.policy", "imagekit.report.text", "imagekit.export.bake_import"}
    assert renamed_modules(source, modules) == [
        "1: imagekit.publish.policy as admission",
        "2: imagekit.report.text as t",
    ]
    source.write_text(
        "from imagekit.export import bake_import as importer\nfrom imagekit.core.text import shown as s\n"
        "def bake_import() -> None: ...\n"
    )
    assert renamed_modules(source, modules) == []
