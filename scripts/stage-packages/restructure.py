#!/usr/bin/env python3
# ruff: noqa: E501, PLW2901  (a one-off migration tool: its generated text keeps its own line breaks)
"""Issue 34, the tree: move imagekit's flat modules into stage packages, deterministically.

Run from the root of a clean checkout (stdlib Python 3.11; ruff from .venv/bin or PATH):

    python3 scripts/stage-packages/restructure.py            # moves, rewrites, installs tests/unit/test_layers.py
    python3 scripts/stage-packages/restructure.py --dry-run  # only prints the move table and checks the mapping

What it does, in order:
1. checks every flat module ``imagekit/*.py`` is in MODULES (a module a colleague added fails loudly:
   add it to MODULES and rerun on a clean checkout);
2. ``git mv`` every module to ``imagekit/<package>/<name>.py`` and every unit test
   ``tests/unit/test_<module>[_<suffix>].py`` to ``tests/unit/<package>/test_<name>[_<suffix>].py``
   (TEST_OVERRIDES for the tests not named after one module), creating the ``__init__.py`` files;
3. splits ``verify/harness.py``'s invocation (arguments and verdict, free of docker-py) into
   ``verify/invocation.py`` (VERIFY_INVOCATION names, cut by AST, so edited bodies move as they are);
4. rewrites by pattern in every tracked text file (except HISTORY_FILES and the generated
   Dockerfiles/golden files/templates): ``imagekit.<old>`` dotted names (imports, monkeypatch
   targets, ``python -m``), ``from imagekit import <old>`` (keeping the local name with ``as``),
   ``imagekit/<old>.py`` paths, ``tests/unit/test_<x>.py`` paths and ``tests.unit.test_<x>`` names,
   ``Path(__file__)`` depth in moved files, and ``"<old>.py"`` keys in test_code_limits;
5. installs tests/unit/test_layers.py (the import order) and runs ``ruff check --fix --select I``
   (import order of rewritten imports), ``ruff check --fix --select F401`` on the split pair, and
   ``ruff format`` on the Python files it changed.
It commits nothing.

Not applied yet (issue 34): it was checked on main after issue 33 (fast tier green after one long
test line was wrapped by hand; render --check up to date), but the move needs a whole-suite run of
its own. To land it: run it on a clean checkout, wrap what ruff reports, run `scripts/test.sh fast`
and the whole suite, replace the README's Architecture section by architecture.md beside this file,
then delete this folder in the same commit.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

# package -> (what the stage is, {old flat module: new module name})
PACKAGES: dict[str, tuple[str, dict[str, str]]] = {
    "core": (
        "Shared by every stage: errors, bounds, safe values, paths and atomic writes, the clock, "
        "versions, platforms, names and labels, YAML with line:column.",
        {
            "cutoff": "cutoff",  # one deadline over a socket answer: the registry and engine clients both use it
            "errors": "errors",
            "text": "text",
            "limits": "limits",
            "safetypes": "safetypes",
            "paths": "paths",
            "atomic": "atomic",
            "clock": "clock",
            "versions": "versions",
            "platforms": "platforms",
            "naming": "naming",
            "yamlsource": "yamlsource",
        },
    ),
    "facts": (
        "What is true of the world, read from imagekit/data: the compatibility table, the GPU table "
        "and the facts generated into the probe, and where a platform runs natively or emulated.",
        {"compat": "compat", "probe_facts": "probe_facts", "emulation": "emulation"},
    ),
    "engine": (
        "The container engine: docker-py, and the raw socket client for the few calls it makes itself.",
        {"engine": "client", "engine_socket": "raw_socket"},
    ),
    "registry": (
        "The OCI Distribution API, spoken by imagekit itself: the client, its transport (auth, "
        "retries, bounds), manifests and credentials.",
        {
            "registry": "client",
            "registry_transport": "transport",
            "manifest": "manifest",
            "credentials": "credentials",
        },
    ),
    "plan": (
        "Stage 1, plan: matrix.yaml to a Plan of cells (schema, include/exclude, resolution under "
        "the rules, the cell records, ids and tags, which GPUs a cell serves).",
        {
            "schema": "schema",
            "expand": "expand",
            "resolve": "resolve",
            "rules": "rules",
            "cells": "cells",
            "matrix": "matrix",
            "coverage": "coverage",
        },
    ),
    "render": (
        "Stage 2, render: a Plan to Dockerfiles and build contexts (recipes, wheel closures, "
        "templates and their compiled code, drift, the probe zipapp and where it lives in an image).",
        {
            "render": "dockerfile",
            "recipe": "recipe",
            "wheels": "wheels",
            "context": "context",
            "template_code": "template_code",
            "drift": "drift",
            "probe_bundle": "probe_bundle",
            "contract": "contract",
        },
    ),
    "report": (
        "The report every stage after render reads and writes: the store and its state directory, "
        "verification records and figures, the lock file and its provenance, and the report's "
        "text, HTML and JUnit views and merge.",
        {
            "store": "store",
            "state": "state",
            "verification": "verification",
            "figures": "figures",
            "lockfile": "lockfile",
            "provenance": "provenance",
            "report_text": "text",
            "html_report": "html",
            "junit": "junit",
            "merge_reports": "merge",
        },
    ),
    "build": (
        "Stage 3, build: the job graph, the bounded abortable builder, bases, what a build asks of "
        "the registry, live progress and the no-change record.",
        {
            "build": "builder",
            "jobs": "jobs",
            "bases": "bases",
            "build_registry": "registry_use",
            "progress": "progress",
            "unchanged": "no_change",
        },
    ),
    "verify": (
        "Stage 4, verify: the probe's invocation and verdict (free of docker-py), the harness that "
        "runs it in a locked-down container, the GPU request and the schedule of check passes.",
        {"verify": "harness", "verify_schedule": "schedule", "gpus": "gpus"},
    ),
    "export": (
        "Other build systems: CI targets, bake import, the matrix formats, container-structure-test.",
        {"export": "targets", "export_format": "formats", "bake_import": "bake_import", "cst": "cst"},
    ),
    "attest": (
        "Attestations: keys, DSSE and the verification statement, attaching them to a digest, an "
        "image index's own, and the SBOM.",
        {"attest": "statements", "attach": "attach", "attest_index": "index", "sbom": "sbom"},
    ),
    "publish": (
        "Stage 5, publish: promotion by digest into final tags and image indexes, and its policy.",
        {"publish": "promote", "publish_policy": "policy"},
    ),
    "k8s": (
        "Kubernetes: Job manifests, validate-on Jobs per GPU product and their results, admission "
        "policies. Imports no docker-py.",
        {
            "k8s": "manifests",
            "k8s_validate": "validate_on",
            "k8s_results": "results",
            "admission": "admission",
        },
    ),
    "cli": (None, {"pipeline": "pipeline"}),  # build --verify: above both stages, beside its command
}
MODULES: dict[str, str] = {  # old flat module -> new dotted path below imagekit
    old: f"{package}.{new}" for package, (_, table) in PACKAGES.items() for old, new in table.items()
}
STAYS = {"__init__", "__main__"}
# Names that must still import after the move, each with why (the layer test knows them too):
SHIMS = {
    "probe_facts": (
        '"""The name the probe\'s source-tree fallback imports (``imagekit/probe/facts.py``). The probe\'s\n'
        "bytes are in every cell's input digest, so the name stays until the probe changes for another\n"
        'reason; the facts are ``imagekit.facts.probe_facts``\'s."""\n\n'
        "from imagekit.facts.probe_facts import probe_facts\n\n"
        '__all__ = ["probe_facts"]\n'
    ),
}
# The invocation half of verify.py (what a Kubernetes Job runs too): moved by name into its own module.
VERIFY_INVOCATION = (
    "check_arguments",
    "LATE_EXPECTATIONS",
    "_OPTION_OF_VARIABLE",
    "check_invocation",
    "verdict_of",
)
INVOCATION_DOC = '''"""How the in-image check script is invoked and what its answer means, free of docker-py: the
options and environment read from an image's labels, and the verdict read from the script's document.
``imagekit.verify.harness`` runs it in a container; ``imagekit.k8s`` writes it into Job manifests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagekit.core import naming
from imagekit.core.limits import MAX_ITEMS
from imagekit.probe import protocol
from imagekit.report.verification import CheckRecord, Verdict, derive_verdict
from imagekit.verify.gpus import GpuRequest
'''
# Unit tests not named after one module (test_<module>[_<suffix>]): where they go. A test that
# matches nothing here nor a module stays in tests/unit/ (repo-wide tests: limits, start-up, files).
TEST_OVERRIDES = {
    "test_cli": "cli/test_cli",
    "test_cli_app": "cli/test_app",
    "test_attest_referrers": "attest/test_referrers",
    "test_index": "publish/test_index",
    "test_k8s_policy": "k8s/test_policy",
    "test_report_archs": "report/test_archs",
    "test_probe_package": "render/test_probe_package",
    "test_frontend_entrypoint": "frontends/test_entrypoint",
    "test_cuda_archs": "probe/test_cuda_archs",
}
TEST_STAYS = {
    "test_code_limits",
    "test_startup_imports",
    "test_repo_files",
    "test_shipped_matrices",
    "test_refresh_compat",
    "test_layers",
}
PROBE_TEST_PREFIXES = ("test_incontainer_", "test_probe_")  # the in-image package's own tests
TEST_DOCS = {"probe": "the in-image probe package", "frontends": "the front ends' files (imagekit/frontends)"}
# Records of the past (and files others rewrite by hand): left as they were.
HISTORY_FILES = {"CHANGELOG.md", "BENCHMARKS.md"}
# What ships into images (the probe zipapp, the front ends' files, a base's context) and generated
# files: byte for byte as they were, so every input digest stays.
SKIPPED_PREFIXES = (
    "scripts/stage-packages/",  # this tool itself
    "dockerfiles/",
    "tests/golden/",
    "imagekit/data/",
    "imagekit/probe/",
    "imagekit/frontends/",
    "examples/offline/base/",
)
# Lines whose text ships into images: the probe's facts.json carries its "source" notes, so an
# edit there changes the probe zipapp's bytes and with them every cell's input digest (every tag).
PROTECTED_LINES = {"imagekit/facts/probe_facts.py": re.compile(r'"source":')}
LINE_LENGTH = 110  # pyproject's [tool.ruff] line-length
LAYERS_TEST = Path(__file__).with_name("test_layers.py")


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def fail(message: str) -> None:
    sys.exit(f"restructure: {message}\n(a half-done run is undone by: git reset --hard && git clean -fd)")


