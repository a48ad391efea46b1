"""imagekit.refresh.pip_report: the one reader of the CUDA runtime in pip's reports, as both refresh
tools use it. Each spelling NVIDIA has given the runtime's wheel reads as the same build in both
(the CUDA wheel refresh read nvidia-cuda-runtime-cu13 as a CPU build; the compat refresh took
NVIDIA's warning placeholders, nvidia-cuda-runtime-cu116 0.0.1.dev5, for a runtime)."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.refresh.compat_metadata import cuda_build, libraries_from, variant_of
from imagekit.refresh.cuda_pins import built_for
from imagekit.refresh.pip_report import CUDA_RUNTIME_PROJECTS, RefreshError, cuda_runtime


def report(*installs: tuple[str, str]) -> dict[str, Any]:
    """A pip report, in the shape both tools read, of torch and ``installs``."""
    environment = {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux"}
    items = [("torch", "2.9.1"), *installs]
    return {
        "environment": environment,
        "install": [{"metadata": {"name": n, "version": v, "requires_dist": []}} for n, v in items],
    }


def compat_variant(pip_report: dict[str, Any]) -> str:
    """The build the compat refresh reads a report as: the variant of its cudart, cpu without."""
    cudart = libraries_from(pip_report).get("cudart")
    return variant_of(cudart) if cudart else "cpu"


SPELLINGS = {
    # CUDA 11: torch 1.13's cu117 and 2.0 ... 2.7's cu118 on PyPI and PyTorch's index
    "cu11x": ("nvidia-cuda-runtime-cu11", "11.8.89", "cu118"),
    "cu12x": ("nvidia-cuda-runtime-cu12", "12.4.127", "cu124"),
    "cu12x as the wheel's file name spells it": ("nvidia_cuda_runtime_cu12", "12.8.90", "cu128"),
    # CUDA 13: the suffix dropped (cuda-toolkit[cudart]==13.0.2 -> nvidia-cuda-runtime 13.0.96) ...
    "cu13x": ("nvidia-cuda-runtime", "13.0.96", "cu130"),
    # ... and the name it had before (on PyPI only a placeholder now; a mirror may hold 13.x under it)
    "cu13x suffixed": ("nvidia-cuda-runtime-cu13", "13.2.86", "cu132"),
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_of_the_runtime_is_the_same_build_in_both_tools(spelling: str) -> None:
    name, version, variant = SPELLINGS[spelling]
    pip_report = report((name, version), ("nvidia-cudnn-cu12", "9.1.0.70"))
    assert built_for(pip_report) == variant  # the CUDA wheel refresh
    assert compat_variant(pip_report) == variant  # the compat refresh
    assert libraries_from(pip_report)["cudart"] == version


@pytest.mark.parametrize("name", ["nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12"])
def test_a_requires_dist_pin_of_each_spelling_names_the_build(name: str) -> None:
    """The compat refresh reads an aarch64 wheel's build from its Requires-Dist: the same names."""
    version = "11.8.89" if name.endswith("cu11") else "12.8.90"
    assert cuda_build([f"{name}=={version}"], "3.12", "aarch64") == variant_of(version)
    suffixed = cuda_build(["nvidia-cuda-runtime-cu13==13.0.96"], "3.12", "aarch64")
    assert suffixed == "cu130"  # the regex before took any -cuNN; the list names -cu13


@pytest.mark.parametrize("placeholder", ["nvidia-cuda-runtime-cu110", "nvidia-cuda-runtime-cu116"])
def test_nvidias_warning_placeholders_are_no_runtime(placeholder: str) -> None:
    """nvidia-cuda-runtime-cu110 ... -cu116 are 0.0.1.dev5 packages that only refuse to install."""
    assert placeholder not in CUDA_RUNTIME_PROJECTS
    pip_report = report((placeholder, "0.0.1.dev5"))
    assert built_for(pip_report) == "cpu"
    assert "cudart" not in libraries_from(pip_report)


def test_a_runtime_of_another_major_than_its_name_states_is_refused() -> None:
    """PyPI's nvidia-cuda-runtime-cu13 is 0.0.1, "DEPRECATED: Use nvidia-cuda-runtime instead": no
    CUDA 13 runtime, in either tool (it was cpu to one and cu00 to the other)."""
    pip_report = report(("nvidia-cuda-runtime-cu13", "0.0.1"))
    for read in (built_for, libraries_from):
        with pytest.raises(RefreshError, match=r"nvidia-cuda-runtime-cu13 '0\.0\.1' is no CUDA 13 runtime"):
            read(pip_report)


def test_the_reader_takes_name_version_pairs() -> None:
    assert cuda_runtime([("torch", "2.9.1")]) is None
    assert cuda_runtime([("Nvidia.Cuda_Runtime-CU12", "12.1.105")]) == (
        "nvidia-cuda-runtime-cu12",
        "12.1.105",
    )
    with pytest.raises(RefreshError, match="names no CUDA minor version"):
        cuda_runtime([("nvidia-cuda-runtime-cu12", "12")])
    with pytest.raises(RefreshError, match="is no version"):
        cuda_runtime([("nvidia-cuda-runtime", "thirteen")])
