"""The docs point at what exists: every file, test and module the prose names is there.

Files move (issue 47 moved many) and prose does not follow by itself: a reliability row citing a
test file that was split, a comment sending the reader to a module that was renamed. This reads
the prose of the repository, README.md, RELIABILITY.md, BENCHMARKS.md, the Markdown under
examples/ and the fixtures' README.md files, the docstrings and comments of the Python code
(imagekit/, bench/, testbed/, scripts/, tests/), the comments of its shell scripts, and the
workflows, and checks what each reference names:

- a path from the top of the repository (``tests/...``, ``imagekit/...``, ``bench/...``,
  ``scripts/...``, ``testbed/...``, ``examples/...``) names a file or directory that exists;
- a bare test file name (``test_<name>.py``, or a partial path ending in one,
  ``cli/test_<command>.py``) is the name of a file somewhere under tests/;
- ``path::test_name`` names a test function that file defines, and a test named alone in the
  Markdown (```test_name``` or ```test_name_*```) is one some file under tests/ defines;
- ``python -m imagekit.<module>`` and ``python -m bench.<name>`` name modules that resolve
  (found on disk through importlib's path finder, nothing imported).

CHANGELOG.md is history: it names what was there then, and is left out. Every stale reference is
reported at once, each with the place that holds it.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from importlib.machinery import PathFinder
from pathlib import Path

from tests.conftest import REPO

DOCS = ("README.md", "RELIABILITY.md", "BENCHMARKS.md")
CODE_ROOTS = ("imagekit", "bench", "testbed", "scripts", "tests")
PATH_ROOTS = ("tests", "imagekit", "bench", "scripts", "testbed", "examples")
# Names under a root that are no path of the checkout, each with what it is.
NOT_PATHS = {
    "imagekit/cell": "a Kubernetes annotation key in imagekit's domain (core/naming.py)",
    "imagekit/_templates": "where an installed wheel packs the templates (pyproject.toml)",
}

# A path from the repository's top, with an optional ``::test_name``: not preceded by anything a
# longer path or a word would have (``/work/main/tests/...`` and ``my_tests/`` are not ours).
PATH = re.compile(r"(?<![\w./\-$])((?:" + "|".join(PATH_ROOTS) + r")/[\w./\-]*)(?:::(\w+))?(?P<after>.?)")
# A test file's name, bare or at the end of a partial path (``unit/cli/test_<command>.py``).
TEST_FILE = re.compile(r"(?<![\w./\-$])((?:[\w\-]+/)*test_\w+\.py)(?:::(\w+))?")
# A test named alone, in Markdown's backticks; ``*`` for a family of tests.
TEST_NAME = re.compile(r"`(test_\w+)(\*?)`")
MODULE = re.compile(r"python3? -m ((?:imagekit|bench)(?:\.\w+)*)(?P<after>\.?.?)")
# What follows a name that makes it a pattern rather than a name: ``imagekit/<package>/``,
# ``tests/*.py``, ``python -m bench.<name>``.
PATTERN_NEXT = frozenset("<*{[")
# A position in a file: its line and column, counted from 1 and 0 as tokenize does.
Position = tuple[int, int]


def prose_files() -> Iterator[Path]:
    for name in DOCS:
        yield REPO / name
    yield from sorted((REPO / "examples").rglob("*.md"))
    yield from sorted((REPO / "tests" / "fixtures").rglob("README.md"))


def python_prose(source: str) -> Callable[[Position], bool]:
    """Whether a position of a Python source lies in a comment or a docstring."""
    comments: dict[int, int] = {}  # line -> the column its comment starts at
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
    docstring_lines: set[int] = set()
    # Docstrings open a module, class or function body: only statements are walked, not every
    # expression (ast.walk over the whole tree took most of this test's time).
    bodies: list[list[ast.stmt]] = [ast.parse(source).body]
    while bodies:
        body = bodies.pop()
        first = body[0] if body and isinstance(body[0], ast.Expr) else None
        if first and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            docstring_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
        for statement in body:
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    bodies.append(inner)
            bodies.extend(handler.body for handler in getattr(statement, "handlers", []))

    def is_prose(position: Position) -> bool:
        line, column = position
        return line in docstring_lines or column >= comments.get(line, column + 1)

    return is_prose


def shell_prose(source: str) -> Callable[[Position], bool]:
    """Whether a position of a shell script lies in a comment (a ``#`` that starts a word)."""
    comments: dict[int, int] = {}
    for number, line in enumerate(source.splitlines(), 1):
        match = re.search(r"(?:^|\s)#", line)
        if match:
            comments[number] = match.end() - 1
    return lambda position: position[1] >= comments.get(position[0], position[1] + 1)


def all_prose(source: str) -> Callable[[Position], bool]:
    return lambda position: True


def texts() -> Iterator[tuple[str, str, Callable[[str], Callable[[Position], bool]]]]:
    """Every file whose prose is checked, relative to the repository, with its text and what tells
    its prose from its code (made only for a file holding a stale name: tokenizing every Python
    file would take seconds)."""
    for path in prose_files():
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8"), all_prose
    for path in sorted((REPO / ".github" / "workflows").glob("*.yml")):
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8"), all_prose
    for root in CODE_ROOTS:
        for path in sorted((REPO / root).rglob("*")):
            relative = path.relative_to(REPO)
            if "fixtures" in relative.parts[:-1] or "golden" in relative.parts:
                continue  # data, not prose
            if path.suffix == ".py":
                yield str(relative), path.read_text(encoding="utf-8"), python_prose
            elif path.suffix == ".sh":
                yield str(relative), path.read_text(encoding="utf-8"), shell_prose


def functions_under_tests() -> frozenset[str]:
    """Every test function defined under tests/."""
    pattern = re.compile(r"^\s*(?:async\s+)?def (test_\w+)", re.MULTILINE)
    return frozenset(
        name for path in (REPO / "tests").rglob("*.py") for name in pattern.findall(path.read_text())
    )


def files_under_tests() -> dict[str, list[Path]]:
    """Every test file under tests/, by every tail of its path: ``test_<name>.py``,
    ``cli/test_<name>.py``, ``tests/unit/cli/test_<name>.py``."""
    found: dict[str, list[Path]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        parts = path.relative_to(REPO).parts
        for start in range(len(parts)):
            found.setdefault("/".join(parts[start:]), []).append(path)
    return found


@functools.cache
def defined_names(path: Path) -> frozenset[str]:
    """The functions (nested too), classes and top-level assignments a Python file defines, by a
    cheap look at its text."""
    pattern = r"^\s*(?:async\s+def|def|class)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?="
    text = path.read_text(encoding="utf-8")
    return frozenset(a or b for a, b in re.findall(pattern, text, re.MULTILINE))


def ignored(path: str) -> bool:
    """Whether git ignores the path by one of .gitignore's anchored patterns: what the repository
    makes rather than holds (bench/results/, an example's wheelhouse), named so that whoever runs
    it knows where its output lands."""
    parts = path.split("/")
    for line in (REPO / ".gitignore").read_text().splitlines():
        if line.startswith("/"):
            pattern = line.strip("/").split("/")
            if len(parts) >= len(pattern) and all(map(fnmatch.fnmatch, parts, pattern)):
                return True
    return False


def path_problem(path: str, function: str | None) -> str | None:
    target = REPO / path
    if not target.exists():
        # ``testbed/sample_projects.cuda_index``: a name in a module.
        module, _, name = path.partition(".")
        if name.isidentifier() and (REPO / f"{module}.py").is_file():
            if name in defined_names(REPO / f"{module}.py"):
                return None
            return f"{module}.py defines no {name}"
        return None if ignored(path) else f"{path} does not exist"
    if function and function not in defined_names(target):
        return f"{path} defines no {function}"
    return None


def module_resolves(name: str) -> bool:
    """Whether ``python -m name`` finds a module: each part found on disk by the path finder, a
    package's ``__path__`` from its spec, nothing imported."""
    search = [str(REPO)]
    spec = None
    for part in name.split("."):
        spec = PathFinder.find_spec(part, search)
        if spec is None:
            return False
        search = list(spec.submodule_search_locations or [])
    if spec is not None and spec.submodule_search_locations is not None:
        return (Path(spec.submodule_search_locations[0]) / "__main__.py").is_file()
    return True


def problems(
    text: str, by_tail: dict[str, list[Path]], tests: frozenset[str] | None
) -> Iterator[tuple[int, str]]:
    """Each stale name in a text, by its offset, prose or not; the tests named alone are looked
    for among ``tests`` (None: the text is not Markdown, where those are in backticks)."""
    for match in PATH.finditer(text):
        if match.group("after") in PATTERN_NEXT:
            continue
        path = match.group(1).rstrip(".,;:-")
        if path in NOT_PATHS or path.rsplit("/", 1)[-1].isupper():
            continue  # ``imagekit/data/NAME``: a placeholder
        problem = path_problem(path.rstrip("/"), match.group(2))
        if problem:
            yield match.start(), problem
    for match in TEST_FILE.finditer(text):
        name = match.group(1)
        if name.split("/")[0] in PATH_ROOTS:
            continue  # a path from the top: checked above
        files = by_tail.get(name)
        if not files:
            yield match.start(), f"no file under tests/ is named {name}"
        elif match.group(2) and not any(match.group(2) in defined_names(f) for f in files):
            yield match.start(), f"no {name} defines {match.group(2)}"
    for match in TEST_NAME.finditer(text if tests is not None else ""):
        name, family = match.groups()
        if not (any(t.startswith(name) for t in tests or ()) if family else name in (tests or ())):
            yield match.start(), f"no file under tests/ defines {name}{family}"
    for match in MODULE.finditer(text):
        if not set(match.group("after")) & PATTERN_NEXT and not module_resolves(match.group(1)):
            yield match.start(), f"python -m {match.group(1)} names no module"


def stale_references() -> list[str]:
    """Every name in the prose that names nothing that exists, as ``file:line: what``."""
    by_tail, tests = files_under_tests(), functions_under_tests()
    stale: list[str] = []
    for where, text, prose_of in texts():
        is_prose = None
        markdown = tests if where.endswith(".md") else None
        for offset, problem in sorted(problems(text, by_tail, markdown)):
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1)
            is_prose = is_prose or prose_of(text)
            if is_prose((line, column)):
                stale.append(f"{where}:{line}: {problem}")
    return stale


def test_every_name_in_the_docs_names_something_that_exists() -> None:
    stale = stale_references()
    assert not stale, f"{len(stale)} names in the docs name nothing that exists:\n" + "\n".join(stale)


def found(text: str) -> list[str]:
    return [problem for _, problem in problems(text, files_under_tests(), functions_under_tests())]


def test_each_kind_of_stale_name_is_found_and_each_live_one_passes() -> None:
    stale = (
        "`tests/unit/cli/test_cli.py` and `imagekit/build/` and `bench/gone.py`; "
        "`tests/unit/test_doc_paths.py::test_gone`; `test_gone.py`, `cli/test_gone.py`, "
        "`test_doc_paths.py::test_gone`; `test_gone_for_good`, `test_gone_for_*`; "
        "`python -m imagekit.gone` and `python -m bench.gone`; `testbed/sample_projects.gone`"
    )
    assert found(stale) == [
        "tests/unit/cli/test_cli.py does not exist",
        "imagekit/build does not exist",
        "bench/gone.py does not exist",
        "tests/unit/test_doc_paths.py defines no test_gone",
        "testbed/sample_projects.py defines no gone",
        "no file under tests/ is named test_gone.py",
        "no file under tests/ is named cli/test_gone.py",
        "no test_doc_paths.py defines test_gone",
        "no file under tests/ defines test_gone_for_good",
        "no file under tests/ defines test_gone_for_*",
        "python -m imagekit.gone names no module",
        "python -m bench.gone names no module",
    ]
    live = (
        "`tests/unit/test_doc_paths.py::test_each_kind_of_stale_name_is_found_and_each_live_one_passes`, "
        "`imagekit/builds/` `bench/results/builder.json` `testbed/sample_projects.cuda_index` "
        "`unit/cli/test_plan.py` `test_doc_paths.py::found` `test_each_kind_of_*` "
        "`python -m imagekit.refresh.compat` `python -m bench.builder` `python -m imagekit` "
        "`imagekit/<package>/` `python -m bench.<name>` `/elsewhere/tests/gone.py` `imagekit/data/NAME`"
    )
    assert found(live) == []


def test_only_the_prose_of_code_is_read() -> None:
    source = 'PATH = "bench/gone.py"  # bench/gone.py\n\n\ndef f() -> None:\n    """bench/gone.py"""\n'
    is_prose = python_prose(source)
    assert [is_prose((1, 9)), is_prose((1, 27)), is_prose((5, 7))] == [False, True, True]
    is_comment = shell_prose("cp bench/gone.sh x  # bench/gone.sh\n# bench/gone.sh\n")
    assert [is_comment((1, 3)), is_comment((1, 23)), is_comment((2, 2))] == [False, True, True]
