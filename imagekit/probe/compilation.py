"""compile and extension: torch.compile and a C++/CUDA extension, built in bounded children, with a
diagnosis of the toolchain when a build fails."""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from typing import Any

from . import extension, prebuilt
from .context import Context, torch_skip
from .protocol import FAIL, PASS, SKIP
from .results import CheckResult, skipped
from .tasks import COMPILE_TIMEOUT_S, EXTENSION_TIMEOUT_S, PREBUILT_TIMEOUT_S, run_task


def toolchain(env: dict[str, str]) -> dict[str, Any]:
    """What torch.compile and cpp_extension need from the image: a C++ and a C compiler (inductor
    builds C++ on the CPU, Triton a C launcher on the GPU) and the interpreter's Python.h."""
    path = env.get("PATH", os.defpath)

    def first(*names: str | None) -> str | None:
        for name in names:
            if name:
                found = shutil.which(name.split()[0], path=path)
                if found:
                    return found
        return None

    include = sysconfig.get_paths().get("include") or ""
    header = os.path.join(include, "Python.h") if include else ""
    return {
        "cxx": first(env.get("CXX"), "g++", "c++", "clang++"),
        "cc": first(env.get("CC"), "gcc", "cc", "clang"),
        "python_h": header if header and os.path.exists(header) else None,
        "python_include": include or None,
        "python": "{}.{}".format(*sys.version_info[:2]),
    }


COMPILER_MISSING = re.compile(
    r"(InvalidCxxCompiler|No working C compiler|Failed to find C compiler|[gc]\+\+: not found|gcc: not found"
    r"|\bcc: not found|No such file or directory: '(?:g\+\+|gcc|c\+\+|cc|clang\+?\+?)'|compiler.*not found)",
    re.IGNORECASE,
)
PYTHON_H_MISSING = re.compile(r"Python\.h: No such file|fatal error: Python\.h", re.IGNORECASE)
# dlopen of a freshly compiled .so on a noexec mount (Docker mounts --tmpfs noexec by default).
NOEXEC = re.compile(r"failed to map segment from shared object|mounted with noexec", re.IGNORECASE)
NVCC_MISMATCH = re.compile(
    r"detected CUDA version \(([\d.]+)\) mismatches the version that was used to compile", re.I
)


def diagnose_build(
    what: str, outcome: dict[str, Any], tools: dict[str, Any], needs: str, timeout: float
) -> tuple[str, str]:
    """(cause, fix) for a failed torch.compile / extension child, naming the missing piece."""
    result = outcome.get("result") or {}
    text = "\n".join(
        str(x) for x in (result.get("error"), result.get("traceback"), outcome.get("output_tail")) if x
    )
    python_dev = f"python{tools['python']}-dev"
    compiler_fix = (
        "install a compiler in the image: apt-get install -y g++ (or build-essential); or set CXX/CC"
    )
    header_fix = (
        f"install the Python headers for this interpreter: apt-get install -y {python_dev} (Debian/Ubuntu; "
        f"they belong in {tools.get('python_include')})"
    )
    if outcome.get("timed_out"):
        return (
            f"{what} did not finish within {timeout:.0f} s (killed)",
            "give the check more CPU time; see the output tail in the detail",
        )
    if result.get("missing") == "TORCH_CUDA_ARCH_LIST":
        return (
            f"{what}: TORCH_CUDA_ARCH_LIST is unset and no GPU is visible, so torch's _get_cuda_arch_flags "
            "has no architecture to build for (pytorch issue 137261: a `docker build` that compiles a CUDA "
            f"extension fails the same way): {result.get('error')}",
            "set it in the image to the wheel's arch list: ENV TORCH_CUDA_ARCH_LIST=... (imagekit's devel "
            "images do, from imagekit/data/gpus.yaml; NGC's do)",
        )
    if result.get("missing") == "ninja":
        return (
            f"{what}: ninja is missing (torch.utils.cpp_extension.load_inline builds with it)",
            "install it in the image: pip install ninja (or apt-get install -y ninja-build)",
        )
    mismatch = NVCC_MISMATCH.search(text)
    if mismatch:
        return (
            f"{what}: nvcc is CUDA {mismatch.group(1)}, not the CUDA torch was built with: torch's extension "
            "builder refuses a differing major",
            "use the -devel base of torch's CUDA version (nvcc at /usr/local/cuda/bin/nvcc)",
        )
    compiler = tools.get("cxx") if needs == "cxx" else tools.get("cc")
    if COMPILER_MISSING.search(text) or compiler is None:
        looked = "CXX, g++, c++, clang++" if needs == "cxx" else "CC, gcc, cc, clang"
        return (f"{what}: no C/C++ compiler in the image (looked for {looked} on PATH)", compiler_fix)
    if PYTHON_H_MISSING.search(text) or tools.get("python_h") is None:
        return (f"{what}: Python.h missing (no {tools.get('python_include')}/Python.h)", header_fix)
    if NOEXEC.search(text):
        return (
            f"{what}: the temporary directory is mounted noexec, and the library it compiled must be"
            " loaded from there (failed to map segment)",
            "give the container an exec /tmp (`docker run --tmpfs /tmp:exec`; `imagekit verify` does)"
            " or point TMPDIR at an exec mount",
        )
    first_line = (result.get("error") or outcome.get("output_tail") or "no output").strip().splitlines()
    return (
        f"{what} failed: {first_line[0][:400] if first_line else 'no output'} (exit {outcome.get('rc')})",
        "see the output tail in the check's detail",
    )


