"""The stage packages import only downwards, in one order (README, Architecture): a module may import
its own package and the layers below it, never a sibling of its layer nor one above. Every import
counts, a function's and a type checker's too: a layer that leaks fails here, not in review.
Kubernetes manifests are written without docker-py, so a Job writer needs no engine client."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "imagekit"
LAYERS = (
    ("probe", "data", "frontends"),  # the in-image package and the files shipped with it
    ("core",),
    ("facts", "engine", "registry"),
    ("plan",),
    ("render", "report"),
    # refresh: the tools that rewrite data/'s tables from the registries (a matrix's cells, their pip
    # arguments): above plan and render, needed by no stage
    ("builds", "verify", "export", "refresh"),
    ("attest",),
    ("publish",),
    ("k8s",),
    ("cli",),
)
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}
TOP = {"__init__", "__main__", "__version__"}  # the package itself: its version, `python -m imagekit`


def imported(path: Path) -> set[str]:
    """Every ``imagekit.…`` module or name ``path`` imports, as a dotted name below imagekit."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.removeprefix("imagekit.") for a in node.names if a.name.startswith("imagekit.")}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "imagekit":
                names |= {a.name for a in node.names}
            elif node.module.startswith("imagekit."):
                below = node.module.removeprefix("imagekit.")
                names |= {below} | {f"{below}.{a.name}" for a in node.names}
    return names


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_is_in_a_stage_package_and_imports_only_downwards() -> None:
    wrong = []
    for name, path in modules().items():
        package = name.split(".")[0]
        if package in TOP:
            continue
        if package not in RANK:
            wrong.append(f"{name}: not in a package of LAYERS (a flat module, or a new package to place)")
            continue
        for target in sorted(imported(path)):
            other = target.split(".")[0]
            if other != package and other not in TOP and RANK.get(other, len(LAYERS)) >= RANK[package]:
                wrong.append(f"{name} imports imagekit.{target} ({other} is not below {package})")
    assert not wrong, "imports against the layer order: " + "; ".join(wrong)


def loaded(path: Path) -> set[str]:
    """What importing ``path`` imports: its module-level imports (a function's runs when called, a
    type checker's never)."""
    found: set[str] = set()
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        elif isinstance(node, ast.Try):
            todo += [*node.body, *node.orelse, *node.finalbody]
    return found


def test_kubernetes_manifests_are_written_without_docker_py() -> None:
    """Importing any k8s module, and whatever it imports of imagekit, loads no docker-py."""
    known = modules()
    graph = {name: {t for t in imported(path) if t in known} for name, path in known.items()}
    seen: set[str] = set()
    todo = [name for name in known if name.startswith("k8s.")]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    for name in sorted(seen):
        docker = {f for f in loaded(known[name]) if f.split(".")[0] == "docker"}
        assert not docker, f"imagekit.{name} imports docker-py ({', '.join(sorted(docker))})"


def readme_tree() -> dict[str, str]:
    """The README's Architecture tree: each package's entry, continuation lines joined."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("```\nimagekit/\n", 1)[1].split("```", 1)[0]
    entries: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        head = re.match(r"  (\w+)/\s+(.*)", line)
        if head:
            current = head.group(1)
            entries[current] = head.group(2)
        elif current:
            entries[current] += " " + line.strip()
    return entries


def test_the_readme_tree_names_every_package_in_layer_order_and_every_module() -> None:
    # The README's Architecture is how a newcomer finds a module: one it does not name is one
    # nobody finds (24 were missing before this check).
    entries = readme_tree()
    shipped_files = LAYERS[0][1:]  # data/ and frontends/: named in the probe's entry, no modules
    packages = [
        p.name
        for p in sorted(PACKAGE.iterdir())
        if (p / "__init__.py").is_file() and p.name not in shipped_files
    ]
    assert sorted(entries) == sorted(packages)
    assert sorted(entries, key=lambda name: RANK[name]) == list(entries), "list packages in layer order"
    missing = [
        f"{package}/{module.stem}"
        for package in packages
        for module in sorted((PACKAGE / package).glob("*.py"))
        if module.stem not in {"__init__", "__main__"}
        and module.stem not in re.findall(r"\w+", entries[package])
    ]
    assert not missing, f"the README's Architecture tree does not name: {', '.join(missing)}"


def test_every_name_bench_and_scripts_import_from_imagekit_is_there() -> None:
    # bench/ and scripts/ are run by hand, and no test imports most of them: a name a merge moved
    # (REPRODUCIBLE_EPOCH left imagekit.engine.buildx) broke two benchmarks with nothing failing.
    # A bench's imports of another bench and of testbed are checked the same way.
    import importlib

    missing = []
    for path in sorted([*(REPO / "bench").glob("*.py"), *(REPO / "scripts").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in {"imagekit", "bench", "testbed"}
            ):
                module = importlib.import_module(node.module)
                missing += [
                    f"{path.relative_to(REPO)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if not hasattr(module, alias.name)
                    and importlib.util.find_spec(f"{node.module}.{alias.name}") is None
                ]
    assert not missing, f"imported but not there: {', '.join(missing)}"


# Who may import whom outside imagekit/: tests and bench both stand on testbed (the registry, the
# private engines, the sample projects), and never import each other; testbed imports neither. bench
# once imported tests' conftest and a test module, and a test imported a bench: a change to either
# then broke the other.
REFUSED_IMPORTS = {"tests": {"bench"}, "bench": {"tests"}, "testbed": {"tests", "bench"}}


def top_level_imports(path: Path) -> set[str]:
    """The top-level package of every import in ``path``, a function's too (relative imports have none)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_tests_and_bench_import_testbed_never_each_other_and_testbed_neither() -> None:
    wrong = [
        f"{path.relative_to(REPO)} imports {name}"
        for top, refused in REFUSED_IMPORTS.items()
        for path in sorted((REPO / top).rglob("*.py"))
        for name in sorted(top_level_imports(path) & refused)
    ]
    assert not wrong, "imports across tests/, bench/ and testbed/: " + "; ".join(wrong)


def test_bench_and_testbed_are_packages_and_nothing_edits_the_import_path() -> None:
    # Every bench runs as `python -m bench.<name>` from the repository root, so bench, testbed and
    # imagekit import as packages: a module that puts a folder on sys.path itself makes a second
    # copy of a module importable under another name (bench/plan_render.py was once both
    # `plan_render` and `bench.plan_render`). Programs a test writes out for another interpreter
    # (a probe run from its zipapp, a stand-in buildx) are text, not this tree's code.
    assert (REPO / "bench" / "__init__.py").is_file() and (REPO / "testbed" / "__init__.py").is_file()
    edits = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for top in REFUSED_IMPORTS
        for path in sorted((REPO / top).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "path"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "sys"
        and node.attr in {"insert", "append", "extend"}
    ]
    assert not edits, f"sys.path edited (run the module with python -m instead): {', '.join(edits)}"


def test_the_wheel_ships_imagekit_alone() -> None:
    # testbed/ (a second dockerd, a registry, stand-in projects) and bench/ are the tree's, never a user's.
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["imagekit"]
