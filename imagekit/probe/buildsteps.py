"""Build steps: what a Dockerfile runs with the probe while the image is built (``protocol.BUILD_STEPS``).

``build-guard`` fails the build unless the installed torch is the cell's build; ``pins`` prints the
constraints file every later ``pip install`` in the image obeys; ``freeze`` prints every installed
distribution, which a front end's build stage holds fixed while it adds its packages;
``build-extensions`` builds the extension check's modules into a devel image (``prebuilt``), so
verification on a GPU runner only loads them. They run in the image's own Python (the venv's, or a
stack's), so they import nothing the image may lack.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from importlib import metadata
from typing import Any

from . import extension, prebuilt
from .arguments import ArgumentError, Parser
from .compilation import diagnose_build, toolchain
from .protocol import (
    BUILD_EXTENSIONS,
    BUILD_GUARD,
    EXIT_BAD_ARGUMENTS,
    FREEZE,
    GUARD_CUDA_OPTION,
    GUARD_EXACT_OPTION,
    GUARD_TORCH_OPTION,
    PINS,
    PINS_EXTRA_OPTION,
)

# The distributions pinned for every later pip install: torch's family, and the CUDA libraries
# its wheel brought. CUDA 12 wheels are nvidia-<lib>-cu12; CUDA 13 ones are nvidia-<lib> without a
# suffix (nvidia-cublas, nvidia-cuda-runtime), nvidia-cudnn-cu13 and nvidia-nccl-cu13, pulled in
# through the cuda-toolkit metapackage with cuda-bindings: the prefixes cover both layouts.
PINNED_NAMES = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton")
PINNED_PREFIXES = ("nvidia-", "cuda-")


def build_guard(want: str, cuda: str, exact: bool) -> int:
    """0 when torch is ``want`` built for ``cuda``, else 1 with the reason on stderr.

    For a CUDA variant this is PyTorch's own release check (``torch.cuda._is_compiled()``, no GPU
    needed) plus the CUDA version torch was built for, which catches a wrong-variant wheel. A wheel
    cell names the public version (the index adds +cu121); a stack names its build exactly.
    """
    torch: Any = importlib.import_module("torch")  # no torch is a failed build: let it raise
    got = torch.__version__
    ok = got == want if exact else got.split("+")[0] == want
    if cuda != "cpu":
        ok = ok and torch.cuda._is_compiled()
        built = ".".join((torch.version.cuda or "").split(".")[:2])
        ok = ok and built == cuda
        expectation = f"built for CUDA {cuda}"
    else:
        ok = ok and torch.version.cuda is None
        expectation = "CPU build"
    if ok:
        return 0
    sys.stderr.write(f"torch is {got} (CUDA {torch.version.cuda}), expected {want} {expectation}\n")
    return 1


def pins(extra: list[str]) -> int:
    """Print the constraints file from what is installed, local versions included, then ``extra``.

    Pinning ``torch==2.1.2`` would still admit PyPI's 2.1.2 or a ``+cpu`` build; the installed
    ``2.1.2+cu121`` admits nothing else, and neither can a later install swap the cuDNN or NCCL
    wheel torch was built against. A NumPy cap stays too where torch needs NumPy 1.x.
    """
    found = {
        (d.metadata["Name"] or "").lower().replace("_", "-"): d.version for d in metadata.distributions()
    }
    pinned = sorted(
        f"{name}=={version}"
        for name, version in found.items()
        if name in PINNED_NAMES or name.startswith(PINNED_PREFIXES)
    )
    sys.stdout.write("\n".join(pinned + extra) + "\n")
    return 0


def freeze() -> int:
    """Print every installed distribution as ``name==version``, sorted (a front end installs its
    packages under these as constraints, so it can only add)."""
    found = {d.metadata["Name"] + "==" + d.version for d in metadata.distributions() if d.metadata["Name"]}
    sys.stdout.write("\n".join(sorted(found)) + "\n")
    return 0


# What each module is, in the one line a failed build prints (the check's own cause names it too).
EXTENSION_WHAT = {
    "cpu": "a C++ extension (load_inline)",
    "cuda": "a CUDA extension built with no GPU visible",
}


def build_extensions(env: dict[str, str]) -> int:
    """Build the extension check's modules into ``prebuilt.directory``: the CPU one always, the CUDA
    one where torch is a CUDA build and nvcc exists. 0 with one line on stdout saying what was built;
    else 1 with one line on stderr naming the missing piece (the check's own cause and fix), so the
    image build fails the way the check would at verify time.

    No GPU is made visible, whatever the machine: the CUDA module is built for TORCH_CUDA_ARCH_LIST,
    as a `docker build` builds it, and the manifest's arch list is then what it holds."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    torch: Any = importlib.import_module("torch")  # no torch is a failed build: let it raise
    cpp_extension: Any = importlib.import_module("torch.utils.cpp_extension")
    kinds = ["cpu"]
    no_cuda = ""
    if not torch.version.cuda:
        no_cuda = "; no CUDA module: torch is a CPU build"
    elif extension.nvcc_path(env) is None:
        no_cuda = "; no CUDA module: no nvcc (PATH, /usr/local/cuda/bin)"
    else:
        kinds.append("cuda")
    root = prebuilt.directory(env)
    built: dict[str, tuple[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="imagekit-extensions-") as scratch:
        for kind in kinds:
            result, library = prebuilt.build_one(cpp_extension, kind, scratch)
            if library is None:
                outcome = {"result": result, "rc": 1}
                cause, fix = diagnose_build(EXTENSION_WHAT[kind], outcome, toolchain(env), "cxx", 0)
                sys.stderr.write(f"check.py {BUILD_EXTENSIONS}: {cause}; fix: {fix}\n")
                return 1
            built[kind] = (library, float(result["build_s"]))
        prebuilt.install(root, prebuilt.current_key(torch, env), built)
    done = ", ".join(f"{kind} ({seconds:.1f} s)" for kind, (_, seconds) in built.items())
    sys.stdout.write(f"check.py {BUILD_EXTENSIONS}: built {done} into {root}{no_cuda}\n")
    return 0


def run_step(argv: list[str]) -> int:
    """``argv`` is ``[step, options...]``; the step's exit status (2 on bad arguments)."""
    step, options = argv[0], argv[1:]
    parser = Parser(prog=f"check.py {step}")
    try:
        if step == BUILD_GUARD:
            parser.add_argument(GUARD_TORCH_OPTION, required=True)
            parser.add_argument(GUARD_CUDA_OPTION, required=True)
            parser.add_argument(GUARD_EXACT_OPTION, action="store_true")
            ns = parser.parse_args(options)
            return build_guard(ns.torch, ns.cuda, ns.exact)
        if step == PINS:
            parser.add_argument(PINS_EXTRA_OPTION, action="append", default=[])
            ns = parser.parse_args(options)
            return pins(ns.extra)
        if step == FREEZE:
            parser.parse_args(options)
            return freeze()
        if step == BUILD_EXTENSIONS:
            parser.parse_args(options)
            return build_extensions(dict(os.environ))
        raise ArgumentError(f"unknown build step {step!r}")
    except ArgumentError as exc:
        sys.stderr.write(f"check.py {step}: bad arguments: {exc}\n")
        return EXIT_BAD_ARGUMENTS
