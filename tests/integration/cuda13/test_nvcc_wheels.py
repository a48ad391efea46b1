"""The nvcc-wheels example for real (issue 36, "Once"): torch 2.15.0's CUDA 13.2 libraries and the
CUDA 13.2 compiler from NVIDIA's PyPI wheels of one release, on the plain Debian base. No GPU here,
and none is needed: the image builds the extension check's CUDA module with the wheels' nvcc while
it is built; the test then compiles another .cu in the finished image, loads both next to torch and
reads what the probe's libraries_once check reads: one path per CUDA library in the process, and
no CUDA library's soname in two files of the image.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import REPO_ROOT, example_project, remove_built
from tests.integration.test_cuda_wheels import checks_of

EXAMPLE = REPO_ROOT / "examples" / "nvcc-wheels"
HOME = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"
# Run in the image with the checkout's probe mounted at /ik (read-only; standard library only).
PROVE = r"""
import glob, importlib.util, json, subprocess, sys, tempfile
sys.path.insert(0, "/ik")
import torch
from torch.utils import cpp_extension
from imagekit.probe.inventory import loaded_cuda_libraries
from imagekit.probe.sharedlibs import CUDA_SONAME, SCAN_SKIP, loaded_twice, mount_points, scan, scan_roots
source = r'''
#include <torch/extension.h>
__global__ void add_one(float* x, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.f;
}
void launch(torch::Tensor x) {
  add_one<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel());
}
'''
module = cpp_extension.load_inline("once_cuda_ext", cpp_sources="void launch(torch::Tensor x);",
    cuda_sources=source, functions=["launch"], build_directory=tempfile.mkdtemp())
for path in sorted(glob.glob("/opt/imagekit/extensions/*.so")):
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[1].split(".")[0], path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
loaded = loaded_cuda_libraries()
found = scan(scan_roots(), SCAN_SKIP | mount_points())
print(json.dumps({
    "cuda_home": cpp_extension.CUDA_HOME, "torch_cuda": torch.version.cuda,
    "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout,
    "extension": module.__file__,
    "ldd": subprocess.run(["ldd", module.__file__], capture_output=True, text=True).stdout,
    "loaded": loaded, "loaded_twice": loaded_twice(loaded),
    "cuda_duplicates": sorted(n for n in found["duplicates"] if CUDA_SONAME.fullmatch(n)),
    "duplicates": found["duplicates"], "count": found["count"],
}))
"""


@pytest.fixture(scope="module")
def nvcc_wheels(
    api: docker.APIClient, debian_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """The example's matrix built under the test's own image name; (its directory, the image)."""
    root = example_project(
        EXAMPLE,
        tmp_path_factory.mktemp("nvcc-wheels"),
        "imagekit-examples/pytorch-nvcc-wheels",
        f"imagekit-test/nvcc-wheels-{RUN_ID}",
    )
    done = imagekit(
        "build", "--matrix", "matrix.yaml", "--builder", "buildkit",
        "--label", f"{TEST_LABEL}={RUN_ID}", cwd=root, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (cell,) = json.loads((root / ".imagekit" / "report.json").read_text())["cells"]
    yield root, cell["image_id"]
    remove_built(api, root)


def test_the_compiler_and_the_libraries_are_one_release_each_once(nvcc_wheels: tuple[Path, str]) -> None:
    _root, image = nvcc_wheels
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "TORCH_CUDA_ARCH_LIST=9.0",
         "-v", f"{REPO_ROOT / 'imagekit'}:/ik/imagekit:ro",
         image, "python3", "-c", PROVE],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["cuda_home"] == HOME and found["torch_cuda"] == "13.2"
    assert "release 13.2" in found["nvcc"]
    # the extension links cudart (no RPATH: torch has loaded the wheel's copy when it is imported)
    assert "libcudart.so.13 =>" in found["ldd"]
    # torch's libraries and the extensions': each mapped from one file, all of them the wheels'
    assert found["loaded_twice"] == {}
    assert f"{HOME}/lib/libcudart.so.13" in found["loaded"]
    site = "/opt/venv/lib/python3.11/site-packages/nvidia/"
    assert all(path.startswith(site) for path in found["loaded"]), found["loaded"]
    # no CUDA library twice in the image (the rest, e.g. libgomp from torch and from g++, is a figure)
    assert found["cuda_duplicates"] == [], found["duplicates"]


def test_verify_reads_the_wheels_nvcc_and_one_copy(nvcc_wheels: tuple[Path, str]) -> None:
    root, _image = nvcc_wheels
    done = imagekit("verify", "--matrix", "matrix.yaml", "--gpus", "none", "--json", cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _result, checks = checks_of(done)
    assert (checks["nvcc"]["status"], checks["nvcc"]["actual"][:4]) == ("pass", "13.2"), checks["nvcc"]
    # a report holds a check's detail as JSON text
    assert json.loads(checks["nvcc"]["detail"])["path"] == f"{HOME}/bin/nvcc"
    assert checks["libraries_once"]["status"] == "pass", checks["libraries_once"]
