"""What a cell's Dockerfile must do, decided in Python: the recipe the templates lay out.

Every decision lives here (what to install, from where, which pins, guards and labels); the
Jinja2 templates in ``dockerfiles/templates`` only arrange a ``Recipe``'s fields into lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.platforms import PlatformName
from imagekit.core.versions import project_key
from imagekit.facts.advisories import load_advisories
from imagekit.facts.probe_tables import wheel_arch_list
from imagekit.plan.cells import FrontendCell, ImageCell, StackCell, WheelCell
from imagekit.plan.schema import BuildSettings, Matrix
from imagekit.probe import protocol
from imagekit.render.contract import (
    CHECK_SCRIPT_CONTEXT,
    CHECK_SCRIPT_PATH,
    CONSTRAINT_ENV,
    CONSTRAINTS_FILE,
    FRONTEND,
    VENV,
    FrontendLayout,
)
from imagekit.render.layers import (
    BundledCudaWheels,
    IndexCudaWheels,
    PinnedCudaWheels,
    UnknownCudaWheels,
    WheelLayer,
    torch_from_pypi,
)
from imagekit.render.pip_sources import (
    cell_cuda_wheels,
    uses_wheelhouse,
    uses_wheelhouse_for,
    variant_pip_arguments,
)
from imagekit.render.run_options import (
    WHEELHOUSE_CONTEXT,
    WHEELHOUSE_DIR,
    StepOptions,
)
from imagekit.render.wheel_toolkit import COMPILER_REQUIREMENT, WheelToolkit, wheel_toolkit


@dataclass(frozen=True)
class ImageRuns:
    """What follows ``RUN`` in each step of a cell's Dockerfile (``imagekit.render.run_options``):
    empty for the classic builder; BuildKit's network and mounts."""

    mirror: str  # rewrites the apt sources
    apt: str  # installs the cell's OS packages
    toolchain: str  # installs the compiler and Python.h where the base lacks them
    torch: str  # installs torch
    venv: str  # creates the venv alone, when the closure is installed in layers (``WheelLayer``)
    venv_tools: str  # creates the venv and installs its pip and setuptools (``Recipe.venv_tools``)
    guard: str  # the build guard and the pins
    extra: str  # installs the cell's pip packages
    extension: str  # builds the extension check's modules