def test_target(stem: str) -> str | None:
    """tests/unit/<stem>.py -> '<package>/<new stem>' (None: it stays)."""
    if stem in TEST_STAYS:
        return None
    if stem in TEST_OVERRIDES:
        return TEST_OVERRIDES[stem]
    name = stem[len("test_") :]
    for old in sorted(MODULES, key=len, reverse=True):
        if name == old or name.startswith(old + "_"):
            package, new = MODULES[old].split(".")
            return f"{package}/test_{new}{name[len(old) :]}"
    for prefix in PROBE_TEST_PREFIXES:
        if stem.startswith(prefix):
            return f"probe/test_{stem[len(prefix) :]}"
    return None


def plan_moves(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    flat = sorted(p.stem for p in (root / "imagekit").glob("*.py"))
    unknown = [m for m in flat if m not in MODULES and m not in STAYS]
    if unknown:
        fail(f"flat modules not in the mapping: {', '.join(unknown)}; add them to PACKAGES and rerun")
    missing = [m for m in MODULES if m not in flat]
    if missing:
        fail(
            f"modules in the mapping but not in imagekit/: {', '.join(missing)} (renamed or split? fix PACKAGES)"
        )
    modules = {f"imagekit/{old}.py": f"imagekit/{new.replace('.', '/')}.py" for old, new in MODULES.items()}
    tests: dict[str, str] = {}
    for path in sorted((root / "tests/unit").glob("test_*.py")):
        target = test_target(path.stem)
        if target is None:
            if path.stem not in TEST_STAYS:
                print(
                    f"restructure: note: tests/unit/{path.name} matches no module; it stays", file=sys.stderr
                )
            continue
        tests[f"tests/unit/{path.name}"] = f"tests/unit/{target}.py"
    if len(set(tests.values())) != len(tests):
        fail("two tests map to one file: " + str(tests))
    return modules, tests


def init_text(doc: str | None, what: str) -> str:
    if not doc:
        return f'"""Tests of {what}."""\n'
    return "\n".join(textwrap.wrap(f'"""{doc}"""', LINE_LENGTH)) + "\n"


def docstring_lines(source: str) -> set[int]:
    """0-based indexes of the lines inside a multi-line string (its prose may be rewrapped)."""
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                inside |= set(range(token.start[0] - 1, token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return inside


def wrap_long(old: str, new: str) -> str:
    """Lines a longer dotted name pushed over the line length: a comment or a docstring's prose is
    rewrapped at its indent; a string literal alone on its line is cut in two at a space (implicit
    concatenation). Anything else is left for ruff to name."""
    before = set(old.splitlines())
    prose = docstring_lines(new)
    quotes = '"' * 3
    out: list[str] = []
    for index, line in enumerate(new.splitlines(keepends=True)):
        body = line.rstrip("\n")
        if len(body) <= LINE_LENGTH or body in before:
            out.append(line)
            continue
        stripped = body.lstrip()
        indent = body[: len(body) - len(stripped)]
        end = line[len(body) :]
        if stripped.startswith("# "):
            wrapped = textwrap.wrap(stripped[2:], LINE_LENGTH - len(indent) - 2, break_on_hyphens=False)
            out += [f"{indent}# {w}{end}" for w in wrapped]
        elif index in prose and quotes not in stripped:
            wrapped = textwrap.wrap(stripped, LINE_LENGTH - len(indent), break_on_hyphens=False)
            out += [f"{indent}{w}{end}" for w in wrapped]
        elif re.fullmatch(r'"[^"\\]*"', stripped) and " " in stripped[: LINE_LENGTH - len(indent) - 1]:
            cut = stripped.rindex(" ", 0, LINE_LENGTH - len(indent) - 1) + 1
            out += [f'{indent}{stripped[:cut]}"{end}', f'{indent}"{stripped[cut:]}{end}']
        else:
            out.append(line)
    return "".join(out)


def git_mv(root: Path, moves: dict[str, str]) -> None:
    for src, dst in moves.items():
        (root / dst).parent.mkdir(parents=True, exist_ok=True)
        run("git", "-C", str(root), "mv", src, dst)


def make_inits(root: Path, tests: dict[str, str]) -> list[str]:
    made = []
    for package, (doc, _) in PACKAGES.items():
        init = root / "imagekit" / package / "__init__.py"
        if not init.exists():
            init.write_text(init_text(doc, package), encoding="utf-8")
            made.append(init.relative_to(root).as_posix())
    for folder in sorted({Path(dst).parent for dst in tests.values()}):
        init = root / folder / "__init__.py"
        if not init.exists():
            what = TEST_DOCS.get(folder.name, f"imagekit.{folder.name}")
            init.write_text(init_text(None, what), encoding="utf-8")
            made.append(init.relative_to(root).as_posix())
    return made


# -- the verify split --------------------------------------------------------------------------------


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def split_verify(root: Path) -> None:
    harness = root / "imagekit/verify/harness.py"
    source = harness.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    cut: list[tuple[int, int]] = []
    found: set[str] = set()
    for node in tree.body:
        names = _defined(node) & set(VERIFY_INVOCATION)
        if not names:
            continue
        found |= names
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):  # its comment goes with it
            start -= 1
        cut.append((start, node.end_lineno or node.lineno))
    if found != set(VERIFY_INVOCATION):
        fail(
            f"verify.py no longer defines {sorted(set(VERIFY_INVOCATION) - found)}; update VERIFY_INVOCATION"
        )
    moved = "".join("".join(lines[a:b]) + "\n\n" for a, b in cut)
    kept = [line for i, line in enumerate(lines) if not any(a <= i < b for a, b in cut)]
    rest = "".join(kept)
    # A moved body must not need what stays in the harness (that would pull docker-py back in).
    used = {n.id for n in ast.walk(ast.parse(moved)) if isinstance(n, ast.Name)}
    stays = set().union(*(_defined(n) for n in ast.parse(rest).body)) - set(VERIFY_INVOCATION)
    if used & stays:
        fail(f"the verify invocation uses {sorted(used & stays)} of the harness; move them too")
    needed = [n for n in VERIFY_INVOCATION if re.search(rf"\b{n}\b", rest)]
    if needed:
        tree = ast.parse(rest)
        last = max(n.end_lineno or 0 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        kept_lines = rest.splitlines(keepends=True)
        kept_lines.insert(last, f"from imagekit.verify.invocation import {', '.join(needed)}\n")
        rest = "".join(kept_lines)
    harness.write_text(re.sub(r"\n{4,}", "\n\n\n", rest), encoding="utf-8")
    (root / "imagekit/verify/invocation.py").write_text(
        INVOCATION_DOC + "\n\n" + moved.rstrip() + "\n", encoding="utf-8"
    )


# -- rewriting -----------------------------------------------------------------------------------------


def patterns(tests: dict[str, str]) -> list[tuple[re.Pattern[str], object]]:
    olds = "|".join(sorted(MODULES, key=len, reverse=True))
    test_stems = {
        Path(s).stem: Path(d).with_suffix("").as_posix()[len("tests/unit/") :] for s, d in tests.items()
    }
    stems = "|".join(sorted(test_stems, key=len, reverse=True)) or "(?!)"
    invocation = "|".join(VERIFY_INVOCATION)
    return [
        # dotted: imports, monkeypatch targets, python -m, docstrings (not labels: imagekit.verify-run)
        (re.compile(rf"(?<![\w./-])imagekit\.({olds})(?![\w-])"), lambda m: f"imagekit.{MODULES[m[1]]}"),
        (
            re.compile(rf"(?<![\w./-])imagekit/({olds})\.py\b"),
            lambda m: f"imagekit/{MODULES[m[1]].replace('.', '/')}.py",
        ),
        (re.compile(rf"\btests/unit/({stems})\.py\b"), lambda m: f"tests/unit/{test_stems[m[1]]}.py"),
        (
            re.compile(rf"\btests\.unit\.({stems})\b"),
            lambda m: f"tests.unit.{test_stems[m[1]].replace('/', '.')}",
        ),
        (
            re.compile(rf"\bimagekit\.verify\.harness\.({invocation})\b"),
            lambda m: f"imagekit.verify.invocation.{m[1]}",
        ),
    ]


def rewrite_from_imagekit(source: str) -> str:
    """``from imagekit import a, b as c`` (a, b old modules): one statement per new package, each
    keeping the local name; the moved verify names imported from their new module."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[ast.ImportFrom, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        if node.module == "imagekit" and any(a.name in MODULES for a in node.names):
            groups: dict[str, list[str]] = {}
            for a in node.names:
                local = a.asname or a.name
                if a.name in MODULES:
                    package, new = MODULES[a.name].split(".")
                    groups.setdefault(f"imagekit.{package}", []).append(
                        new if new == local else f"{new} as {local}"
                    )
                else:
                    groups.setdefault("imagekit", []).append(
                        a.name if a.asname is None else f"{a.name} as {local}"
                    )
            edits.append((node, "; ".join(f"from {m} import {', '.join(n)}" for m, n in groups.items())))
        elif node.module == "imagekit.verify.harness" and any(
            a.name in VERIFY_INVOCATION for a in node.names
        ):
            spell = [
                (a.name in VERIFY_INVOCATION, a.name if a.asname is None else f"{a.name} as {a.asname}")
                for a in node.names
            ]
            parts = [f"from imagekit.verify.invocation import {', '.join(s for moved, s in spell if moved)}"]
            if any(not moved for moved, _ in spell):
                parts.insert(
                    0,
                    f"from imagekit.verify.harness import {', '.join(s for moved, s in spell if not moved)}",
                )
            edits.append((node, "; ".join(parts)))
    for node, text in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        indent = lines[first][: node.col_offset]
        statement = text.replace("; ", "\n" + indent)
        tail = lines[last][node.end_col_offset :]
        lines[first : last + 1] = [lines[first][: node.col_offset] + statement + tail]
    return "".join(lines)


FILE_DEPTH = [  # in a file moved one level down: what was next to it is one level up
    (
        re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?)\.parents\[(\d+)\]"),
        lambda m: f"{m[1]}.parents[{int(m[2]) + 1}]",
    ),
    (re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?)\.parent\b"), lambda m: f"{m[1]}.parent.parent"),
    (re.compile(r"os\.path\.dirname\(__file__\)"), lambda m: "os.path.dirname(os.path.dirname(__file__))"),
]


def rewrite_depth(path: str, text: str) -> str:
    for pattern, replace in FILE_DEPTH:
        text = pattern.sub(replace, text)  # type: ignore[arg-type]
    leftover = [
        line
        for line in text.splitlines()
        if "__file__" in line
        and "Path(__file__)" not in line
        and "os.path.dirname(" not in line
        and "imagekit.__file__" not in line
        and not re.search(r"\w\.__file__\)\.parent\.with_name\(", line)
    ]
    if leftover:
        fail(f"{path}: __file__ used in a way this script does not know: {leftover[0].strip()}")
    return text


def rewrite(root: Path, moved: set[str], tests: dict[str, str]) -> list[str]:
    subs = patterns(tests)
    limits = re.compile(rf"\"({'|'.join(MODULES)})\.py\"")
    of_module = re.compile(rf"Path\(({'|'.join(MODULES)})\.__file__\)\.with_name\(")
    changed = []
    for name in run("git", "-C", str(root), "ls-files").splitlines():
        path = root / name
        if name in HISTORY_FILES or name.startswith(SKIPPED_PREFIXES) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        protected = PROTECTED_LINES.get(name)
        kept = []
        for line in text.splitlines(keepends=True):
            if not (protected and protected.search(line)):
                for pattern, replace in subs:
                    line = pattern.sub(replace, line)  # type: ignore[arg-type]
            kept.append(line)
        new = "".join(kept)
        if name.endswith(".py"):
            new = rewrite_from_imagekit(new)
            new = of_module.sub(lambda m: f"Path({m[1]}.__file__).parent.with_name(", new)
            if name in moved:
                new = rewrite_depth(name, new)
            new = wrap_long(text, new)
        if name.endswith("test_code_limits.py"):
            new = limits.sub(lambda m: f'"{MODULES[m[1]].replace(".", "/")}.py"', new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(name)
    return changed


def ruff() -> str:
    for candidate in (".venv/bin/ruff", shutil.which("ruff")):
        if candidate and Path(candidate).exists():
            return candidate
    fail("ruff not found (.venv/bin/ruff or PATH): make the venv first (bash scripts/test.sh fast)")
    return ""


def main() -> None:
    root = Path.cwd()
    if not (root / "imagekit/__init__.py").exists() or not (root / ".git").exists():
        fail("run me from the root of an imagekit checkout")
    if (root / "imagekit/core").exists():
        fail("imagekit/core exists: this checkout is restructured already")
    modules, tests = plan_moves(root)
    if "--dry-run" in sys.argv:
        for src, dst in {**modules, **tests}.items():
            print(f"{src} -> {dst}")
        return
    tool = ruff()
    if run("git", "-C", str(root), "status", "--porcelain", "--untracked-files=no").strip():
        fail("the checkout has uncommitted changes; commit or stash them first")
    git_mv(root, modules)
    git_mv(root, tests)
    changed = rewrite(root, set(modules.values()) | set(tests.values()), tests)
    made = make_inits(root, tests)
    split_verify(root)  # after the rewrite: the harness's imports and the moved code are new already
    made.append("imagekit/verify/invocation.py")
    for name, text in SHIMS.items():
        (root / f"imagekit/{name}.py").write_text(text, encoding="utf-8")
        made.append(f"imagekit/{name}.py")
    changed.append("imagekit/verify/harness.py")
    layers = root / "tests/unit/test_layers.py"
    layers.write_text(LAYERS_TEST.read_text(encoding="utf-8"), encoding="utf-8")
    made.append("tests/unit/test_layers.py")
    run("git", "-C", str(root), "add", *made)
    python = sorted({*made, *[c for c in changed if c.endswith(".py")]})
    python = [p for p in python if p.endswith(".py")]
    subprocess.run(
        [
            tool,
            "check",
            "-q",
            "--fix",
            "--select",
            "F401",
            "imagekit/verify/harness.py",
            "imagekit/verify/invocation.py",
        ],
        check=False,
    )
    subprocess.run([tool, "check", "-q", "--fix", "--select", "I", *python], check=False)
    subprocess.run([tool, "format", "-q", *python], check=True)
    print(
        f"restructure: moved {len(modules)} modules and {len(tests)} tests into {len(PACKAGES)} packages; "
        f"rewrote {len(changed)} files. Next: ruff, mypy, the fast tier, render --check."
    )


if __name__ == "__main__":
    main()
