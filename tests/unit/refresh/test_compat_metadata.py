"""imagekit.refresh.compat_metadata: requirement and specifier texts, wheel file names, an index's
project page, the build a wheel's Requires-Dist makes it on a machine."""

from __future__ import annotations

import pytest

from imagekit.refresh.compat_metadata import (
    admits,
    by_cuda,
    cuda_build,
    exact_pin,
    index_variants,
    parse_listing,
    parse_requirement,
    parse_wheel,
    torch_requirement,
    variant_of,
)
from imagekit.refresh.pip_report import RefreshError


def test_requirements_and_specifiers() -> None:
    assert parse_requirement("torch (==2.9.1)").specifier == "==2.9.1"
    assert parse_requirement("torch (>=2.14.0)").specifier == ">=2.14.0"
    assert torch_requirement(["numpy", "scipy ; extra == 'scipy'"]) is None
    assert torch_requirement(["torch>=2.11"]) == ">=2.11"
    assert admits(">=2.14.0", "2.15.0") and not admits(">=2.14.0", "2.13.0")
    assert admits(">=3.10,!=3.14.1", "3.14.2") and not admits(">=3.10,!=3.14.1", "3.14.1")
    assert admits("==2.1.*", "2.1.2") and admits("~=2.1", "2.9") and not admits("~=2.1", "3.0")
    assert exact_pin("==2.10.0") == "2.10.0" and exact_pin(">=2.10") is None
    assert variant_of("13.0.96") == "cu130" and variant_of("11.7.99") == "cu117"


ARM_2_10 = [  # torch 2.10.0's aarch64 wheel (recorded): every CUDA requirement gated to x86_64
    'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux" and platform_machine == "x86_64"',
    'triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"',
    "optree>=0.13.0; extra == 'optree'",
]


ARM_2_15 = [  # torch 2.15.0's: CUDA 13 through the cuda-toolkit metapackage, on every Linux
    'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
]


def test_the_build_a_wheel_is_in_effect_comes_from_its_markers() -> None:
    assert cuda_build(ARM_2_10, "3.12", "aarch64") == "cpu"
    assert cuda_build(ARM_2_10, "3.12", "x86_64") == "cu128"  # the same metadata on x86_64
    assert cuda_build(ARM_2_15, "3.12", "aarch64") == "cu132"
    old_pythons_only = ["nvidia-cuda-runtime-cu12==12.8.90; python_version < '3.13'"]
    assert cuda_build(old_pythons_only, "3.12", "aarch64") == "cu128"
    assert cuda_build(old_pythons_only, "3.13", "aarch64") == "cpu"  # the Python is evaluated too
    assert cuda_build(["filelock", "numpy; extra == 'numpy'"], "3.12", "aarch64") == "cpu"
    with pytest.raises(RefreshError, match="pins no CUDA toolkit or runtime version"):
        cuda_build(ARM_2_15[2:], "3.12", "aarch64")  # cuDNN for CUDA 13, but which 13.x?


def test_wheel_names() -> None:
    wheel = parse_wheel("torch-2.10.0-3-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert (wheel.version, wheel.python, wheel.machines) == ("2.10.0", (3, 12), {"x86_64"})
    assert parse_wheel("torch-2.15.0-cp314-cp314t-manylinux_2_28_x86_64.whl").python is None
    assert parse_wheel("torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl").machines == {"aarch64"}
    old_arm = parse_wheel("torch-2.5.1-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl")
    assert old_arm.machines == {"aarch64"}
    assert not parse_wheel("torch-2.5.1-cp312-none-macosx_11_0_arm64.whl").machines
    local = parse_wheel("torch-2.12.1+cu132-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert local.version == "2.12.1+cu132"


def test_an_html_index_page_is_read() -> None:
    # The shape of a PEP 503 page such as download.pytorch.org/whl/torch/ (made up for the test).
    page = (
        b"<html><body>\n"
        b'<a href="/whl/cu130/torch-2.12.1%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=00" '
        b'data-requires-python="&gt;=3.10">torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl</a><br/>\n'
        b'<a href="/whl/cu126/torch-2.12.1%2Bcu126-cp312-cp312-manylinux_2_28_x86_64.whl" data-yanked="">'
        b"torch-2.12.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl</a>\n</body></html>"
    )
    files = parse_listing(page, "text/html")
    assert files[0] == {
        "filename": "torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "requires-python": ">=3.10",
        "yanked": False,
    }
    assert files[1]["yanked"] is True
    names = [f["filename"] for f in files]
    assert index_variants(names, "torch", {"2.12.1"}) == {"cu126", "cu130"}
    assert by_cuda({"cu130", "cu126", "cu132"}) == ["cu126", "cu130", "cu132"]
    arm = [
        "torch-2.12.1+cpu-cp312-cp312-manylinux_2_28_aarch64.whl",
        "torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_aarch64.whl",
        "torch-2.12.1-cp312-cp312-manylinux_2_28_aarch64.whl",  # PyPI's wheel, mirrored: no variant
        "torch-2.12.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.12.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    assert index_variants(arm, "torch", {"2.12.1"}, "aarch64") == {"cpu", "cu130"}
    assert index_variants(arm, "torch", {"2.12.1"}) == {"cu126"}  # x86_64: CUDA variants only
    assert by_cuda({"cu130", "cpu", "cu128"}) == ["cpu", "cu128", "cu130"]
