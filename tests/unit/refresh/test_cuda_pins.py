"""imagekit.refresh.cuda_pins: the CUDA pins of one torch build from pip's report, and the build
its CUDA runtime says it is."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.refresh.cuda_pins import Build, built_for, exact_cuda_pins, pins_of
from imagekit.refresh.pip_report import RefreshError


def report(*installs: tuple[str, str, list[str]], machine: str = "x86_64") -> dict[str, Any]:
    environment = {"platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux"}
    environment |= {"python_version": "3.12", "python_full_version": "3.12.0", "os_name": "posix"}
    environment |= {"implementation_name": "cpython", "platform_python_implementation": "CPython"}
    environment |= {"platform_release": "", "platform_version": "", "implementation_version": "3.12.0"}
    return {
        "environment": environment,
        "install": [{"metadata": {"name": n, "version": v, "requires_dist": r}} for n, v, r in installs],
    }


def test_only_exact_pins_reached_from_torch_are_kept() -> None:
    found = exact_cuda_pins(
        report(
            ("torch", "2.15.0", ["cuda-toolkit[cublas]==13.2.2; platform_system == 'Linux'",
                                 "nvidia-nccl-cu13==2.30.7", "triton==3.6.0", "cuda-bindings<14,>=13.0.3",
                                 "nvidia-cufile==1.0; platform_machine == 'riscv64'"]),
            ("cuda-toolkit", "13.2.2", ["nvidia-cublas==13.4.1.3.*; extra == 'cublas'",
                                        "nvidia-cufft==12.2.0.57.*; extra == 'cufft'"]),
            ("nvidia-cublas", "13.4.1.3", ["nvidia-cuda-nvrtc"]),
            ("nvidia-cuda-nvrtc", "13.2.86", []),
            ("nvidia-nccl-cu13", "2.30.7", []),
            ("triton", "3.6.0", []),
            ("cuda-bindings", "13.5.0", []),
        )
    )  # fmt: skip
    # the extra asked for is followed, the other is not; a range, a non-CUDA pin and a marker for
    # another machine are left to torch's own step
    assert found == ("cuda-toolkit==13.2.2", "nvidia-cublas==13.4.1.3", "nvidia-nccl-cu13==2.30.7")


def test_a_report_that_contradicts_a_pin_is_refused() -> None:
    bad = report(("torch", "2.1.2", ["nvidia-cudnn-cu12==8.9.2.26"]), ("nvidia-cudnn-cu12", "9.1.0.70", []))
    with pytest.raises(RefreshError, match="does not install"):
        exact_cuda_pins(bad)
    with pytest.raises(RefreshError, match="not a pip installation report"):
        exact_cuda_pins({"install": [{"name": "torch"}]})


def test_the_build_is_read_from_its_cuda_runtime() -> None:
    build = Build("2.5.1", "cu121", "x86_64", "3.10", "2.35", "https://pypi.org/simple")
    pypi = report(
        ("torch", "2.5.1", ["nvidia-cuda-runtime-cu12==12.4.127"]),
        ("nvidia-cuda-runtime-cu12", "12.4.127", []),
    )
    assert built_for(pypi) == "cu124"
    with pytest.raises(RefreshError, match="as a cu124 build, not cu121"):
        pins_of(build, pypi)
    assert built_for(report(("torch", "2.9.1", []))) == "cpu"


def test_an_open_requirement_takes_the_pinned_toolkits_own_version() -> None:
    """nvshmem asks for any cccl and the index's newest is 13.3; cuda-toolkit 13.2.2 pins 13.2.86 under
    its `cccl` extra: the layer gets the toolkit's, so the devel cell's compiler extras fit the pins.
    A range in the toolkit (nvjitlink) leaves the requirement open."""
    found = exact_cuda_pins(
        report(
            ("torch", "2.15.0", ["cuda-toolkit[cufft]==13.2.2", "nvidia-nvshmem-cu13==3.7.2"]),
            ("cuda-toolkit", "13.2.2", ["nvidia-cufft==12.2.0.57.*; extra == 'cufft'",
                                        "nvidia-nvjitlink<14,>=13.2.86; extra == 'cufft'",
                                        "nvidia-cuda-cccl==13.2.86.*; extra == 'cccl'",
                                        "nvidia-cuda-nvcc==13.2.86.*; extra == 'nvcc'",
                                        "nvidia-cudla==13.2.86.*; platform_machine == 'aarch64'"
                                        " and extra == 'cudla'"]),
            ("nvidia-cufft", "12.2.0.57", ["nvidia-nvjitlink"]),
            ("nvidia-nvjitlink", "13.5.37", []),
            ("nvidia-nvshmem-cu13", "3.7.2", ["nvidia-cuda-cccl"]),
            ("nvidia-cuda-cccl", "13.3.5.0.6", []),
            ("nvidia-cudla", "13.2.86", []),  # as if a dependency had brought it
        )
    )  # fmt: skip
    # nvcc is not installed (the compiler is the devel cell's own step); cudla is for another machine
    assert found == (
        "cuda-toolkit==13.2.2",
        "nvidia-cuda-cccl==13.2.86",
        "nvidia-cufft==12.2.0.57",
        "nvidia-nvshmem-cu13==3.7.2",
    )