def _torch_at_least(torch: Any, major: int, minor: int) -> bool:
    match = re.match(r"^(\d+)\.(\d+)", str(torch.__version__))
    if match is None:
        return False
    return (int(match.group(1)), int(match.group(2))) >= (major, minor)


def gpu_part(ctx: Context, name: str) -> dict[str, Any] | None:
    """The GPU policy for the GPU part of a CPU+GPU check: None to run it, else the part's verdict."""
    gate = ctx.gpu_gate(name)
    if gate is not None:
        if gate.status == FAIL:
            return {"status": FAIL, "cause": gate.cause, "fix": gate.fix}
        return {"status": SKIP, "reason": gate.reason}
    if not ctx.torch.cuda.is_available():
        return {
            "status": FAIL,
            "cause": "a GPU is visible but torch.cuda.is_available() is False (see cuda_available)",
            "fix": "fix cuda_available first",
        }
    return None


def combine_parts(
    name: str, parts: dict[str, dict[str, Any]], detail: dict[str, Any], required: bool
) -> CheckResult:
    """One check from its parts (cpu, cuda:N, ...): any failed part fails it; passes when at least one
    part passed and none failed; otherwise skip with the parts' reasons."""
    detail = {**detail, "parts": parts}
    actual = {key: part["status"] for key, part in parts.items()}
    bad = {key: part for key, part in parts.items() if part["status"] == FAIL}
    if bad:
        return CheckResult(
            name,
            FAIL,
            required=required,
            expected=dict.fromkeys(parts, PASS),
            actual=actual,
            detail=detail,
            cause="; ".join(f"[{key}] {part.get('cause')}" for key, part in bad.items()),
            fix="; ".join(dict.fromkeys(str(part.get("fix")) for part in bad.values())),
        )
    if any(part["status"] == PASS for part in parts.values()):
        return CheckResult(name, PASS, required=required, actual=actual, detail=detail)
    reasons = "; ".join(f"[{key}] {part.get('reason')}" for key, part in parts.items())
    return CheckResult(name, SKIP, required=required, reason=reasons, actual=actual, detail=detail)