@dataclass(frozen=True)
class Recipe:
    matrix_name: str
    apt_packages: tuple[str, ...]
    apt_mirror: str | None
    apt_rewrites: tuple[tuple[str, str], ...]  # (archive URL, mirror URL), longest archive first
    python: str  # the interpreter that creates the venv
    venv: str | None  # None: the base's own Python environment (a fixed stack)
    # pip==X, setuptools==Y: installed right after the venv is made, so it never keeps the OS's
    # (Ubuntu 22.04's ensurepip: pip 22.0.2, setuptools 59.6.0); imagekit/data/advisories.yaml's
    # venv_tools, which the plan holds against the advisories. Empty for a fixed stack.
    venv_tools: tuple[str, ...]
    torch_pip_args: tuple[str, ...]
    torch_requirements: tuple[str, ...]
    extra_pip_args: tuple[str, ...]
    extra_requirements: tuple[str, ...]
    pins_command: tuple[str, ...]  # prints the constraints file
    constraints_dir: str
    constraints_file: str
    constraint_env: tuple[tuple[str, str], ...]  # each of pip's and uv's variables (CONSTRAINT_ENV): the file
    build_guard: tuple[str, ...]  # fails the build unless torch is the cell's build
    extension_build: tuple[str, ...]  # devel: builds the extension check's modules; () elsewhere
    wheelhouse: bool
    wheelhouse_stage: bool  # copied into a build stage (classic), else bound to its steps (BuildKit)
    wheelhouse_context: str
    wheelhouse_dir: str
    env: tuple[tuple[str, str], ...]
    nvidia_env: tuple[tuple[str, str], ...]  # what an image on a plain base needs to see a GPU
    arch_env: tuple[tuple[str, str], ...]  # devel: TORCH_CUDA_ARCH_LIST, the wheel's architectures
    toolchain: tuple[str, ...]  # compiler + Python.h packages an image on a base with its own Python may lack
    toolchain_probe: str  # Python that exits 0 when the base already has them
    build_args: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    check_script_context: str
    check_script_path: str
    run: ImageRuns
    apt_prelude: str  # what an apt step runs first ("" for the classic builder)
    apt_clean_lists: bool  # whether an apt step deletes its lists (not when they are a cache mount)
    apt_cleanup: str  # what an apt step runs last: removes its logs and caches (BuildKit)
    # BuildKit: the stage declares SOURCE_DATE_EPOCH (the RUN steps see it: py_compile then writes
    # checked-hash .pyc, not ones stamped with the build's time, which the rewritten file times
    # would leave stale) and the cell's build arguments only after the install steps, so those
    # steps' cache keys and environment are the same in every cell that shares them.
    reproducible: bool
    # The closure installed in layers (BuildKit, a resolved wheelhouse closure: the renderer
    # fills it in, ``wheel_layers``); empty: one install step.
    wheel_layers: tuple[WheelLayer, ...] = ()
    # devel with `nvcc: wheels`: the toolkit the compiler wheels make (``imagekit.render.wheel_toolkit``)
    wheel_toolkit: WheelToolkit | None = None
    # a CUDA cell with torch from an index: the CUDA wheels its build pins exactly, when the table
    # (``imagekit.facts.cuda_wheels``) knows them; None: torch from a wheelhouse, a stack, or CPU
    index_cuda_wheels: IndexCudaWheels | None = None

    @property
    def cuda_wheels(self) -> tuple[str, ...]:
        """The pins installed in a step of their own below torch; empty: one install step."""
        found = self.index_cuda_wheels
        return found.pins if isinstance(found, PinnedCudaWheels) else ()

    @property
    def cuda_wheels_missing(self) -> str | None:
        """The build whose CUDA wheels the table lacks, for the Dockerfile to say so."""
        found = self.index_cuda_wheels
        return found.build if isinstance(found, UnknownCudaWheels) else None

    @property
    def cuda_wheels_bundled(self) -> BundledCudaWheels | None:
        """The build whose wheel brings CUDA inside it (one step), for the Dockerfile to say so."""
        found = self.index_cuda_wheels
        return found if isinstance(found, BundledCudaWheels) else None


# -- what a cell's steps read ---------------------------------------------------------------------


class StepInputs(NamedTuple):
    """Everything of a cell its recipe's steps read: kind, versions, platform, what it adds, its OS
    archives. Cells that agree on these (one torch build on many bases, say) get the same steps,
    and ``Recipes`` makes them once. The step functions below are given this record and nothing
    else of the cell, so a step cannot come to depend on a field that the key lacks. A named tuple:
    made, hashed and compared per cell, at a third of a frozen dataclass's cost."""

    stack: bool  # a fixed stack (NGC): its own Python and torch, no venv
    python_from_base: bool  # the base brings the interpreter (a stack always does)
    python: str
    torch: str
    torchvision: str | None
    torchaudio: str | None
    numpy_cap: str | None
    cuda: str
    variant: str
    flavour: str
    platform: PlatformName
    os: str  # names its apt cache mounts
    base_carries_cuda: bool
    nvcc_from_wheels: bool  # devel: the compiler from NVIDIA's wheels at torch's CUDA pins
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    os_archives: tuple[tuple[str, str], ...]  # (archive URL, what follows the mirror's URL)

    @property
    def is_cuda(self) -> bool:
        return self.cuda != "cpu"


