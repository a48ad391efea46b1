"""Fleet coverage: which GPU generations each cell's wheels carry kernels for."""

from __future__ import annotations

import json

import pytest

from imagekit.core.versions import version_key
from imagekit.plan.coverage import families, fleet_coverage, serves
from imagekit.plan.gpu_fit import capability
from imagekit.plan.matrix import load_plan
from tests.conftest import REPO, run_cli


@pytest.mark.parametrize(
    ("arch_list", "gpu", "runs"),
    [
        ("5.0;6.0;7.0;7.5;8.0;8.6;9.0", "7.5", True),  # its own cubin
        ("7.0;8.0;9.0", "8.9", True),  # a cubin for 8.0 runs on 8.9
        ("5.0;6.0;7.0;7.5;8.0;8.6;9.0", "10.0", False),  # no Blackwell kernel, no PTX (cu126)
        ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", "10.3", True),  # B300 runs the 10.0 cubin
        ("7.5;8.0;8.6;9.0;10.0;12.0+PTX", "7.0", False),  # CUDA 13 dropped Volta
        ("7.5;8.0;9.0+PTX", "12.0", True),  # the driver compiles PTX for any later GPU
        ("7.5;8.0;9.0+PTX", "8.6", True),
        ("8.0;9.0", "7.5", False),
        # cu130 aarch64 as read in torch 2.11.0's image: sm_110 (Thor) parses, and no Turing kernel
        ("8.0;9.0;10.0;11.0;12.0", "11.0", True),
        ("8.0;9.0;10.0;11.0;12.0", "10.3", True),
        ("8.0;9.0;10.0;11.0;12.0", "8.6", True),
        ("8.0;9.0;10.0;11.0;12.0", "7.5", False),
    ],
)
def test_a_cell_runs_where_its_wheels_carry_a_kernel(arch_list: str, gpu: str, runs: bool) -> None:
    assert serves(arch_list, capability(gpu)) is runs


def test_every_gpu_generation_of_the_fleet_has_a_current_cell_in_the_shipped_matrix() -> None:
    coverage = {f.family: f for f in fleet_coverage(load_plan(REPO / "matrix.yaml"))}
    assert set(coverage) == set(families()) and len(coverage) >= 9
    for family, served in coverage.items():
        assert served.cells, f"{family} has no cell"
    # V100 on a current torch (2.14: CUDA 13 builds have no sm_70) ...
    assert any("torch2.14" in c.cell for c in coverage["V100"].cells)
    # ... and Blackwell on an R570 driver (the CUDA 12.8 build), not only on R580+ (CUDA 13)
    assert any(version_key(c.driver or "999")[0] < 570 for c in coverage["B200"].cells)


def test_a_cell_is_listed_only_under_gpus_that_sit_beside_its_machine() -> None:
    """arm64 images run on the Grace superchips (GH200, GB200, GB300), x86 images on the rest:
    an aarch64 wheel with an sm_70 kernel still never meets a V100 in this fleet."""
    plan = load_plan(REPO / "matrix.yaml")
    arm64 = {c.id for c in plan.cells if c.platform == "linux/arm64"}
    assert arm64
    for family in fleet_coverage(plan):
        listed = {c.cell for c in family.cells}
        if family.family in ("GH200", "GB200", "GB300"):
            assert family.machines == ("aarch64",) and listed and listed <= arm64
        else:
            assert family.machines == ("x86_64",) and not listed & arm64


def test_plan_prints_the_coverage_and_puts_it_in_json() -> None:
    text = run_cli("plan", "--matrix", str(REPO / "matrix.yaml"), "--coverage")
    assert (
        text.exit_code == 0
        and "B300 (10.3):" in text.stdout
        and "GB300 (10.3, aarch64 hosts):" in text.stdout
        and "NO CELL" not in text.stdout
    )
    document = json.loads(
        run_cli("plan", "--matrix", str(REPO / "matrix.yaml"), "--coverage", "--json").stdout
    )
    assert {f["family"] for f in document["coverage"]} == set(families())
