"""Bases pinned by digest from the lock beside the matrix: what a plan builds FROM, what the image's
labels say, what the input digest covers; and an edited lock is one line with its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.builds.named_inputs import matrix_inputs
from imagekit.core.errors import ExitCode, InputError
from imagekit.plan.matrix import load_plan
from imagekit.plan.pin_file import pins_path
from imagekit.plan.pins import MAX_PINS, PINS_BYTES, pins_document, pulled_bases
from imagekit.render.dockerfile import Renderer
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE, run_cli

AXES = 'version: 1\naxes: {torch: ["2.1.2"], cuda: ["12.1"], flavour: [devel, runtime], base: [cuda]}\n'
DEVEL = "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04"
RUNTIME = "nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04"
ONE = "sha256:" + "1" * 64
TWO = "sha256:" + "2" * 64


@pytest.fixture
def matrix(write_matrix: Callable[[str], Path]) -> Path:
    return write_matrix(AXES + WAIVE_OLD_TORCH + CUDA_BASE)


def _lock(matrix: Path, pins: dict[str, str]) -> Path:
    path = pins_path(matrix)
    path.write_text(pins_document(pins), encoding="utf-8")
    return path


def test_without_a_lock_the_bases_are_the_matrixs_tags(matrix: Path) -> None:
    plan = load_plan(matrix)
    assert pulled_bases(plan.cells) == (DEVEL, RUNTIME)
    assert {c.base_image for c in plan.cells} == {DEVEL, RUNTIME}


def test_with_a_lock_every_cell_is_built_from_name_tag_and_digest(matrix: Path) -> None:
    unpinned = {r.cell.id: r for r in Renderer(load_plan(matrix)).render_all()}
    _lock(matrix, {DEVEL: ONE, RUNTIME: TWO})
    plan = load_plan(matrix)
    rendered = {r.cell.id: r for r in Renderer(plan).render_all()}
    for cell_id, item in rendered.items():
        base, digest = (DEVEL, ONE) if "devel" in cell_id else (RUNTIME, TWO)
        assert f"\nFROM {base}@{digest}\n" in item.dockerfile
        assert f'org.opencontainers.image.base.name="{base}"' in item.dockerfile
        assert f'org.opencontainers.image.base.digest="{digest}"' in item.dockerfile
        # the base is an input: a pinned cell is another image than the unpinned one
        assert item.input_digest != unpinned[cell_id].input_digest
    _lock(matrix, {DEVEL: TWO, RUNTIME: TWO})  # a refresh that moves one digest
    moved = {r.cell.id: r.input_digest for r in Renderer(load_plan(matrix)).render_all()}
    assert [cell_id for cell_id in moved if moved[cell_id] != rendered[cell_id].input_digest] == [
        cell_id for cell_id in rendered if "devel" in cell_id
    ]
    # pin-bases itself plans without the lock it replaces
    assert {c.base_image for c in load_plan(matrix, pinned=False).cells} == {DEVEL, RUNTIME}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (pins_document({DEVEL: ONE}), f"no digest for base {RUNTIME}"),
        (
            pins_document({DEVEL: ONE, RUNTIME: TWO, "ubuntu:22.04": ONE}),
            "which no cell of matrix.yaml pulls",
        ),
        (pins_document({DEVEL: "sha256:abc", RUNTIME: TWO}), "is not sha256:<64 hex>"),
        (pins_document({DEVEL: "md5:" + "1" * 32, RUNTIME: TWO}), "is not sha256:<64 hex>"),
        (pins_document({f"{DEVEL}@{ONE}": ONE, RUNTIME: TWO}), "not an image reference by tag"),
        (pins_document({"Not A Reference": ONE}), "not an image reference by tag"),
        (json.dumps({"version": 2, "bases": {}}), "version 2; expected 1"),
        (json.dumps({"version": 1, "bases": [DEVEL]}), "an object of base -> digest"),
        (json.dumps({"version": 1, "bases": {}, "note": "x"}), "unknown key"),
        ("{not json", "not a readable lock of base digests"),
        (
            json.dumps({"version": 1, "bases": {f"r{i}:t": ONE for i in range(MAX_PINS + 1)}}),
            "more than 1000",
        ),
        (" " * (PINS_BYTES + 1), "larger than"),
    ],
)
def test_an_edited_lock_is_one_line_naming_the_file_and_the_fix(
    matrix: Path, text: str, problem: str
) -> None:
    pins_path(matrix).write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=r"matrix\.bases\.lock\.json") as raised:
        load_plan(matrix)
    assert problem in raised.value.message and "\n" not in raised.value.message
    result = run_cli("plan", "--matrix", str(matrix))
    assert result.exit_code == ExitCode.INVALID_INPUT
    (line,) = result.stderr.splitlines()
    assert "imagekit pin-bases --matrix matrix.yaml" in line


def test_a_matrix_that_requires_pins_is_refused_without_its_lock(write_matrix: Callable[[str], Path]) -> None:
    matrix = write_matrix(AXES + WAIVE_OLD_TORCH + CUDA_BASE + "require_base_pins: true\n")
    result = run_cli("plan", "--matrix", str(matrix))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "require_base_pins is set and matrix.bases.lock.json does not exist" in result.stderr
    assert "`imagekit pin-bases --matrix matrix.yaml`" in result.stderr
    _lock(matrix, {DEVEL: ONE, RUNTIME: TWO})
    assert run_cli("plan", "--matrix", str(matrix)).exit_code == 0


def test_the_no_change_answer_covers_the_lock_present_or_not(matrix: Path, tmp_path: Path) -> None:
    lock = str(pins_path(matrix.resolve()))
    found = matrix_inputs(matrix, (str(tmp_path / ".imagekit"),))
    assert found is not None and lock in found  # absent: its appearing is a change
    _lock(matrix, {DEVEL: ONE, RUNTIME: TWO})
    again = matrix_inputs(matrix, (str(tmp_path / ".imagekit"),))
    assert again is not None and lock in again