def step_inputs(cell: ImageCell, os_archives: tuple[tuple[str, str], ...]) -> StepInputs:
    return StepInputs(
        stack=isinstance(cell, StackCell),
        python_from_base=not isinstance(cell, WheelCell) or cell.python_from_base,
        python=cell.python,
        torch=cell.torch,
        torchvision=cell.torchvision,
        torchaudio=cell.torchaudio,
        numpy_cap=cell.numpy_cap,
        cuda=cell.cuda,
        variant=cell.variant,
        flavour=cell.flavour,
        platform=cell.platform,
        os=cell.os,
        base_carries_cuda=cell.base_carries_cuda,
        nvcc_from_wheels=isinstance(cell, WheelCell) and cell.nvcc_from_wheels,
        pip_packages=cell.pip_packages,
        apt_packages=cell.apt_packages,
        env=cell.env,
        os_archives=os_archives,
    )


def _probe_step(step: str, *options: str) -> tuple[str, ...]:
    """The command a Dockerfile runs for one of the probe's build steps: the image's own Python (the
    venv's, or a stack's) running the shipped probe, so no in-image Python is written here."""
    return ("python3", CHECK_SCRIPT_PATH, step, *options)


def _build_guard(cell: StepInputs) -> tuple[str, ...]:
    """Run right after the install: the build fails unless torch is the cell's build (for a CUDA
    variant PyTorch's own release check; ``imagekit.probe.buildsteps``). A stack names its torch
    build exactly; a wheel cell the public version its index adds a local part to."""
    exact = (protocol.GUARD_EXACT_OPTION,) if cell.stack else ()
    cuda = cell.cuda if cell.is_cuda else "cpu"
    options = (protocol.GUARD_TORCH_OPTION, cell.torch, protocol.GUARD_CUDA_OPTION, cuda, *exact)
    return _probe_step(protocol.BUILD_GUARD, *options)


def _extension_build(cell: StepInputs) -> tuple[str, ...]:
    """A devel image builds the extension check's modules while it is built, with no GPU (as any
    `docker build`), so verification on a GPU runner only loads and runs them
    (``imagekit.probe.prebuilt``); a missing toolchain piece fails the build, named as the check
    names it. Runtime images carry no extension toolchain to check."""
    return _probe_step(protocol.BUILD_EXTENSIONS) if cell.flavour == "devel" else ()


def project_name(requirement: str) -> str:
    """The normalised project name of a pip requirement: ``Torch_Vision[x]>=1`` -> ``torch-vision``."""
    return project_key(re.split(r"[\[<>=!~;@ ]", requirement, maxsplit=1)[0])


def _requirements(cell: StepInputs) -> tuple[str, ...]:
    pins = [f"torch=={cell.torch}"]
    if cell.torchvision:
        pins.append(f"torchvision=={cell.torchvision}")
    if cell.torchaudio:
        pins.append(f"torchaudio=={cell.torchaudio}")
    if cell.numpy_cap:
        pins.append(f"numpy{cell.numpy_cap}")
    elif (
        not cell.stack  # a stack brings its own NumPy
        and not cell.torchvision
        and "numpy" not in {project_name(p) for p in cell.pip_packages}
    ):
        # torch's own requirements name no NumPy (torchvision brings it): without one,
        # tensor.numpy() and DataLoader's collation of arrays raise "Numpy is not available"
        pins.append("numpy")
    return tuple(pins)


def _pins_command(cell: StepInputs) -> tuple[str, ...]:
    """Prints the constraints file: torch's family and its CUDA wheels as installed, local versions
    included (``imagekit.probe.buildsteps.pins``), and the cell's NumPy cap where torch needs 1.x."""
    extra = (protocol.PINS_EXTRA_OPTION, f"numpy{cell.numpy_cap}") if cell.numpy_cap else ()
    return _probe_step(protocol.PINS, *extra)


def require_cuda(cuda: str) -> str:
    """NVIDIA_REQUIRE_CUDA of a plain base: the CUDA version the runtime actually needs of the driver.
    Under minor-version compatibility a CUDA X.y wheel runs on any driver of the X.0 release or newer
    (compat.yaml's minor_floor: 450.80.02, 525.60.13, 580.65.06 are the 11.0, 12.0 and 13.0 drivers),
    so `cuda>=X.0`, the floor the driver check holds too. `cuda>=X.y` refused R525-R529 for cu121
    and R580/R590 for cu13x, which run those wheels."""
    return f"cuda>={cuda.split('.', maxsplit=1)[0]}.0"


