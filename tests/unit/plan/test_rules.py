"""The compatibility rules: each named rule on its own, then their order through a whole plan."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.facts.compat import load_compat
from imagekit.plan import rules
from imagekit.plan.cells import WheelCell
from imagekit.plan.matrix import load_plan
from imagekit.plan.rules import Request
from testbed.waivers import WAIVE_OLD_TORCH, WAIVE_TORCH_2_5
from tests.conftest import CUDA_BASE, run_cli

COMPAT = load_compat()
NGC = COMPAT.stacks["ngc-pytorch-23.10"]
WHEEL = Request(
    base="cuda",
    torch="2.1.2",
    cuda="12.1",
    python="3.10",
    flavour="devel",
    carries_cuda=True,
    os="ubuntu22.04",
)
STACK = Request(
    base="ngc", torch=NGC.torch, cuda="12.2", python=NGC.python, flavour="devel", stack=NGC, image=NGC.image
)


def test_a_possible_wheel_cell_passes_every_rule() -> None:
    assert rules.first_refusal(rules.WHEEL_RULES, WHEEL, COMPAT) is None
    assert rules.first_refusal(rules.STACK_RULES, STACK, COMPAT) is None


# Each rule: one request it refuses (with words of its reason) and one it lets pass.
CASES: list[tuple[rules.Rule, Request, str, Request]] = [
    (
        rules.torch_written_in_full,
        replace(WHEEL, torch="2.99"),
        "write the full version (2.99.0)",
        replace(WHEEL, torch="2.99.0"),
    ),
    (
        rules.torch_is_a_release,
        replace(WHEEL, torch="1.13.1"),
        "not a release imagekit knows",
        replace(WHEEL, torch="2.99.0"),
    ),
    (
        rules.torch_patch_exists,
        replace(WHEEL, torch="2.1.9", allow_unknown=True),
        "torch 2.1.9 is not a 2.1 release (its patches: 2.1.0, 2.1.1, 2.1.2); pick one of those."
        " allow_unknown admits only releases newer than the table's newest (2.15.0)",
        replace(WHEEL, torch="2.15.5", allow_unknown=True),
    ),
    (
        rules.torch_in_table,
        replace(WHEEL, torch="2.99.0"),
        "newer than imagekit's compatibility table",
        replace(WHEEL, torch="2.99.0", allow_unknown=True),
    ),
    (
        rules.pip_packages_leave_torch_alone,
        replace(WHEEL, pip_packages=("numpy<2", "torch==2.0.0")),
        "pip_packages lists torch==2.0.0: torch, torchvision and torchaudio come from the matrix",
        replace(WHEEL, pip_packages=("numpy<2", "torchmetrics", "pytorch-lightning")),
    ),
    (
        rules.base_matches_accelerator,
        replace(WHEEL, cuda="cpu"),
        "a cpu build belongs on a base without it",
        replace(WHEEL, cuda="cpu", carries_cuda=False),
    ),
    (
        rules.base_matches_accelerator,
        replace(WHEEL, carries_cuda=False),
        "has no CUDA toolkit, and a devel image needs nvcc 12.1",
        replace(WHEEL, carries_cuda=False, nvcc_from_wheels=True),
    ),
    (
        rules.nvcc_wheels_hold_nvcc,
        replace(WHEEL, carries_cuda=False, nvcc_from_wheels=True),
        "bases.cuda.nvcc: wheels: NVIDIA's CUDA 12 compiler wheels (nvidia-cuda-nvcc-cu12) hold ptxas and"
        " libnvvm but no nvcc",
        replace(WHEEL, torch="2.15.0", cuda="13.2", carries_cuda=False, nvcc_from_wheels=True),
    ),
    (
        rules.torch_has_cuda_wheel,
        replace(WHEEL, torch="2.6.0", cuda="12.1"),
        "torch 2.6 has no CUDA 12.1 wheel",
        replace(WHEEL, torch="2.6.0", cuda="12.4"),
    ),
    (
        rules.pypi_serves_one_variant,
        replace(WHEEL, cuda="11.8", torch_source="pypi"),
        "whose torch 2.1 is the cu121 build, not cu118",
        replace(WHEEL, cuda="11.8", torch_source="index"),
    ),
    (
        rules.cuda_full_of_the_cells_cuda,
        replace(WHEEL, cuda_full="11.8.0"),
        "cuda_full 11.8.0 is not a CUDA 12.1 release",
        replace(WHEEL, cuda_full="12.1.0"),
    ),
    (
        rules.cuda_in_table,
        replace(WHEEL, cuda="99.1"),
        "set allow_unknown: true and cuda_full",
        replace(WHEEL, cuda="99.1", cuda_full="99.1.0"),
    ),
    (
        rules.cuda_base_has_a_tag,
        replace(WHEEL, torch="2.99.0", cuda="13.5", allow_unknown=True, os="ubuntu24.04"),
        "imagekit knows no nvidia/cuda tag of CUDA 13.5 (its table was not read from Docker Hub); set"
        " cuda_full (e.g. 13.5.0)",
        replace(WHEEL, torch="2.99.0", cuda="13.5", allow_unknown=True, cuda_full="13.5.0"),
    ),
    (
        rules.cuda_patch_is_the_base_toolkit,
        replace(WHEEL, cuda_written="12.1.9"),
        "CUDA 12.1.9 is not the toolkit imagekit builds CUDA 12.1 on (nvidia/cuda 12.1.1); write"
        " cuda: 12.1, or set cuda_full: 12.1.9",
        replace(WHEEL, cuda_written="12.1.9", cuda_full="12.1.9"),
    ),
    (
        rules.base_brings_that_python,
        replace(WHEEL, base_python="3.11"),
        "brings Python 3.11, not 3.10",
        replace(WHEEL, base_python="3.10"),
    ),
    (
        rules.os_packages_python,
        replace(WHEEL, python="3.12"),
        "ubuntu22.04's packages carry Python 3.10, 3.11, not 3.12",
        replace(WHEEL, python="3.12", base_python="3.12"),
    ),
    (
        rules.torch_supports_python,
        replace(WHEEL, python="3.13"),
        "torch 2.1 publishes wheels for Python 3.8 to 3.11, not 3.13",
        replace(WHEEL, python="3.11"),
    ),
    (
        rules.companions_pair,
        replace(WHEEL, torchvision="0.14.0"),
        "torchvision 0.14.0 does not pair with torch 2.1.2: its torchvision is 0.16.2",
        replace(WHEEL, torchvision="0.16.2", torchaudio="none"),
    ),
    (
        rules.base_serves_flavour,
        replace(WHEEL, base_flavours=("runtime",)),
        "serves only runtime",
        replace(WHEEL, base_flavours=("runtime", "devel")),
    ),
    (
        rules.stack_keeps_its_cuda,
        replace(STACK, asked_cuda="11.8"),
        "never crosses the CUDA axis, so CUDA 11.8 cannot exist",
        replace(STACK, asked_cuda="12.2.2"),
    ),
    (
        rules.stack_keeps_its_torch,
        replace(STACK, asked_torch="2.1.2"),
        "would replace NVIDIA's build",
        replace(STACK, asked_torch=NGC.torch),
    ),
    (
        rules.stack_keeps_its_python,
        replace(STACK, asked_python="3.11"),
        "it has no Python 3.11",
        replace(STACK, asked_python="3.10"),
    ),
    (
        rules.stack_extras_from_an_index,
        replace(STACK, pip_packages=("numpy",), wheelhouse=True),
        "a wheelhouse build stage cannot reach",
        replace(STACK, pip_packages=("numpy",)),
    ),
    (
        rules.stack_has_no_frontend,
        replace(STACK, frontend="jupyter"),
        "imagekit adds a jupyter front end only to images with its own venv",
        replace(STACK, frontend="none"),
    ),
    (
        rules.torch_has_platform_wheel,
        replace(WHEEL, torch="2.10.0", cuda="12.1", platform="linux/arm64"),
        "torch 2.10 has no aarch64 CUDA 12.1 wheel (its aarch64 wheels: CUDA 12.6, 12.8, 12.9, 13.0",
        replace(WHEEL, torch="2.10.0", cuda="12.8", platform="linux/arm64"),
    ),
    (
        rules.torch_has_platform_wheel,
        replace(WHEEL, torch="2.5.1", cuda="12.1", platform="linux/arm64"),
        "its aarch64 wheels: CPU only",
        replace(WHEEL, torch="2.5.1", cuda="cpu", platform="linux/arm64"),
    ),
    (
        # PyPI's aarch64 2.10.0 is CPU in effect (every CUDA requirement gated to x86_64)
        rules.pypi_serves_one_variant,
        replace(WHEEL, torch="2.10.0", cuda="12.8", platform="linux/arm64", torch_source="pypi"),
        "whose aarch64 torch 2.10 is the cpu build, not cu128",
        replace(WHEEL, torch="2.10.0", cuda="cpu", platform="linux/arm64", torch_source="pypi"),
    ),
    (
        rules.stack_serves_platform,
        replace(STACK, platform="linux/arm64"),
        "it is published for linux/amd64, not linux/arm64",
        STACK,
    ),
    (
        rules.stack_serves_flavour,
        replace(STACK, flavour="runtime"),
        "it has no runtime flavour (only devel)",
        STACK,
    ),
]


@pytest.mark.parametrize(
    ("rule", "refused", "reason", "admitted"), CASES, ids=lambda v: getattr(v, "__name__", "")
)
def test_each_rule_refuses_with_its_reason_and_admits_the_fixed_request(
    rule: rules.Rule, refused: Request, reason: str, admitted: Request
) -> None:
    found = rule(refused, COMPAT)
    assert found is not None and reason in found
    assert rule(admitted, COMPAT) is None


def test_a_cuda_minor_nvidia_publishes_for_amd64_only_refuses_arm64() -> None:
    # every CUDA minor of the shipped table has arm64 tags: a table where 12.1 has none
    amd64_only = COMPAT.cuda["12.1"].model_copy(update={"platforms": ("linux/amd64",)})
    compat = dataclasses.replace(COMPAT, cuda={**COMPAT.cuda, "12.1": amd64_only})
    on_cuda = replace(WHEEL, image="nvidia/cuda:{cuda_full}-devel-ubuntu22.04", platform="linux/arm64")
    reason = rules.nvidia_cuda_serves_platform(on_cuda, compat)
    assert reason == "nvidia/cuda publishes CUDA 12.1 for linux/amd64, not linux/arm64"
    assert rules.nvidia_cuda_serves_platform(replace(on_cuda, platform="linux/amd64"), compat) is None
    assert rules.nvidia_cuda_serves_platform(on_cuda, COMPAT) is None
    # a local base that carries CUDA is not nvidia/cuda's to refuse
    assert rules.nvidia_cuda_serves_platform(replace(on_cuda, image="site/cuda:{cuda}"), compat) is None


# rules whose refusal needs facts the shipped table does not hold: a test of their own, above
OWN_TESTS = {rules.nvidia_cuda_serves_platform}


def test_every_rule_is_in_an_order_and_has_a_case() -> None:
    ordered = set(rules.WHEEL_RULES) | set(rules.STACK_RULES)
    assert {case[0] for case in CASES} | OWN_TESTS == ordered
    assert all(rule.__doc__ or rule.__name__ for rule in ordered)


def test_the_first_refusal_wins() -> None:
    # torch 2.6 has no cu121 wheel, and ubuntu22.04 has no Python 3.13: the torch rule comes first
    request = replace(WHEEL, torch="2.6.0", python="3.13")
    assert "no CUDA 12.1 wheel" in (rules.first_refusal(rules.WHEEL_RULES, request, COMPAT) or "")


# -- the rules through a whole plan ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "cuda", "reason"),
    [
        ("2.9.1", "11.8", "torch 2.9 has no CUDA 11.8 wheel (its wheels: CUDA 12.6, 12.8, 12.9, 13.0)"),
        ("2.6.0", "12.1", "torch 2.6 has no CUDA 12.1 wheel"),
        ("2.0.1", "12.1", "torch 2.0 has no CUDA 12.1 wheel"),
        ("2.1.9", "12.1", "torch 2.1.9 is not a 2.1 release (its patches: 2.1.0, 2.1.1, 2.1.2)"),
        ("2.15.5", "13.2", "torch 2.15.5 is a patch missing from imagekit's compatibility table"),
        ("2.16", "13.2", "so its latest patch is unknown; write the full version (2.16.0)"),
        ("2.16.0", "13.2", "torch 2.16.0 is newer than imagekit's compatibility table"),
        ("2.12.0", "12.1", "torch 2.12 has no CUDA 12.1 wheel (its wheels: CUDA 12.6, 13.0, 13.2)"),
        # CUDA 12.9 wheels were dropped in 2.12 (pytorch issue 187834)
        ("2.12.1", "12.9", "torch 2.12 has no CUDA 12.9 wheel (its wheels: CUDA 12.6, 13.0, 13.2)"),
        ("2.13.0", "12.9", "torch 2.13 has no CUDA 12.9 wheel (its wheels: CUDA 12.6, 13.0, 13.2)"),
        ("2.15.0", "12.8", "torch 2.15 has no CUDA 12.8 wheel (its wheels: CUDA 13.0, 13.2)"),
        ("1.13.1", "11.7", "torch 1.13.1 is not a release imagekit knows"),
    ],
)
def test_impossible_cells_are_refused(
    torch: str, cuda: str, reason: str, write_matrix: Callable[[str], Path]
) -> None:
    # torch 2.7.1 on CUDA 12.6 makes the matrix buildable (a matrix of refusals alone is an error)
    path = write_matrix(f'axes:\n  torch: ["{torch}", "2.7.1"]\n  cuda: ["{cuda}", "12.6"]\n' + CUDA_BASE)
    plan = load_plan(path)
    reasons = [
        r.reason for r in plan.refused if r.combination["torch"] == torch and r.combination["cuda"] == cuda
    ]
    assert reasons and reason in reasons[0]


@pytest.mark.parametrize(("torch", "cuda"), [("2.9.1", "12.9"), ("2.10.0", "12.9"), ("2.15.0", "13.0")])
def test_corrected_variants_are_admitted(torch: str, cuda: str, write_matrix: Callable[[str], Path]) -> None:
    """torch-2.9.1+cu129 exists (x86_64 and aarch64); 2.15 publishes cu130 beside cu132."""
    axes = f'axes:\n  torch: ["{torch}"]\n  cuda: ["{cuda}"]\n  python: ["3.12"]\n'
    path = write_matrix(axes + CUDA_BASE.replace("ubuntu22.04", "ubuntu24.04"))
    assert [(c.torch, c.cuda) for c in load_plan(path).cells] == [(torch, cuda)]


def test_ngc_never_crosses_the_cuda_axis(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  base: [ngc]\n  cuda: ["11.8", "12.2"]\nbases:\n  ngc: {stack: ngc-pytorch-23.10}\n'
        + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    assert [c.cuda_full for c in plan.cells] == ["12.2.2"]
    assert "never crosses the CUDA axis, so CUDA 11.8 cannot exist" in plan.refused[0].reason


def test_ngc_refuses_runtime_and_other_torch(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        "axes:\n  base: [ngc]\n  flavour: [devel, runtime]\n  torch: [2.1.0a0+32f93b1, 2.1.2]\n"
        "bases:\n  ngc: {stack: ngc-pytorch-23.10}\n" + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    assert len(plan.cells) == 1 and plan.cells[0].torch == "2.1.0a0+32f93b1"
    reasons = " | ".join(r.reason for r in plan.refused)
    assert "no runtime flavour" in reasons and "would replace NVIDIA's build" in reasons


def test_allow_unknown_admits_with_warning(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.16.0"]\n  cuda: ["13.2"]\n'
        "defaults: {torchvision: '0.30.0', torchaudio: none}\n" + CUDA_BASE
    )
    plan = load_plan(path)
    (cell,) = plan.cells
    assert cell.torchvision == "0.30.0" and cell.torchaudio is None
    assert any("admitted by allow_unknown" in w for w in plan.warnings)
    # a combination the table knows is impossible stays refused, escape hatch or not
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.9.1"]\n  cuda: ["11.8", "12.8"]\n' + CUDA_BASE
    )
    assert "no CUDA 11.8 wheel" in load_plan(path).refused[0].reason


def test_python_refusals(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2", "2.4.1"]\n  cuda: ["12.1"]\n  python: ["3.10", "3.12"]\n'
        + CUDA_BASE
        + WAIVE_OLD_TORCH
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
        + WAIVE_TORCH_2_5
    )
    plan = load_plan(path)
    assert sorted((c.base, c.cuda) for c in plan.cells) == [("cuda", "12.1"), ("deb", "cpu")]
    reasons = " | ".join(r.reason for r in plan.refused)
    assert "a cpu build belongs on a base without it" in reasons and "has no CUDA toolkit" in reasons


def test_minor_means_latest_patch(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('axes:\n  torch: ["2.1"]\n  cuda: ["12.1"]\n' + CUDA_BASE + WAIVE_OLD_TORCH)
    (cell,) = load_plan(path).cells
    assert (cell.torch, cell.torchvision, cell.torchaudio) == ("2.1.2", "0.16.2", "2.1.2")


def test_allow_unknown_admits_a_new_patch_of_a_known_release(write_matrix: Callable[[str], Path]) -> None:
    # newer than the newest the table knows (2.15.0): a release the table has not caught up with
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.15.5"]\n  cuda: ["13.2"]\n  python: ["3.11"]\n' + CUDA_BASE
    )
    (cell,) = load_plan(path).cells
    assert isinstance(cell, WheelCell)
    assert cell.torch == "2.15.5" and cell.numpy_cap is None


def test_allow_unknown_never_admits_a_patch_missing_from_the_table(
    write_matrix: Callable[[str], Path],
) -> None:
    path = write_matrix(
        'allow_unknown: true\naxes:\n  torch: ["2.1.9", "2.1.2"]\n  cuda: ["12.1"]\n'
        + CUDA_BASE
        + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    assert [c.torch for c in plan.cells] == ["2.1.2"]
    assert "allow_unknown admits only releases newer than the table's newest" in plan.refused[0].reason


@pytest.mark.parametrize(
    ("cuda", "cuda_full", "admitted", "reason"),
    [
        (
            "12.1.9",
            None,
            False,
            "CUDA 12.1.9 is not the toolkit imagekit builds CUDA 12.1 on (nvidia/cuda 12.1.1)",
        ),
        ("12.1.1", None, True, ""),
        ("12.1", None, True, ""),
        ("12.1.9", "12.1.9", True, ""),
        ("12.1.9", "12.1.0", False, "cuda 12.1.9 and cuda_full 12.1.0 name two toolkits"),
    ],
)
def test_a_cuda_patch_is_never_silently_another(
    cuda: str, cuda_full: str | None, admitted: bool, reason: str, write_matrix: Callable[[str], Path]
) -> None:
    # cuda_full only on the cells of that CUDA value (include extends what it matches)
    defaults = f'include:\n  - {{cuda: "{cuda}", cuda_full: "{cuda_full}"}}\n' if cuda_full else ""
    path = write_matrix(
        f'axes:\n  torch: ["2.1.2", "2.5.1"]\n  cuda: ["{cuda}", "12.4"]\n'
        + defaults
        + CUDA_BASE
        + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    built = {c.cuda_full for c in plan.cells if c.cuda == "12.1"}
    if admitted:
        assert built == {cuda_full or "12.1.1"}
    else:
        assert not built and reason in plan.refused[0].reason


@pytest.mark.parametrize(
    "requirement", ["torch==2.0.0", "Torch", "TORCH>=2", "torch[opt-einsum]", "TorchVision", "torchaudio<3"]
)
def test_pip_packages_never_name_torch_or_its_companions(
    requirement: str, write_matrix: Callable[[str], Path]
) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n'
        f'defaults: {{pip_packages: ["numpy<2", "{requirement}"]}}\n' + CUDA_BASE
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    assert f"pip_packages lists {requirement}: torch, torchvision and torchaudio come from the matrix" in (
        result.stderr
    )


def test_cuda_full_must_belong_to_the_cells_cuda(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.5.1"]\n  cuda: ["11.8", "12.1"]\ndefaults: {cuda_full: "12.1.1"}\n'
        + CUDA_BASE
        + WAIVE_TORCH_2_5
    )
    plan = load_plan(path)
    assert [c.cuda for c in plan.cells] == ["12.1"]
    assert "cuda_full 12.1.1 is not a CUDA 11.8 release" in plan.refused[0].reason


def test_without_a_torch_index_only_pypis_build_exists(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["11.8", "12.1"]\n'
        + CUDA_BASE
        + "sources: {pip: {torch_index_url: null}}\n"
        + WAIVE_OLD_TORCH
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


# -- build settings ----------------------------------------------------------------------------------

CREDENTIALS = "sources:\n  pip:\n    credentials:\n      - {host: pypi.example.org, login: ci-reader, secret: pip-index}\n"  # noqa: E501


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            CREDENTIALS,
            "sources.pip.credentials: index credentials need the BuildKit builder (build.builder: buildkit"
            " or --builder buildkit): the classic builder would keep them in a layer",
        ),
        (
            "build: {compression: zstd}\n",
            "build.compression: zstd applies to the BuildKit builder's staged images; set build.builder:"
            " buildkit (or --builder buildkit), or compression: gzip",
        ),
    ],
)
def test_classic_builder_refuses_credentials_and_zstd_in_one_line(
    settings: str, message: str, write_matrix: Callable[[str], Path]
) -> None:
    path = write_matrix('axes: {torch: ["2.14.1"], cuda: ["12.6"], base: [cuda]}\n' + settings + CUDA_BASE)
    result = run_cli("render", "--matrix", str(path), "--check")
    assert result.exit_code == 2
    assert result.stderr == f"imagekit: error: {path}: {message}\n"
    # the same matrix for BuildKit: accepted (from the command line or the matrix)
    assert "error" not in run_cli("render", "--matrix", str(path), "--builder", "buildkit").stderr
    build = load_plan(path).matrix.build
    rules.check_build_settings(load_plan(path).matrix, build.model_copy(update={"builder": "buildkit"}), "m")
    with pytest.raises(InputError, match=r"^m: (sources\.pip\.credentials|build\.compression): "):
        rules.check_build_settings(load_plan(path).matrix, build, "m")
