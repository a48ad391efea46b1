"""CUDA 13.3 to 13.5 and the current NGC row at plan time: what the table admits, with which driver
floor, and what it refuses, with its reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.facts.compat import load_compat
from imagekit.plan.cells import StackCell, WheelCell
from imagekit.plan.coverage import cell_fit
from imagekit.plan.matrix import load_plan
from tests.conftest import CUDA_BASE, REPO

UBUNTU24 = CUDA_BASE.replace("ubuntu22.04", "ubuntu24.04")
# A base without CUDA: the wheels bring CUDA's libraries, nvcc comes from NVIDIA's wheels.
PLAIN_BASE = """
bases:
  plain:
    image: "ubuntu:24.04"
    os: ubuntu24.04
    cuda: false
    nvcc: wheels
"""
# A torch newer than the table, for a CUDA no released torch is built for yet (PyPI's newest,
# 2.15.0, pins cuda-toolkit 13.2.2).
NEXT_TORCH = "allow_unknown: true\ndefaults: {torchvision: none, torchaudio: none, python: '3.12'}\n"
NAMED_TAG = NEXT_TORCH.replace("python: '3.12'", "python: '3.12', cuda_full: '13.5.0'")


def test_cuda_13_3_to_13_5_are_in_the_table_with_the_r580_floor() -> None:
    cuda = load_compat().cuda
    assert [cuda[m].toolkit for m in ("13.3", "13.4", "13.5")] == ["13.3.1", "13.4.3", "13.5.0"]
    assert {cuda[m].driver_minor_floor for m in ("13.3", "13.4", "13.5")} == {"580.65.06"}
    assert (cuda["13.3"].newest_driver, cuda["13.4"].newest_driver) == ("610.43.02", "615.71.09")
    # not read: no nvidia/cuda 13.5 tag and no driver of NVIDIA's 13.5 row (compat.yaml says why)
    assert (cuda["13.5"].image_version, cuda["13.5"].newest_driver) == (None, None)


def test_a_cuda_13_5_cell_is_admitted_with_its_driver_floor(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.16.0"]\n  cuda: ["13.5"]\n  flavour: [devel, runtime]\n'
        + NEXT_TORCH
        + PLAIN_BASE
    )
    plan = load_plan(path)
    assert plan.refused == ()
    assert [(c.cuda, c.flavour) for c in plan.cells] == [("13.5", "devel"), ("13.5", "runtime")]
    devel = plan.cells[0]
    assert isinstance(devel, WheelCell) and devel.nvcc_from_wheels
    assert {cell_fit(c, plan.compat).driver_floor for c in plan.cells} == {"580.65.06"}


def test_a_cuda_13_4_cell_builds_on_its_nvidia_cuda_tag(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('axes:\n  torch: ["2.16.0"]\n  cuda: ["13.4"]\n' + NEXT_TORCH + UBUNTU24)
    (cell,) = load_plan(path).cells
    assert cell.cuda_full == "13.4.2" and cell.base_image.startswith("nvidia/cuda:13.4.2-")
    assert cell_fit(cell, load_compat()).driver_floor == "580.65.06"


def test_a_cuda_13_5_base_needs_the_tag_named(write_matrix: Callable[[str], Path]) -> None:
    """No nvidia/cuda 13.5 tag was read: refused with the fix, not built on a guessed tag."""
    refused = write_matrix(
        'axes:\n  torch: ["2.16.0", "2.15.0"]\n  cuda: ["13.5", "13.2"]\n' + NEXT_TORCH + UBUNTU24
    )
    plan = load_plan(refused)
    reasons = {(r.combination["torch"], r.combination["cuda"]): r.reason for r in plan.refused}
    assert "imagekit knows no nvidia/cuda tag of CUDA 13.5" in reasons[("2.16.0", "13.5")]
    assert "set cuda_full (e.g. 13.5.0)" in reasons[("2.16.0", "13.5")]
    named = write_matrix(
        'axes:\n  torch: ["2.16.0"]\n  cuda: ["13.5"]\n' + NAMED_TAG + UBUNTU24,
        name="named.yaml",
    )
    (cell,) = load_plan(named).cells
    assert cell.base_image.startswith("nvidia/cuda:13.5.0-")


@pytest.mark.parametrize(
    ("torch", "cuda", "reason"),
    [
        # torch 2.15.0's wheels pin cuda-toolkit 13.2.2 (PyPI) and PyTorch's index has cu130/cu132 only
        ("2.15.0", "13.5", "torch 2.15 has no CUDA 13.5 wheel (its wheels: CUDA 13.0, 13.2)"),
        ("2.15.0", "13.4", "torch 2.15 has no CUDA 13.4 wheel (its wheels: CUDA 13.0, 13.2)"),
        ("2.14.1", "13.3", "torch 2.14 has no CUDA 13.3 wheel (its wheels: CUDA 12.6, 13.0, 13.2)"),
    ],
)
def test_a_torch_pinned_to_one_cuda_13_is_refused_on_another(
    torch: str, cuda: str, reason: str, write_matrix: Callable[[str], Path]
) -> None:
    axes = f'axes:\n  torch: ["{torch}"]\n  cuda: ["{cuda}"]\n  python: ["3.12"]\n'
    # torch 2.15.0 on CUDA 13.2 makes the matrix buildable (a matrix of refusals alone is an error)
    axes += 'include:\n  - {torch: "2.15.0", cuda: "13.2", python: "3.12", base: plain}\n'
    plan = load_plan(write_matrix(axes + PLAIN_BASE))
    found = [
        r.reason for r in plan.refused if (r.combination["torch"], r.combination["cuda"]) == (torch, cuda)
    ]
    assert found == [reason] or (found and reason in found[0])


def test_the_current_ngc_row_needs_no_waiver() -> None:
    """The shipped matrix's NGC 26.09 rows plan with their own versions, no advisory against them."""
    plan = load_plan(REPO / "matrix.yaml")
    rows = [c for c in plan.cells if isinstance(c, StackCell) and c.stack.name == "ngc-pytorch-26.09"]
    assert sorted(c.platform for c in rows) == ["linux/amd64", "linux/arm64"]
    for cell in rows:
        assert (cell.torch, cell.cuda, cell.cuda_full, cell.python) == (
            "2.14.0a0+b2c75dd062.nv26.09",
            "13.4",
            "13.4.1",
            "3.12",
        )
        assert cell.base_image == "nvcr.io/nvidia/pytorch:26.09-py3"
        assert cell.advisories == ()
        assert cell_fit(cell, plan.compat).driver_floor == "580.65.06"


def test_ngc_26_09_keeps_its_own_torch_and_cuda(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        "axes:\n  base: [ngc]\n  cuda: ['13.4', '13.5']\n  torch: ['2.14.0a0+b2c75dd062.nv26.09', '2.14.1']\n"
        "bases:\n  ngc: {stack: ngc-pytorch-26.09}\n"
    )
    plan = load_plan(path)
    assert [(c.torch, c.cuda) for c in plan.cells] == [("2.14.0a0+b2c75dd062.nv26.09", "13.4")]
    reasons = " | ".join(r.reason for r in plan.refused)
    assert (
        "so CUDA 13.5 cannot exist" in reasons
        and "installing torch 2.14.1 would replace NVIDIA's build" in reasons
    )