def _nvidia_env(cell: StepInputs) -> tuple[tuple[str, str], ...]:
    """On a plain base the image must ask for the GPU itself: the container toolkit reads these.
    Unset capabilities mean `utility` alone on older runtimes (nvidia-docker2: nvidia-smi, no compute
    library mounted, torch sees no GPU; current toolkits default to utility,compute); nvidia/cuda
    images set them, and imagekit sets them on any other base."""
    if not cell.is_cuda or cell.base_carries_cuda:
        return ()
    return (
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
        ("NVIDIA_REQUIRE_CUDA", require_cuda(cell.cuda)),
    )


def _arch_env(cell: StepInputs) -> tuple[tuple[str, str], ...]:
    """A devel image builds CUDA extensions where no GPU is visible (a downstream `docker build`):
    torch's _get_cuda_arch_flags then needs TORCH_CUDA_ARCH_LIST (pytorch issue 137261; NGC sets it).
    The list PyTorch built this wheel variant with (imagekit/data/gpus.yaml); a cell's own wins."""
    if cell.flavour != "devel" or not cell.is_cuda or cell.stack:
        return ()
    if any(name == "TORCH_CUDA_ARCH_LIST" for name, _ in cell.env):
        return ()
    arch_list = wheel_arch_list(cell.variant, cell.torch, platforms.get(cell.platform).machine)
    return (("TORCH_CUDA_ARCH_LIST", arch_list),) if arch_list else ()


