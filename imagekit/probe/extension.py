"""The extension check's test module: its C++ and CUDA sources, how it is built (load_inline), loaded
from a built library, and exercised. The check builds it at verify time in a task child
(``tasks``); a devel image builds it once at image build time (``prebuilt``). Both build from
these very sources through ``build_module``, so ``source_digest`` says which sources a module has.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
from typing import Any

# What a module's build depends on besides the sources: the module names load_inline binds and
# writes PyInit_<name> for, and how it is called (a change to build_module bumps this).
BUILD_RECIPE = "load_inline v1: cpp_sources, cuda_sources, functions; no extra flags"

EXT_CPP = """
#include <torch/extension.h>
torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
  auto ac = a.contiguous().to(torch::kFloat);
  auto bc = b.contiguous().to(torch::kFloat);
  auto out = torch::empty_like(ac);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const float s = static_cast<float>(alpha);
  for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + s * pb[i];
  return out;
}
"""
EXT_CUDA_DECL = "torch::Tensor scaled_add_cuda(torch::Tensor a, torch::Tensor b, double alpha);"
EXT_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void scaled_add_kernel(const float* a, const float* b, float* out, float alpha, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + alpha * b[i];
}
torch::Tensor scaled_add_cuda(torch::Tensor a, torch::Tensor b, double alpha) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.sizes() == b.sizes(), "CUDA tensors of one shape expected");
  auto ac = a.contiguous().to(torch::kFloat);
  auto bc = b.contiguous().to(torch::kFloat);
  auto out = torch::empty_like(ac);
  const int64_t n = ac.numel();
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  scaled_add_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                                        static_cast<float>(alpha), n);
  cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
  return out;
}
"""
CPU_FUNCTION = "scaled_add"
CUDA_FUNCTION = "scaled_add_cuda"


def function_name(cuda: bool) -> str:
    return CUDA_FUNCTION if cuda else CPU_FUNCTION


def source_digest() -> str:
    """sha256 of everything a built module depends on in this probe: a module whose manifest names
    another digest was built from other sources and is never loaded for this check."""
    parts = (BUILD_RECIPE, EXT_CPP, EXT_CUDA_DECL, EXT_CUDA, CPU_FUNCTION, CUDA_FUNCTION)
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def nvcc_path(env: dict[str, str]) -> str | None:
    """nvcc on PATH, else where CUDA images keep it."""
    found = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if found is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        found = "/usr/local/cuda/bin/nvcc"
    return found


def missing_ninja(cpp_extension: Any) -> dict[str, Any] | None:
    """A task result naming ninja when load_inline cannot build (it refuses without it), else None."""
    if cpp_extension.is_ninja_available():
        return None
    return {"ok": False, "missing": "ninja", "error": "ninja is not available (load_inline needs it)"}


def arch_flags(cpp_extension: Any) -> tuple[list[str] | None, dict[str, Any] | None]:
    """torch's nvcc arch flags, or a failed task result: with no GPU visible they come from
    TORCH_CUDA_ARCH_LIST alone, and without it _get_cuda_arch_flags raises (pytorch issue 137261)."""
    try:
        return list(cpp_extension._get_cuda_arch_flags()), None
    except Exception as exc:
        return None, {
            "ok": False,
            "missing": None if os.environ.get("TORCH_CUDA_ARCH_LIST") else "TORCH_CUDA_ARCH_LIST",
            "error": f"_get_cuda_arch_flags() with no GPU visible raised {type(exc).__name__}: {exc}",
        }


def build_module(cpp_extension: Any, cuda: bool, name: str, build_dir: str) -> Any:
    """Build (and import) the module ``name`` in ``build_dir``: ``build_dir/<name>.so``."""
    if cuda:
        return cpp_extension.load_inline(
            name=name,
            cpp_sources=[EXT_CUDA_DECL],
            cuda_sources=[EXT_CUDA],
            functions=[CUDA_FUNCTION],
            build_directory=build_dir,
            verbose=False,
        )
    return cpp_extension.load_inline(
        name=name, cpp_sources=[EXT_CPP], functions=[CPU_FUNCTION], build_directory=build_dir, verbose=False
    )


def load_module(name: str, path: str) -> Any:
    """Import a built module from its library file, as load_inline itself imports what it built
    (torch must be imported first: the library needs torch's own libraries in the process). Nothing
    is built, locked or written: the file may sit on a read-only root."""
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def exercise(torch: Any, module: Any, cuda: bool) -> dict[str, Any]:
    """Call the module's function on fixed inputs and compare with torch's own result."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4097, generator=gen)
    b = torch.randn(4097, generator=gen)
    if cuda:
        a, b = a.cuda(), b.cuda()
        got = module.scaled_add_cuda(a, b, 0.5)
        torch.cuda.synchronize()
    else:
        got = module.scaled_add(a, b, 0.5)
    ref = a + 0.5 * b
    max_err = float((got - ref).abs().max().item())
    close = bool(torch.allclose(got, ref, rtol=1e-6, atol=1e-6))
    result: dict[str, Any] = {"ok": close, "max_abs_error": max_err}
    if not close:
        result["error"] = f"the extension's result differs (max abs error {max_err:.3g})"
    return result
