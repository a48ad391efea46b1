"""What several command modules' tests share: a small matrix, the v1 state, and the check that a
symbolic link leads no read or write outside what was asked (each module's cases beside its tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE as BARE_CUDA_BASE
from tests.conftest import REPO, CliResult, run_cli

# The cells here are torch 2.1-2.5, about other things than advisories: theirs are waived.
CUDA_BASE = BARE_CUDA_BASE + WAIVE_OLD_TORCH

GOOD_AXES = 'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n'

M = str(REPO / "matrix.yaml")
V1_STATE = str(REPO / "tests" / "fixtures" / "state" / "v1")

CELL = "cuda-torch2.1.2-cuda12.1-py3.10-devel"

LOCAL_BASE = (
    GOOD_AXES.replace('["12.1"]', "[cpu]")
    + (
        "bases:\n  deb:\n    image: example/deb:1\n    os: debian12\n    python: '3.11'\n    cuda: false\n"
        "    build: {context: ctx}\n"
    )
    + WAIVE_OLD_TORCH
)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def new_project(tmp_path: Path, matrix: str) -> tuple[Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "Dockerfile").write_text("FROM scratch\n# someone else's file\n")
    (outside / "Dockerfile.j2").write_text("FROM {{ cell.base_image }}\n")
    (project / "matrix.yaml").write_text(matrix)
    return project, outside


def link(name: str, to: str = "") -> Callable[[Path, Path], None]:
    """Arrange ``project/name`` as a link to ``outside/to`` (directories on the way made)."""

    def arrange(project: Path, outside: Path) -> None:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).symlink_to(outside / to)

    return arrange


def local_context_and(then: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def arrange(project: Path, outside: Path) -> None:
        (project / "ctx").mkdir()
        (project / "ctx" / "Dockerfile").write_text("FROM x\n")
        then(project, outside)

    return arrange


def on_matrix(*args: str) -> Callable[[Path], list[str]]:
    return lambda project: [
        args[0],
        "--matrix",
        str(project / "matrix.yaml"),
        *(a.format(p=project) for a in args[1:]),
    ]


# a case: the matrix, how the project is arranged, the command line, the problem its one error names
LinkCase = tuple[str, Callable[[Path, Path], None], Callable[[Path], list[str]], str]


def assert_no_read_or_write_outside(case: LinkCase, tmp_path: Path) -> None:
    matrix, arrange, command, problem = case
    project, outside = new_project(tmp_path, matrix)
    arrange(project, outside)
    before = snapshot(outside)
    result = run_cli(*command(project))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("imagekit: error:")]
    assert len(errors) == 1 and problem in errors[0], result.stderr
    assert snapshot(outside) == before  # nothing written there


def assert_one_error(result: CliResult, line: str) -> None:
    """Exit 2 and one line on stderr, ``imagekit: error: `` and then ``line`` (its start)."""
    assert result.exit_code == 2, result
    assert result.stderr.startswith(f"imagekit: error: {line}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
