"""No import cycle between imagekit's modules, inside a package as between packages.

test_layers keeps the packages in one order; inside a package the modules need one too. A cycle
there was closed by an import moved into a function (or under TYPE_CHECKING), which runs later and
so hides it from Python, not from the reader: two modules that need each other are one concern
split badly, and the piece both use belongs in a module of its own below them. So every import
counts here, at module level, in a function, under TYPE_CHECKING, relative or absolute.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "imagekit"


def module_files(root: Path) -> dict[str, Path]:
    """Dotted name below ``root`` (a package's ``__init__`` named as the package) -> its file."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root``'s package it imports, by any import anywhere in it.

    ``from package import name`` is the submodule where ``name`` is one, else the package's
    ``__init__``; a name that is no module is its nearest enclosing module."""
    known = module_files(root)
    top = root.name
    prefix = f"{top}."
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {
                    a.name.removeprefix(f"{top}.") for a in node.names if a.name.startswith(f"{top}.")
                }
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from its own package, or one up per extra dot
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                    module = ".".join([*base, *([node.module] if node.module else [])])
                elif node.module == top or (node.module or "").startswith(prefix):
                    module = (node.module or "").removeprefix(top).removeprefix(".")
                else:
                    continue
                targets |= {f"{module}.{a.name}".strip(".") for a in node.names}
        edges = set()
        for target in targets:
            nearest = target
            while nearest and nearest not in known:
                nearest = nearest.rpartition(".")[0]
            if nearest and nearest != name:
                edges.add(nearest)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def shown_cycle(graph: dict[str, set[str]], component: frozenset[str]) -> str:
    """One shortest cycle through the component's first module: ``a -> b -> a``."""
    start = min(component)
    came_from: dict[str, str] = {}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for successor in sorted(graph[node] & component):
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return " -> ".join([*reversed(path), start])
            if successor not in came_from:
                came_from[successor] = node
                todo.append(successor)
    raise AssertionError(f"{sorted(component)} is no cycle")


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph(PACKAGE)
    found = cycles(graph)
    shown = sorted(f"{shown_cycle(graph, c)} (all of: {', '.join(sorted(c))})" for c in found)
    assert not shown, "import cycles; move what both modules use into a module below them: " + "; ".join(
        shown
    )


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("from pkg.one.b import thing", "one.b"),
        ("import pkg.one.b", "one.b"),
        ("from pkg.one import b", "one.b"),
        ("from pkg.one import something_of_its_init", "one"),
        ("from .b import thing", "one.b"),
        ("from . import b", "one.b"),
        ("from .. import two", "two"),
        ("def late():\n    from pkg.one.b import thing\n", "one.b"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import thing\n", "one.b"),
    ],
)
def test_every_kind_of_import_is_an_edge_and_closes_a_cycle(tmp_path: Path, source: str, target: str) -> None:
    root = tmp_path / "pkg"
    (root / "one").mkdir(parents=True)
    (root / "two").mkdir()
    (root / "__init__.py").write_text("")
    (root / "one" / "a.py").write_text(source + "\n")
    for imports_a_back in ("one/__init__.py", "one/b.py", "two/__init__.py"):
        (root / imports_a_back).write_text("from pkg.one import a\n")
    graph = import_graph(root)
    assert graph["one.a"] == {target}
    assert cycles(graph) == [frozenset({"one.a", target})]
    shown = shown_cycle(graph, cycles(graph)[0])  # from the first module by name
    assert shown == min(f"one.a -> {target} -> one.a", f"{target} -> one.a -> {target}")