def build_part(
    ctx: Context,
    task: str,
    key: str,
    what: str,
    needs: str,
    timeout: float,
    tools: dict[str, Any],
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One compile/extension run in its child process, as a part: pass, or fail with the missing piece."""
    outcome = run_task(ctx, task, key, timeout, extra_env)
    result = outcome["result"] or {}
    part: dict[str, Any] = {k: v for k, v in result.items() if k != "traceback"}
    part["seconds"] = outcome["seconds"]
    if result.get("ok"):
        part["status"] = PASS
    else:
        cause, fix = diagnose_build(what, outcome, tools, needs, timeout)
        part.update({"status": FAIL, "cause": cause, "fix": fix, "output_tail": outcome["output_tail"]})
    return part


def check_compile(ctx: Context) -> CheckResult:
    skip = torch_skip(ctx, "compile")
    if skip:
        return skip
    torch = ctx.torch
    if not _torch_at_least(torch, 2, 0) or not hasattr(torch, "compile"):
        return skipped("compile", f"torch {torch.__version__} has no torch.compile (needs >= 2.0)")
    # Required in every flavour: runtime images carry the compiler and Python.h torch.compile needs.
    required = True
    tools = toolchain(ctx.env)
    detail: dict[str, Any] = {"toolchain": tools, "timeout_s": COMPILE_TIMEOUT_S}
    parts: dict[str, dict[str, Any]] = {}
    devices = [("cpu", "inductor C++ on the CPU", "cxx")]
    gpu = gpu_part(ctx, "compile")
    if gpu is None:
        devices.append(("cuda:0", "inductor Triton on GPU 0", "cc"))
    else:
        parts["cuda"] = gpu
    for device, what, needs in devices:
        parts[device] = build_part(
            ctx, "compile", device, f"torch.compile ({what})", needs, COMPILE_TIMEOUT_S, tools
        )
    return combine_parts("compile", parts, detail, required)


PREBUILT_HOW = "loaded the module built at image build time (check.py build-extensions), not rebuilt"
FRESH_BUILD_DIR = "a fresh directory under the temporary directory (a cached build would prove nothing)"


def _toolchain_gone(tools: dict[str, Any], env: dict[str, str], kind: str) -> str | None:
    """Why a build-time module may not stand for this image's toolchain: the check proves the image
    can build an extension, so where a piece is gone now (a derived image removed it) it builds here
    and names what is missing. None when every piece is still there."""
    path = env.get("PATH", os.defpath)
    missing = [
        piece
        for piece, there in (
            ("a C++ compiler", tools.get("cxx")),
            ("Python.h", tools.get("python_h")),
            ("ninja", shutil.which("ninja", path=path)),
            ("nvcc", extension.nvcc_path(env) if kind == "cuda" else "not needed"),
        )
        if not there
    ]
    return f"no {', '.join(missing)} in the image now: built here to show it" if missing else None


def _prebuilt_part(
    ctx: Context, key: str, what: str, found: prebuilt.Usable, extra_env: dict[str, str] | None
) -> tuple[dict[str, Any] | None, str | None]:
    """(the part, None) from the build-time module; (None, why) when it did not load (then it is built)."""
    outcome = run_task(ctx, "extension_prebuilt", key, PREBUILT_TIMEOUT_S, extra_env)
    result = outcome["result"] or {}
    if not result.get("loaded"):
        if outcome["timed_out"]:
            return None, f"loading {found.path} did not finish within {PREBUILT_TIMEOUT_S:.0f} s"
        error = result.get("error") or (outcome["output_tail"] or "no output").strip()[-400:]
        return None, f"did not load: {error}"
    part: dict[str, Any] = {k: v for k, v in result.items() if k not in ("traceback", "loaded")}
    part.update(how=PREBUILT_HOW, build_s_saved=found.module.build_s, seconds=outcome["seconds"])
    if result.get("ok"):
        part["status"] = PASS
    else:
        part.update(
            status=FAIL,
            cause=f"{what}, built at image build time, loaded but failed: {result.get('error')}",
            fix="see the part's detail; a damaged module is rebuilt by rebuilding the image",
            output_tail=outcome["output_tail"],
        )
    return part, None


def extension_part(
    ctx: Context,
    task: str,
    key: str,
    what: str,
    tools: dict[str, Any],
    extra_env: dict[str, str] | None,
    found: prebuilt.Usable | str,
) -> dict[str, Any]:
    """One part of the extension check: the build-time module loaded and run where it is this
    image's own and loads, else built here as a task (``prebuilt`` says why it was not used)."""
    kind = "cpu" if key == "cpu" else "cuda"
    why = found if isinstance(found, str) else _toolchain_gone(tools, ctx.env, kind)
    if isinstance(found, prebuilt.Usable) and why is None:
        part, why = _prebuilt_part(ctx, key, what, found, extra_env)
        if part is not None:
            return part
    part = build_part(ctx, task, key, what, "cxx", EXTENSION_TIMEOUT_S, tools, extra_env)
    part["prebuilt"] = f"not used: {why}"
    return part


def _prebuilt_summary(parts: dict[str, dict[str, Any]], root: str) -> dict[str, Any]:
    """The detail's account of the build-time modules: which parts loaded them, what that saved."""
    loaded = [key for key, part in parts.items() if part.get("how") == PREBUILT_HOW]
    built = {key: part["prebuilt"] for key, part in parts.items() if "prebuilt" in part}
    saved = [float(parts[key]["build_s_saved"]) for key in loaded]
    return {
        "directory": root,
        "loaded": loaded,
        "built_here": built,
        "build_s_saved": round(sum(saved), 1) if saved else None,
    }


def check_extension(ctx: Context) -> CheckResult:
    flavour = ctx.expect.flavour
    if flavour is None:
        return skipped("extension", "no flavour given (extensions are checked in devel images)")
    if flavour == "runtime":
        return skipped(
            "extension", "runtime flavour: no compiler toolchain expected, extensions are not built"
        )
    skip = torch_skip(ctx, "extension")
    if skip:
        return skip
    tools = toolchain(ctx.env)
    nvcc = extension.nvcc_path(ctx.env)
    found = prebuilt.usable(ctx.env, prebuilt.current_key(ctx.torch, ctx.env))
    detail: dict[str, Any] = {
        "toolchain": tools,
        "nvcc": nvcc,
        "timeout_s": EXTENSION_TIMEOUT_S,
        "TORCH_EXTENSIONS_DIR": ctx.env.get("TORCH_EXTENSIONS_DIR"),
        "TORCH_CUDA_ARCH_LIST": ctx.env.get("TORCH_CUDA_ARCH_LIST"),
    }
    parts: dict[str, dict[str, Any]] = {}
    runs: list[tuple[str, str, str, dict[str, str] | None]] = [
        ("extension_cpu", "cpu", "a C++ extension (load_inline)", None)
    ]
    no_cuda = None
    if nvcc is None:
        no_cuda = "no nvcc in the image (PATH, /usr/local/cuda/bin)"
    elif ctx.expect.is_cpu or not ctx.torch.version.cuda:
        no_cuda = "torch is a CPU build: no CUDA extension to build"
    gpu = gpu_part(ctx, "extension")
    if gpu is not None:
        parts["cuda"] = gpu
    elif no_cuda:
        parts["cuda"] = {"status": SKIP, "reason": no_cuda}
    else:
        runs.append(("extension_cuda", "cuda:0", "a CUDA extension (load_inline, nvcc)", None))
    # Built once with no GPU visible, as a downstream `docker build` does: TORCH_CUDA_ARCH_LIST must
    # name the architectures (pytorch issue 137261). Runs with and without a GPU on the machine; a
    # devel image built it so at image build time, and then it is loaded with no GPU visible.
    if no_cuda:
        parts["cuda-no-gpu"] = {"status": SKIP, "reason": no_cuda}
    else:
        hidden = {"CUDA_VISIBLE_DEVICES": ""}
        runs.append(
            ("extension_cuda_nogpu", "cuda-no-gpu", "a CUDA extension built with no GPU visible", hidden)
        )
    for task, key, what, extra_env in runs:
        module = found["cpu" if key == "cpu" else "cuda"]
        parts[key] = extension_part(ctx, task, key, what, tools, extra_env, module)
    detail["prebuilt"] = _prebuilt_summary(parts, prebuilt.directory(ctx.env))
    if detail["prebuilt"]["built_here"]:
        detail["build_dir"] = FRESH_BUILD_DIR
    return combine_parts("extension", parts, detail, True)