def _toolchain(cell: StepInputs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(OS packages to install, packages to install only where the base lacks them), in every
    flavour: torch.compile needs a compiler and Python.h (inductor builds C++ on the CPU; Triton
    compiles a C launcher against Python.h on the GPU), and compile is required of runtime images too
    (PyTorch's own runtime images had the same gap: pytorch issue 116696, PR 170235). Devel images
    also build extensions with them (cpp_extension)."""
    if cell.stack:
        return (), ()
    if cell.python_from_base:
        return (), ("g++", "python3-dev")
    return ("g++", f"python{cell.python}-dev"), ()


# Exits 0 when a C++ compiler and the interpreter's Python.h are there (offline bases bring them).
# The one in-image Python written here rather than a probe step: it runs in the OS step, before the
# probe is copied in (after the torch install, so that a change to the probe keeps those layers).
TOOLCHAIN_PROBE = (
    "import os, shutil, sys, sysconfig; "
    'sys.exit(0 if shutil.which("g++") and os.path.exists(os.path.join(sysconfig.get_paths()["include"],'
    ' "Python.h")) else 1)'
)


def _cuda_archs(cell: StepInputs) -> str:
    """The GPU architectures the cell's torch carries kernels for (its wheels' TORCH_CUDA_ARCH_LIST,
    a label for people and schedulers); empty for a CPU build and a stack's own build."""
    if cell.stack or not cell.is_cuda:
        return ""
    return wheel_arch_list(cell.variant, cell.torch, platforms.get(cell.platform).machine) or ""


# The label keys, each made once (a cell's labels are made per cell).
_OCI_TITLE = f"{naming.OCI_PREFIX}title"
_OCI_DESCRIPTION = f"{naming.OCI_PREFIX}description"
_OCI_VERSION = f"{naming.OCI_PREFIX}version"
_OCI_BASE_NAME = f"{naming.OCI_PREFIX}base.name"
_OCI_VENDOR = f"{naming.OCI_PREFIX}vendor"
_TORCH_LABEL = naming.label("torch")
_TORCHVISION_LABEL = naming.label("torchvision")
_TORCHAUDIO_LABEL = naming.label("torchaudio")
_CUDA_LABEL = naming.label("cuda")
_CUDA_FULL_LABEL = naming.label("cuda-full")
_CUDNN_LABEL = naming.label("cudnn")
_PYTHON_LABEL = naming.label("python")
_FLAVOUR_LABEL = naming.label("flavour")
_OS_LABEL = naming.label("os")
_BASE_IMAGE_LABEL = naming.label("base-image")
_VARIANT_LABEL = naming.label("variant")
_CUDA_ARCHS_LABEL = naming.label("cuda-archs")
# What would end a label's quoted value or expand in it.
_LABEL_BREAKERS = ('"', "\n", "\\", "$")


def _labels(cell: ImageCell, cuda_archs: str) -> tuple[tuple[str, str], ...]:
    """Static labels. Build-time ones (input digest, created, base digest) come from the builder:
    the input digest hashes this very file, so it cannot be written into it."""
    accel = "CPU" if cell.cuda == "cpu" else f"CUDA {cell.cuda_full or cell.cuda}"
    # FROM name:tag@sha256:... (a pin): base.name is the name and tag, base.digest the digest
    base_name, _, base_digest = cell.base_image.partition("@")
    labels = {
        _OCI_TITLE: f"pytorch-{cell.readable_tag}",
        _OCI_DESCRIPTION: f"PyTorch {cell.torch} {accel} Python {cell.python} "
        f"({cell.flavour}) on {cell.base_image}",
        _OCI_VERSION: cell.readable_tag,
        _OCI_BASE_NAME: base_name,
        naming.OCI_BASE_DIGEST_LABEL: base_digest,
        _OCI_VENDOR: "imagekit",
        naming.CELL_LABEL: cell.id,
        _TORCH_LABEL: cell.torch,
        _TORCHVISION_LABEL: cell.torchvision or "",
        _TORCHAUDIO_LABEL: cell.torchaudio or "",
        _CUDA_LABEL: cell.cuda,
        _CUDA_FULL_LABEL: cell.cuda_full or "",
        _CUDNN_LABEL: cell.cudnn or "",
        _PYTHON_LABEL: cell.python,
        _FLAVOUR_LABEL: cell.flavour,
        _OS_LABEL: cell.os,
        _BASE_IMAGE_LABEL: cell.base_image,
        _VARIANT_LABEL: cell.variant,
        _CUDA_ARCHS_LABEL: cuda_archs,
        naming.CHECK_SCRIPT_LABEL: CHECK_SCRIPT_PATH,
    }
    labels = {name: value for name, value in labels.items() if value}
    # Every part was validated by the schema; this guards the label syntax itself (searched in all
    # values at once; the loop only names the culprit).
    values = "".join(labels.values())
    if any(breaker in values for breaker in _LABEL_BREAKERS):
        for key, value in labels.items():
            if any(breaker in value for breaker in _LABEL_BREAKERS):
                raise InputError(f"cell {cell.id}: label {key} would hold {value!r}")
    return tuple(labels.items())


_CONSTRAINTS_DIR = str(PurePosixPath(CONSTRAINTS_FILE).parent)
_CONSTRAINT_ENV = tuple((name, CONSTRAINTS_FILE) for name in CONSTRAINT_ENV)


def _runs(cell: StepInputs, options: StepOptions, wheelhouse: bool) -> ImageRuns:
    """Each step's network and mounts (BuildKit), decided here: the templates only write them."""
    return ImageRuns(
        mirror=options.offline(),
        apt=options.apt(cell.os),
        toolchain=options.apt(cell.os, fallback=True),
        torch=options.pip(wheelhouse),
        venv=options.offline(),
        venv_tools=options.pip(wheelhouse),
        guard=options.offline(),
        extra=options.pip(wheelhouse),
        extension=options.offline(),
    )


def _steps(cell: StepInputs, matrix: Matrix, options: StepOptions) -> dict[str, Any]:
    """The recipe's fields that its steps decide (all but the matrix's name, the build arguments and
    the labels, which name the cell), as ``Recipe``'s keyword arguments."""
    wheelhouse = uses_wheelhouse_for(matrix, cell.stack)
    cuda_wheels = cell_cuda_wheels(cell, matrix, wheelhouse, cell.stack)
    from_pypi = torch_from_pypi(cuda_wheels)
    torch_args, extra_args = variant_pip_arguments(
        matrix, cell.variant, options, wheelhouse=wheelhouse, torch_from_pypi=from_pypi
    )
    pins = _requirements(cell)
    toolchain, toolchain_if_missing = _toolchain(cell)
    apt_packages: list[str] = []
    if not cell.python_from_base:
        apt_packages += [f"python{cell.python}", f"python{cell.python}-venv", "ca-certificates"]
    apt_packages += [p for p in (*toolchain, *cell.apt_packages) if p not in apt_packages]
    extras = list(cell.pip_packages)
    devel_tools = cell.flavour == "devel" and (toolchain or toolchain_if_missing)
    if devel_tools and "ninja" not in {project_name(r) for r in extras}:
        extras.append("ninja")  # torch.utils.cpp_extension refuses to build without it
    if cell.nvcc_from_wheels:
        extras.append(COMPILER_REQUIREMENT)
    return {
        "apt_packages": tuple(apt_packages),
        "apt_mirror": matrix.sources.apt.mirror,
        "apt_rewrites": tuple(
            (archive, matrix.sources.apt.mirror + suffix)
            for archive, suffix in cell.os_archives
            if matrix.sources.apt.mirror
        ),
        "python": f"python{cell.python}" if not cell.python_from_base else "python3",
        "venv": None if cell.stack else VENV,
        "venv_tools": () if cell.stack else load_advisories().venv_requirements(),
        "torch_pip_args": tuple(torch_args),
        "torch_requirements": pins,
        "extra_pip_args": tuple(extra_args),
        "extra_requirements": tuple(extras),
        "pins_command": _pins_command(cell),
        "constraints_dir": _CONSTRAINTS_DIR,
        "constraints_file": CONSTRAINTS_FILE,
        "constraint_env": _CONSTRAINT_ENV,
        "build_guard": _build_guard(cell),
        "extension_build": _extension_build(cell),
        "wheelhouse": wheelhouse,
        "wheelhouse_stage": options.wheelhouse_stage(wheelhouse),
        "wheelhouse_context": WHEELHOUSE_CONTEXT,
        "wheelhouse_dir": WHEELHOUSE_DIR,
        "env": cell.env,
        "nvidia_env": _nvidia_env(cell),
        "arch_env": _arch_env(cell),
        "toolchain": toolchain_if_missing,
        "toolchain_probe": TOOLCHAIN_PROBE,
        "check_script_context": CHECK_SCRIPT_CONTEXT,
        "check_script_path": CHECK_SCRIPT_PATH,
        "run": _runs(cell, options, wheelhouse),
        "apt_prelude": options.apt_prelude,
        "apt_clean_lists": options.apt_clean_lists,
        "apt_cleanup": options.apt_cleanup,
        "reproducible": options.buildkit,
        "wheel_toolkit": wheel_toolkit(cell.python, cell.cuda) if cell.nvcc_from_wheels else None,
        "index_cuda_wheels": cuda_wheels,
    }


class Recipes:
    """The recipes of one matrix's cells. A cell's steps depend on a few of its fields
    (``StepInputs``), which many cells share: they are decided once per distinct ``StepInputs``,
    and only the labels and the build arguments, which name the cell, are made per cell."""

    def __init__(self, matrix: Matrix, matrix_name: str, build: BuildSettings | None = None) -> None:
        self.matrix = matrix
        self.matrix_name = matrix_name
        self.options = StepOptions.of(matrix, build or matrix.build)
        self._steps: dict[StepInputs, tuple[dict[str, Any], str]] = {}  # -> (steps, cuda-archs label)

    def image(self, cell: ImageCell, os_archives: tuple[tuple[str, str], ...]) -> Recipe:
        inputs = step_inputs(cell, os_archives)
        found = self._steps.get(inputs)
        if found is None:
            found = self._steps[inputs] = (_steps(inputs, self.matrix, self.options), _cuda_archs(inputs))
        steps, cuda_archs = found
        return Recipe(
            matrix_name=self.matrix_name,
            build_args=tuple(name for name, _ in cell.build_args),
            labels=_labels(cell, cuda_archs),
            **steps,
        )

    def frontend(self, cell: FrontendCell) -> FrontendRecipe:
        return make_frontend_recipe(cell, self.matrix, self.matrix_name, self.options)


# -- front ends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrontendRecipe:
    """What a front-end Dockerfile (``templates/frontend``) does: FROM the parent cell's image, add
    the front end's packages (only add: every installed version stays), a user and a workspace."""

    matrix_name: str
    frontend: str  # jupyter | ssh
    parent_image: str  # the cell's image the front end is built FROM
    wheelhouse: bool
    wheelhouse_stage: bool  # copied into the build stage (classic), else bound to the install (BuildKit)
    wheelhouse_context: str
    wheelhouse_dir: str
    pip_args: tuple[str, ...]
    python_prefix: str  # the environment the packages go into
    requirements: tuple[str, ...]
    freeze_command: tuple[str, ...]  # prints every installed distribution as name==version: the pins
    port: int
    command: str  # the entrypoint's mode: start-jupyter | start-sshd
    layout: FrontendLayout  # the user, the workspace, where the front-end files go
    labels: tuple[tuple[str, str], ...]
    run_install: str  # what follows RUN in the install step (ImageRuns)
    run_user: str  # and in the user step (ssh: with openssh-server's apt fallback)
    apt_prelude: str
    apt_clean_lists: bool


def make_frontend_recipe(
    cell: FrontendCell, matrix: Matrix, matrix_name: str, options: StepOptions | None = None
) -> FrontendRecipe:
    options = options or StepOptions.of(matrix, matrix.build)
    wheelhouse = uses_wheelhouse(cell, matrix)
    versions = matrix.frontends
    requirements = [f"dumb-init=={versions.dumb_init}"]
    labels = {
        f"{naming.OCI_PREFIX}title": f"pytorch-{cell.readable_tag}",
        f"{naming.OCI_PREFIX}version": cell.readable_tag,
        f"{naming.OCI_PREFIX}base.name": cell.base_image,
        naming.CELL_LABEL: cell.id,
        naming.FRONTEND_LABEL: cell.frontend,
        naming.label("frontend-user"): FRONTEND.user,
        naming.label("frontend-uid"): str(FRONTEND.uid),
        naming.label("frontend-port"): str(FRONTEND.port(cell.frontend)),
        naming.FRONTEND_CHECK_LABEL: FRONTEND.check_path,
        naming.label("workspace"): FRONTEND.workspace,
        naming.label("dumb-init"): versions.dumb_init,
    }
    if cell.frontend == "jupyter":
        requirements.append(f"jupyterlab=={versions.jupyterlab}")
        labels[naming.label("jupyterlab")] = versions.jupyterlab
    return FrontendRecipe(
        matrix_name=matrix_name,
        frontend=cell.frontend,
        parent_image=cell.base_image,
        wheelhouse=wheelhouse,
        wheelhouse_stage=options.wheelhouse_stage(wheelhouse),
        wheelhouse_context=WHEELHOUSE_CONTEXT,
        wheelhouse_dir=WHEELHOUSE_DIR,
        pip_args=tuple(variant_pip_arguments(matrix, cell.variant, options, wheelhouse=wheelhouse)[1]),
        python_prefix=VENV,
        requirements=tuple(requirements),
        freeze_command=_probe_step(protocol.FREEZE),
        port=FRONTEND.port(cell.frontend),
        command="start-jupyter" if cell.frontend == "jupyter" else "start-sshd",
        layout=FRONTEND,
        labels=tuple(labels.items()),
        run_install=options.pip(wheelhouse),
        run_user=options.apt(cell.os, fallback=True) if cell.frontend == "ssh" else options.offline(),
        apt_prelude=options.apt_prelude,
        apt_clean_lists=options.apt_clean_lists,
    )
