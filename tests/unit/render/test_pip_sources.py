"""pip's index options in a cell's steps: torch from its variant's index (or from the index of
everything else where PyTorch's build bundles nothing to split), everything else from the matrix's
index, a wheelhouse offline, and the trusted hosts and extra indexes in both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import Matrix
from imagekit.render.pip_sources import uses_wheelhouse_for, variant_pip_arguments
from imagekit.render.run_options import WHEELHOUSE_DIR, StepOptions
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import REPO

MATRIX = """
version: 1
axes: {torch: ["2.1.2"], cuda: [cpu], base: [deb], flavour: [runtime]}
defaults: {torchvision: none, torchaudio: none}
bases:
  deb: {image: "imagekit-local/debian-python:bookworm", os: debian12, python: "3.11", cuda: false}
"""


def matrix_of(write_matrix: Callable[[str], Path], sources: str) -> Matrix:
    return load_plan(write_matrix(MATRIX + sources + WAIVE_OLD_TORCH)).matrix


def arguments(matrix: Matrix, variant: str = "cu121", **flags: bool) -> tuple[list[str], list[str]]:
    return variant_pip_arguments(matrix, variant, StepOptions.of(matrix, matrix.build), **flags)


def test_torch_comes_from_its_variants_index_and_the_rest_from_pypi() -> None:
    matrix = load_plan(REPO / "matrix.yaml").matrix
    torch, rest = arguments(matrix, wheelhouse=False)
    assert torch[-2:] == ["--index-url", "https://download.pytorch.org/whl/cu121"]
    assert "--index-url" not in rest and "--disable-pip-version-check" in rest
    assert arguments(matrix, "cpu", wheelhouse=False)[0][-1] == "https://download.pytorch.org/whl/cpu"
    # torch from PyPI (PyTorch's index bundles CUDA it cannot split): no PyTorch index at all
    from_pypi, _ = arguments(matrix, wheelhouse=False, torch_from_pypi=True)
    assert "--index-url" not in from_pypi


def test_the_matrixs_index_hosts_and_extra_indexes_reach_both(write_matrix: Callable[[str], Path]) -> None:
    matrix = matrix_of(
        write_matrix,
        "sources:\n  pip:\n    index_url: https://pypi.example.org/simple\n"
        "    extra_index_urls: [https://extra.example.org/simple]\n    trusted_hosts: [pypi.example.org]\n",
    )
    torch, rest = arguments(matrix, wheelhouse=False)
    for args in (torch, rest):
        assert args[args.index("--trusted-host") + 1] == "pypi.example.org"
        assert args[args.index("--extra-index-url") + 1] == "https://extra.example.org/simple"
    assert rest[rest.index("--index-url") + 1] == "https://pypi.example.org/simple"
    assert torch[torch.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu121"
    from_pypi, _ = arguments(matrix, wheelhouse=False, torch_from_pypi=True)
    assert from_pypi[from_pypi.index("--index-url") + 1] == "https://pypi.example.org/simple"


def test_a_wheelhouse_offline_asks_no_index(write_matrix: Callable[[str], Path], tmp_path: Path) -> None:
    (tmp_path / "wheelhouse").mkdir()
    matrix = matrix_of(
        write_matrix, "sources:\n  pip: {no_index: true, find_links: [wheelhouse], torch_index_url: null}\n"
    )
    assert uses_wheelhouse_for(matrix, stack=False) and not uses_wheelhouse_for(matrix, stack=True)
    for args in arguments(matrix, wheelhouse=True):
        assert "--no-index" in args and "--index-url" not in args
        assert args[args.index("--find-links") + 1] == WHEELHOUSE_DIR
    without = load_plan(REPO / "matrix.yaml").matrix
    assert not uses_wheelhouse_for(without, stack=False)
