"""Compatibility knowledge: the data says what FACTS.md says, and impossible cells are refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.compat import cuda_variant, load_compat, minor_of, version_key
from imagekit.matrix import load_plan
from tests.conftest import CUDA_BASE, run_cli


def test_version_helpers() -> None:
    assert version_key("12.10") > version_key("12.9")
    assert minor_of("2.1.0a0+32f93b1") == "2.1"
    assert (
        cuda_variant("12.1") == "cu121" and cuda_variant("11.8") == "cu118" and cuda_variant("cpu") == "cpu"
    )


def test_wheel_variants_match_facts() -> None:
    compat = load_compat()
    has_118 = [m for m, r in compat.torch.items() if "cu118" in r.variants]
    has_121 = [m for m, r in compat.torch.items() if "cu121" in r.variants]
    assert has_118 == ["2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7"]
    assert has_121 == ["2.1", "2.2", "2.3", "2.4", "2.5"]
    assert set(compat.torch) >= {f"2.{n}" for n in range(10)}
    assert compat.torch["2.0"].patch("2.0.0") is not None
    pair = compat.torch["2.0"].patch("2.0.0")
    assert pair is not None and (pair.torchvision, pair.torchaudio) == ("0.15.1", "2.0.1")
    assert [m for m, r in compat.torch.items() if r.cudnn_major == 8] == ["2.0", "2.1", "2.2", "2.3"]


def test_driver_minimums_and_images_match_facts() -> None:
    compat = load_compat()
    assert (compat.cuda["11.8"].driver_min, compat.cuda["11.8"].driver_minor_floor) == (
        "520.61.05",
        "450.80.02",
    )
    assert (compat.cuda["12.1"].driver_min, compat.cuda["12.1"].driver_minor_floor) == (
        "530.30.02",
        "525.60.13",
    )
    assert compat.cuda["12.2"].driver_min == "535.104.05"
    assert compat.cuda["12.1"].image_version == "12.1.1"  # 12.1.0 is end-of-life
    assert compat.cuda["11.8"].image_version == "11.8.0"


def test_ngc_stack_matches_facts() -> None:
    ngc = load_compat().stacks["ngc-pytorch-23.10"]
    assert (ngc.torch, ngc.cuda, ngc.cudnn, ngc.python, ngc.nccl) == (
        "2.1.0a0+32f93b1",
        "12.2.2",
        "8.9.5.29",
        "3.10",
        "2.19.3",
    )


@pytest.mark.parametrize(
    ("torch", "cuda", "reason"),
    [
        ("2.9.1", "11.8", "torch 2.9 has no CUDA 11.8 wheel (its wheels: CUDA 12.6, 12.8, 13.0)"),
        ("2.6.0", "12.1", "torch 2.6 has no CUDA 12.1 wheel"),
        ("2.0.1", "12.1", "torch 2.0 has no CUDA 12.1 wheel"),
        ("2.1.9", "12.1", "torch 2.1.9 is a patch missing from imagekit's compatibility table"),
        ("2.10", "12.8", "so its latest patch is unknown; write the full version (2.10.0)"),
        ("2.10.0", "12.8", "torch 2.10.0 is newer than imagekit's compatibility table"),
        ("1.13.1", "11.7", "torch 1.13.1 is not a release imagekit knows"),
    ],
)
def test_impossible_cells_are_refused(
    torch: str, cuda: str, reason: str, write_matrix: Callable[[str], Path]
) -> None:
    path = write_matrix(f'axes:\n  torch: ["{torch}", "2.5.1"]\n  cuda: ["{cuda}", "12.4"]\n' + CUDA_BASE)
    plan = load_plan(path)
    reasons = [
        r.reason for r in plan.refused if r.combination["torch"] == torch and r.combination["cuda"] == cuda
    ]
    assert reasons and reason in reasons[0]


def test_ngc_never_crosses_the_cuda_axis(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  base: [ngc]\n  cuda: ["11.8", "12.2"]\nbases:\n  ngc: {stack: ngc-pytorch-23.10}\n'
    )
    plan = load_plan(path)
    assert [c.cuda_full for c in plan.cells] == ["12.2.2"]
    assert "never crosses the CUDA axis, so CUDA 11.8 cannot exist" in plan.refused[0].reason


def test_ngc_refuses_runtime_and_other_torch(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        "axes:\n  base: [ngc]\n  flavour: [devel, runtime]\n  torch: [2.1.0a0+32f93b1, 2.1.2]\n"
        "bases:\n  ngc: {stack: ngc-pytorch-23.10}\n"
    )
    plan = load_plan(path)
    assert len(plan.cells) == 1 and plan.cells[0].torch == "2.1.0a0+32f93b1"
    reasons = " | ".join(r.reason for r in plan.refused)
    assert "no runtime flavour" in reasons and "would replace NVIDIA's build" in reasons


def test_allow_unknown_admits_with_warning(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.10.0"]\n  cuda: ["12.8"]\n'
        "defaults: {torchvision: '0.25.0', torchaudio: none}\n" + CUDA_BASE
    )
    plan = load_plan(path)
    (cell,) = plan.cells
    assert cell.unknown and cell.torchvision == "0.25.0" and cell.torchaudio is None
    assert any("admitted by allow_unknown" in w for w in plan.warnings)
    # a combination the table knows is impossible stays refused, escape hatch or not
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.9.1"]\n  cuda: ["11.8", "12.8"]\n' + CUDA_BASE
    )
    assert "no CUDA 11.8 wheel" in load_plan(path).refused[0].reason


def test_python_refusals(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2", "2.4.1"]\n  cuda: ["12.1"]\n  python: ["3.10", "3.12"]\n' + CUDA_BASE
    )
    plan = load_plan(path)
    assert sorted((c.torch, c.python) for c in plan.cells) == [("2.1.2", "3.10"), ("2.4.1", "3.10")]
    reasons = sorted(r.reason for r in plan.refused)
    assert any("ubuntu22.04's packages carry Python 3.10, 3.11, not 3.12" in r for r in reasons)


def test_cpu_and_cuda_bases_do_not_mix(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.5.1"]\n  cuda: ["cpu", "12.1"]\n  base: [cuda, deb]\n'
        + CUDA_BASE
        + "  deb: {image: debian:bookworm, os: debian12}\n"
    )
    plan = load_plan(path)
    assert sorted((c.base, c.cuda) for c in plan.cells) == [("cuda", "12.1"), ("deb", "cpu")]
    reasons = " | ".join(r.reason for r in plan.refused)
    assert "a cpu build belongs on a base without it" in reasons and "has no CUDA toolkit" in reasons


def test_minor_means_latest_patch(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('axes:\n  torch: ["2.1"]\n  cuda: ["12.1"]\n' + CUDA_BASE)
    (cell,) = load_plan(path).cells
    assert (cell.torch, cell.torchvision, cell.torchaudio) == ("2.1.2", "0.16.2", "2.1.2")


def test_allow_unknown_admits_a_new_patch_of_a_known_release(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('allow_unknown: true\naxes:\n  torch: ["2.1.9"]\n  cuda: ["12.1"]\n' + CUDA_BASE)
    (cell,) = load_plan(path).cells
    assert cell.torch == "2.1.9" and cell.unknown and cell.numpy_cap == "<2"


def test_cuda_full_must_belong_to_the_cells_cuda(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.5.1"]\n  cuda: ["11.8", "12.1"]\ndefaults: {cuda_full: "12.1.1"}\n' + CUDA_BASE
    )
    plan = load_plan(path)
    assert [c.cuda for c in plan.cells] == ["12.1"]
    assert "cuda_full 12.1.1 is not a CUDA 11.8 release" in plan.refused[0].reason


def test_without_a_torch_index_only_pypis_build_exists(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["11.8", "12.1"]\n'
        + CUDA_BASE
        + "sources: {pip: {torch_index_url: null}}\n"
    )
    plan = load_plan(path)
    assert [c.cuda for c in plan.cells] == ["12.1"]  # PyPI's torch 2.1 is the cu121 build
    assert "whose torch 2.1 is the cu121 build, not cu118" in plan.refused[0].reason


def test_a_fixed_stack_with_extras_cannot_use_a_wheelhouse(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "x.whl").write_bytes(b"x")
    path = write_matrix(
        "axes:\n  base: [ngc]\ndefaults: {pip_packages: [numpy]}\nbases:\n  ngc: {stack: ngc-pytorch-23.10}\n"
        "sources: {pip: {find_links: [wh]}}\n"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2 and "a wheelhouse build stage cannot reach" in result.stderr
