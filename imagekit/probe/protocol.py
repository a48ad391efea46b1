"""The protocol between the host and the in-image probe: what both sides name the same way.

The probe (this package, shipped into every image as /opt/imagekit/check.py) and the host (verify,
store, figures, publish, k8s) import these names from here; nothing else spells a check name.
Standard library only, Python 3.8+: the probe imports it inside the oldest supported image.
"""

from __future__ import annotations

from typing import Final, Literal

SCHEMA = 2  # the result document's "schema"; a change to its fields changes this
# 2: "platform" (where the probe ran: its machine, the engine host's, emulated or not)

# Every check of /opt/imagekit/check.py, in the order it runs and reports them.
ENVIRONMENT = "environment"
PYTHON = "python"
NVCC = "nvcc"
CUDA_INSTALLS = "cuda_installs"
NVIDIA_SMI = "nvidia_smi"
DRIVER = "driver"
REQUIRE = "require"
TORCH = "torch"
TORCH_CUDA = "torch_cuda"
CUDNN = "cudnn"
LIBCUDART = "libcudart"
CUDA_AVAILABLE = "cuda_available"
ARCH = "arch"
# The CUDA architectures torch was built for, read without a GPU, against the cuda-archs label.
CUDA_ARCHS = "cuda_archs"
GEMM_CPU = "gemm_cpu"
GEMM_GPU = "gemm_gpu"
CUDNN_CONV = "cudnn_conv"
GEMM_PERF = "gemm_perf"
COMPILE = "compile"
EXTENSION = "extension"
TRAIN_STEP = "train_step"
# The CUDA libraries loaded once (a failure when twice) and the sonames the image holds twice (a figure).
LIBRARIES_ONCE = "libraries_once"
NCCL = "nccl"
NCCL_BANDWIDTH = "nccl_bandwidth"

CHECK_NAMES: tuple[str, ...] = (
    ENVIRONMENT,
    PYTHON,
    NVCC,
    CUDA_INSTALLS,
    NVIDIA_SMI,
    DRIVER,
    REQUIRE,
    TORCH,
    TORCH_CUDA,
    CUDNN,
    LIBCUDART,
    CUDA_AVAILABLE,
    ARCH,
    CUDA_ARCHS,
    GEMM_CPU,
    GEMM_GPU,
    CUDNN_CONV,
    GEMM_PERF,
    COMPILE,
    EXTENSION,
    TRAIN_STEP,
    LIBRARIES_ONCE,
    NCCL,
    NCCL_BANDWIDTH,
)
# Reported, never fails an image (a shared device may be busy; the arch data may lag the wheel): its
# record says required=false.
NOT_REQUIRED = frozenset({CUDA_ARCHS, GEMM_PERF, NCCL_BANDWIDTH})
# The GPU checks a `validated` verdict needs, each present and passed.
VALIDATING_GPU_CHECKS: tuple[str, ...] = (CUDA_AVAILABLE, GEMM_GPU)
# Checks that compare a timing with a floor (never in an emulated run: the figure is QEMU's, not the
# machine's), and every check whose record carries timing figures (marked emulated in such a run).
FLOOR_CHECKS: tuple[str, ...] = (GEMM_PERF, NCCL_BANDWIDTH)
TIMED_CHECKS: tuple[str, ...] = (*FLOOR_CHECKS, COMPILE, EXTENSION)

# Checks of /opt/imagekit/frontend_check.py (jupyter and ssh images), in report order per front end.
FRONTEND_COMMON_CHECKS: tuple[str, ...] = (
    "user",
    "init",
    "workspace",
    "packages",
    "no_baked_secrets",
)
FRONTEND_CHECKS: dict[str, tuple[str, ...]] = {
    "jupyter": (
        *FRONTEND_COMMON_CHECKS,
        "jupyter_refuses_unsafe",
        "jupyter_auth",
        "jupyter_listen",
        "server_user",
        "healthcheck",
        "jupyter_token_file",
        "jupyter_kernel",
    ),
    "ssh": (
        *FRONTEND_COMMON_CHECKS,
        "sshd_refuses_no_keys",
        "sshd_config",
        "ssh_login",
        "ssh_password_refused",
        "ssh_other_keys_refused",
        "ssh_host_keys",
        "server_user",
        "healthcheck",
    ),
}
FRONTEND_KIND = "frontend"  # the front-end document's "kind"
# A check the host adds to a front-end image's report (from the engine's view of the image).
IMAGE_SECRETS = "image_secrets"

# A check's status (the verdict vocabulary: nothing else spells these), and the fields of its
# record (CheckResult), in order.
PASS: Final = "pass"
FAIL: Final = "fail"
SKIP: Final = "skip"
Status = Literal["pass", "fail", "skip"]
STATUSES: tuple[Status, ...] = (PASS, FAIL, SKIP)
RESULT_FIELDS: tuple[str, ...] = (
    "name",
    "status",
    "required",
    "reason",
    "expected",
    "actual",
    "detail",
    "cause",
    "fix",
    "duration_s",
)
# The top-level keys of the check document, and of its summary.
DOCUMENT_FIELDS: tuple[str, ...] = (
    "schema",
    "checks",
    "summary",
    "gpu_visible",
    "gpu_requested",
    "expected",
    "telemetry",
    "inventory",
    "platform",
)
SUMMARY_FIELDS: tuple[str, ...] = (PASS, FAIL, SKIP, "required_failed", "ok")
# The document's "platform": where the probe ran. `machine` is platform.machine() inside the image
# (uname -m: x86_64, aarch64); `host_machine` the engine host's, as the host passed it (None: not
# given); `emulated` whether they differ (QEMU user emulation; None: unknown, no host machine given).
PLATFORM_FIELDS: tuple[str, ...] = ("machine", "host_machine", "emulated")

