"""Where the probe looks for CUDA libraries (imagekit/probe/libraries.py): pip wheels' CUDA 12 and
CUDA 13 layouts, read from the real wheels' file lists."""

from __future__ import annotations

from pathlib import Path

from imagekit.probe import libraries
from tests.unit.probe_runs import fixture


def install_listing(root: Path, listing: str) -> None:
    """Lay out a wheel's files (empty) under a fake site-packages, from `unzip -Z1` of the wheel."""
    for line in fixture(listing).splitlines():
        if line and not line.endswith("/"):
            path = root / line
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def test_cuda_13_wheels_share_one_lib_directory(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for name in (
        "wheel-files-nvidia_cuda_runtime-13.0.96.txt",
        "wheel-files-nvidia_cublas-13.1.0.3.txt",
        "wheel-files-nvidia_cudnn_cu13-9.20.0.48.txt",
        "wheel-files-nvidia_nccl_cu13-2.29.7.txt",
    ):
        install_listing(site, name)
    libs = libraries.pip_cuda_libraries([str(site)])
    assert [Path(p).relative_to(site).as_posix() for p in libs["cudart"]] == [
        "nvidia/cu13/lib/libcudart.so.13"
    ]
    assert "nvidia/cu13/lib/libcublas.so.13" in [Path(p).relative_to(site).as_posix() for p in libs["cublas"]]
    cudnn = [Path(p).relative_to(site).as_posix() for p in libs["cudnn"]]
    assert cudnn == ["nvidia/cudnn/lib/libcudnn.so.9"]  # the libcudnn_*.so.9 sub-libraries beside it
    assert [Path(p).relative_to(site).as_posix() for p in libs["nccl"]] == ["nvidia/nccl/lib/libnccl.so.2"]
    candidates = libraries.cudart_candidates("13", [str(site)])
    assert candidates[:3] == ["libcudart.so", "libcudart.so.13", "libcudart.so.13.0"]
    assert candidates[3:] == [str(site / "nvidia/cu13/lib/libcudart.so.13")]
    assert libraries.cudart_candidates("12", [str(site)])[3:] == []  # a CUDA 13 runtime is not a 12 one


def test_cuda_12_wheel_layout_still_found(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    install_listing(site, "wheel-files-nvidia_cuda_runtime_cu12-12.8.90.txt")
    assert libraries.cudart_candidates("12", [str(site)])[3:] == [
        str(site / "nvidia/cuda_runtime/lib/libcudart.so.12")
    ]


def test_pip_cudnn_header_of_the_cu13_wheel(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    install_listing(site, "wheel-files-nvidia_cudnn_cu13-9.20.0.48.txt")
    header = site / "nvidia/cudnn/include/cudnn_version.h"
    header.write_text(fixture("cudnn-version-h-9.20.0-cu13-wheel.txt"), encoding="utf-8")
    assert libraries.pip_cudnn_header([str(site)]) == ("9.20.0", str(header))


def test_cuda_toolkit_metapackage_names_unsuffixed_wheels() -> None:
    """torch >= 2.12 takes the runtime through cuda-toolkit[cudart]: no -cu13 suffix any more."""
    requires = fixture("cuda-toolkit-13.0.2-requires-cudart-cublas-nvrtc.txt")
    assert "nvidia-cuda-runtime==13.0.96.*" in requires and "-cu13" not in requires
    assert "nvidia-cuda-runtime (CUDA 13" in libraries.cudart_package("13")
    assert libraries.cudart_package("12") == "nvidia-cuda-runtime-cu12"
