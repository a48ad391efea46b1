"""pip's index options for a cell's steps: torch's (its variant's index, or PyPI's where PyTorch's
index's build bundles CUDA: ``imagekit.render.layers.torch_from_pypi``) and everything else's."""

from __future__ import annotations

from typing import Protocol

from imagekit.core import naming
from imagekit.core.platforms import PlatformName
from imagekit.plan.cells import Cell, StackCell, WheelCell
from imagekit.plan.schema import Matrix
from imagekit.render.layers import IndexCudaWheels, index_cuda_wheels, torch_from_pypi
from imagekit.render.run_options import WHEELHOUSE_DIR, StepOptions


class _Build(Protocol):
    """What the CUDA-wheel decision reads of a cell (a ``WheelCell`` or a recipe's ``StepInputs``)."""

    @property
    def is_cuda(self) -> bool: ...
    @property
    def torch(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def platform(self) -> PlatformName: ...


def uses_wheelhouse(cell: Cell, matrix: Matrix) -> bool:
    """Whether ``cell`` installs from the matrix's wheelhouse; a fixed stack installs into its own
    Python, with no wheelhouse stage and no venv to carry over."""
    return uses_wheelhouse_for(matrix, stack=isinstance(cell, StackCell))


def uses_wheelhouse_for(matrix: Matrix, stack: bool) -> bool:
    return bool(matrix.sources.pip.find_links) and not stack


def pip_arguments(
    cell: Cell, matrix: Matrix, options: StepOptions | None = None
) -> tuple[list[str], list[str]]:
    """pip's options for torch (its variant's index) and for everything else, in this cell."""
    options = options or StepOptions.of(matrix, matrix.build)
    wheelhouse = uses_wheelhouse(cell, matrix)
    from_pypi = isinstance(cell, WheelCell) and torch_from_pypi(
        cell_cuda_wheels(cell, matrix, wheelhouse, False)
    )
    return variant_pip_arguments(
        matrix, cell.variant, options, wheelhouse=wheelhouse, torch_from_pypi=from_pypi
    )


def cell_cuda_wheels(cell: _Build, matrix: Matrix, wheelhouse: bool, stack: bool) -> IndexCudaWheels | None:
    """The table's word on the CUDA wheels of a CUDA cell that installs torch from an index (the
    matrix's torch_index_url: PyTorch's; else PyPI's); None for a wheelhouse, a stack or CPU."""
    pip = matrix.sources.pip
    from_index = cell.is_cuda and not (stack or wheelhouse or pip.no_index)
    return (
        index_cuda_wheels(cell.torch, cell.variant, cell.platform, bool(pip.torch_index_url))
        if from_index
        else None
    )


def variant_pip_arguments(
    matrix: Matrix, variant: str, options: StepOptions, *, wheelhouse: bool, torch_from_pypi: bool = False
) -> tuple[list[str], list[str]]:
    """``torch_from_pypi``: torch comes from the index of everything else (``PinnedCudaWheels``)."""
    pip = matrix.sources.pip
    common: list[str] = [*options.pip_cache_dir_flag, "--disable-pip-version-check"]
    for host in pip.trusted_hosts:
        common += ["--trusted-host", host]
    if wheelhouse:
        common += ["--find-links", WHEELHOUSE_DIR]
    torch_args = list(common)
    extra_args = list(common)
    if pip.no_index:
        torch_args.append("--no-index")
        extra_args.append("--no-index")
    else:
        if pip.torch_index_url and not torch_from_pypi:
            index = naming.fill_placeholders(
                pip.torch_index_url, {"variant": variant}, "sources.pip.torch_index_url"
            )
            torch_args += ["--index-url", index]
        elif pip.index_url:
            torch_args += ["--index-url", pip.index_url]
        if pip.index_url:
            extra_args += ["--index-url", pip.index_url]
        for url in pip.extra_index_urls:
            torch_args += ["--extra-index-url", url]
            extra_args += ["--extra-index-url", url]
    return torch_args, extra_args