# Exit statuses of both scripts.
EXIT_OK = 0  # no required check failed
EXIT_FAILED = 1  # a required check failed
EXIT_BAD_ARGUMENTS = 2

# Expectations: the option, the environment variable that stands in for it, and the image label
# (imagekit.<name>) the host reads it from. Arguments win over the environment.
EXPECT_OPTIONS: dict[str, str] = {
    "torch": "--expect-torch",
    "cuda": "--expect-cuda",
    "cudnn": "--expect-cudnn",
    "python": "--expect-python",
    "flavour": "--flavour",
    "cuda-archs": "--expect-cuda-archs",  # "8.0;9.0+PTX": the wheel's TORCH_CUDA_ARCH_LIST
}
EXPECT_ENV: dict[str, str] = {
    "torch": "IMAGEKIT_EXPECT_TORCH",
    "cuda": "IMAGEKIT_EXPECT_CUDA",
    "cudnn": "IMAGEKIT_EXPECT_CUDNN",
    "python": "IMAGEKIT_EXPECT_PYTHON",
    "flavour": "IMAGEKIT_FLAVOUR",
    "cuda-archs": "IMAGEKIT_EXPECT_CUDA_ARCHS",
}
REQUIRE_GPU_OPTION = "--require-gpu"
REQUIRE_GPU_ENV = "IMAGEKIT_REQUIRE_GPU"
ONLY_OPTION = "--only"
ONLY_ENV = "IMAGEKIT_CHECK_ONLY"
SKIP_OPTION = "--skip"
SKIP_ENV = "IMAGEKIT_CHECK_SKIP"
# The engine host's machine (docker info's Architecture: x86_64, aarch64), which the host passes in:
# the probe cannot tell an emulated run from a native one by itself.
HOST_MACHINE_OPTION = "--host-machine"
HOST_MACHINE_ENV = "IMAGEKIT_HOST_MACHINE"

# Front-end check expectations: option -> (environment variable, image label name).
FRONTEND_OPTION = "--frontend"
FRONTEND_EXPECT_OPTIONS: dict[str, str] = {
    "frontend-user": "--expect-user",
    "frontend-uid": "--expect-uid",
    "jupyterlab": "--expect-jupyterlab",
}

# Internal roles: the probe re-runs itself for work that must be isolated or bounded in time.
TASK_NAMES: tuple[str, ...] = (
    "compile",
    "extension_cpu",
    "extension_cuda",
    "extension_cuda_nogpu",
    "extension_prebuilt",  # load and run a module built at image build time (--device cpu|cuda:0|cuda-no-gpu)
)
WORKER_OPTION = "--collective-worker"
TASK_OPTION = "--task"
DEVICE_OPTION = "--device"
RESULT_FILE_OPTION = "--result-file"

# Build steps: what a Dockerfile runs with the probe while it builds an image
# (`python3 /opt/imagekit/check.py <step> <options>`), before any check runs. recipe.py writes these
# lines; buildsteps.py does the work. A step name is the first argument, so it never meets the
# check's own options (they all start with "--").
BUILD_GUARD = "build-guard"  # fails the build unless the installed torch is the cell's build
PINS = "pins"  # prints the constraints file: torch's family and its CUDA wheels, as installed
FREEZE = "freeze"  # prints every installed distribution as name==version (a front end's pins)
# builds the extension check's modules into the image (devel images), so verification only loads them
BUILD_EXTENSIONS = "build-extensions"
BUILD_STEPS: tuple[str, ...] = (BUILD_GUARD, PINS, FREEZE, BUILD_EXTENSIONS)
GUARD_TORCH_OPTION = "--torch"  # the torch version the cell installs
GUARD_CUDA_OPTION = "--cuda"  # the CUDA minor torch must be built for (12.1), or "cpu"
GUARD_EXACT_OPTION = "--exact"  # compare the whole version, local part too (a stack's own build)
PINS_EXTRA_OPTION = "--extra"  # a requirement line added to the pins (a NumPy cap); repeatable

# The multi-node rendezvous each pod of an `imagekit k8s --compute-domain` Job is given, by the
# names torch.distributed's env:// and torchrun read; the nccl check reads them (rendezvous.py).
MASTER_ADDR = "MASTER_ADDR"  # pod 0's DNS name: its rank 0 serves the store
MASTER_PORT = "MASTER_PORT"
NNODES = "NNODES"  # pods, one a node
NODE_RANK = "NODE_RANK"  # this pod's index
NPROC_PER_NODE = "NPROC_PER_NODE"  # ranks a pod: one a GPU
WORLD_SIZE = "WORLD_SIZE"  # ranks in all: NNODES x NPROC_PER_NODE
