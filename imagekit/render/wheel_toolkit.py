"""A devel cell's CUDA compiler from NVIDIA's PyPI wheels (the base's ``nvcc: wheels``).

torch's CUDA 13 wheels pin their libraries through one metapackage, ``cuda-toolkit[cublas,cudart,
...]==X``; the same metapackage's ``nvcc``, ``crt``, ``nvvm`` and ``cccl`` extras hold the compiler
(bin/nvcc, cudafe++, fatbinary, nvlink, ptxas; nvvm/bin/cicc and libdevice; the crt headers; CCCL).
Asked for by name alongside torch, under the constraints file that pins what torch brought, pip can
only pick torch's own ``cuda-toolkit`` version: one project has one version in an environment. So the
compiler, cudart's headers and ``libcudadevrt.a`` are of the very release whose libraries torch loads,
each installed once, and no toolkit under /usr/local/cuda holds a second cuBLAS or cuFFT.

Every cu13 wheel installs into one prefix, ``site-packages/nvidia/cu13``, laid out as a toolkit
(bin/, include/, lib/, nvvm/): that prefix is CUDA_HOME. torch's extension builder links with
``-L$CUDA_HOME/lib -lcudart`` (it takes lib/ where lib64/ is absent), and the runtime wheel ships
``libcudart.so.13`` without the unversioned development link, so the image adds that link (a symlink:
still one file).
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.render.contract import VENV

# What a devel cell adds to its requirements; the version comes from the constraints file (torch's
# pin), and the layered closure resolves it together with torch (the same single version).
COMPILER_REQUIREMENT = "cuda-toolkit[nvcc,crt,nvvm,cccl]"
# The projects those extras add to torch's own CUDA wheels (nvidia-cuda-runtime, which the `nvcc`
# extra names too, is torch's `cudart` already): a layer of their own above the CUDA wheels, so a
# devel cell's CUDA layer stays the one its runtime twin and other cells of that torch share.
COMPILER_PROJECTS = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")


@dataclass(frozen=True)
class WheelToolkit:
    """Where the compiler wheels put the toolkit in the image, and the link torch's builder needs."""

    home: str  # CUDA_HOME: the wheels' shared prefix in the venv's site-packages
    cudart: str  # the runtime's versioned file name, which lib/libcudart.so points at

    @property
    def cudart_link(self) -> tuple[str, ...]:
        """The command that adds ``libcudart.so`` beside the versioned file (idempotent)."""
        return ("ln", "-sf", self.cudart, f"{self.home}/lib/libcudart.so")


def wheel_toolkit(python: str, cuda: str) -> WheelToolkit:
    """The toolkit of a venv of ``python`` whose CUDA wheels are of ``cuda``'s major (13.2 -> cu13)."""
    major = cuda.split(".", maxsplit=1)[0]
    home = f"{VENV}/lib/python{python}/site-packages/nvidia/cu{major}"
    return WheelToolkit(home=home, cudart=f"libcudart.so.{major}")
