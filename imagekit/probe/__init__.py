"""imagekit probe: the in-image check; verifies what an image holds and prints ONE JSON document.

Shipped into every image as one zipapp at /opt/imagekit/check.py (imagekit.render.probe_bundle builds it);
one module per concern, check names and the result schema in ``protocol`` (the host imports it
too). Standard library only (torch is imported when present); runs on Python 3.8+, so
`docker run IMAGE python3 /opt/imagekit/check.py`, a CI job or a Kubernetes job can run it without
imagekit installed.

Expectations come from the image's `imagekit.*` labels, passed as arguments or environment
(arguments win):

    --expect-torch 2.1.2   IMAGEKIT_EXPECT_TORCH     torch.__version__ (public part unless it has '+')
    --expect-cuda 12.1     IMAGEKIT_EXPECT_CUDA      CUDA minor (or x.y.z), or "cpu"
    --expect-cudnn 8       IMAGEKIT_EXPECT_CUDNN     cuDNN major, or a full version (NGC stacks)
    --expect-python 3.10   IMAGEKIT_EXPECT_PYTHON
    --flavour devel        IMAGEKIT_FLAVOUR          devel (nvcc must be there) or runtime (must not)
    --expect-cuda-archs L  IMAGEKIT_EXPECT_CUDA_ARCHS the wheel's arch list (8.0;9.0+PTX), compared
                                                     with torch's own (cuda_archs)
    --require-gpu          IMAGEKIT_REQUIRE_GPU=1    a GPU must be visible: GPU checks fail without one
    --only a,b / --skip c  IMAGEKIT_CHECK_ONLY/_SKIP run only / leave out these checks (comma lists,
                                                     repeatable); a check left out reads skip, never pass
    --host-machine x86_64  IMAGEKIT_HOST_MACHINE     the engine host's machine (docker info), to tell
                                                     an emulated run (imagekit verify passes it)

Output: {"schema": 2, "checks": [...], "summary": {...}, "gpu_visible", "gpu_requested",
"expected", "telemetry", "inventory", "platform"}. `platform` is where it ran: {"machine" (uname -m
inside the image), "host_machine" (as given), "emulated"} (true when they differ, or when
/proc/cpuinfo is another machine's, as QEMU user emulation shows the host's; null when unknown).
Every check has name, status (pass|fail|skip), required, reason (skip), expected, actual, detail,
cause and fix (fail), duration_s. Exit 0 when no required check failed, 1 otherwise, 2 on bad
arguments (an unknown check name too). An exception inside a check becomes that check's failure.
`telemetry` is null, or what nvidia-smi sampled on each GPU while gemm_perf timed its GEMM
(min/max/mean per metric, clock throttle reasons).

Build steps (``protocol.BUILD_STEPS``; a Dockerfile runs them while it builds the image, first
argument the step): `check.py build-guard --torch V --cuda X.Y|cpu [--exact]` exits 1 unless the
installed torch is that build; `check.py pins [--extra REQ]` prints the constraints file (torch's
family and its CUDA wheels as installed); `check.py freeze` prints every installed distribution
(a front end's build stage); `check.py build-extensions` (devel images) builds the extension
check's modules into /opt/imagekit/extensions with a manifest (``prebuilt``), or exits 1 with one
line naming the missing piece. See ``buildsteps``.

Checks, in order: environment, python, nvcc, cuda_installs, nvidia_smi, driver, require, torch,
torch_cuda, cudnn, libcudart, cuda_available, arch, cuda_archs, gemm_cpu, gemm_gpu, cudnn_conv,
gemm_perf, compile, extension, train_step, libraries_once, nccl, nccl_bandwidth.

libraries_once (needs no GPU): reads DT_SONAME of every regular *.so/*.so.* under /usr, /opt, /lib*
and the site-packages (never following a directory symlink; mounts, /proc, /sys, /dev and
/usr/local/nvidia skipped: the driver's files are not the image's) and reports each soname held at
more than one file (hard links and symlinks are one file) with the bytes the extra copies take: a
figure, also in the inventory's "duplicate_libraries", never a failure. It fails when a CUDA library
(cublas, cublasLt, cudnn*, nccl, cufft, curand, cusparse, cusolver, nvrtc, cudart) is mapped into
this process from two files after torch's import and the GPU checks. See ``sharedlibs``.

cuda_archs (required=false; needs no GPU): torch's own arch list, torch._C._cuda_getArchFlags()
(SASS sm_XY, PTX compute_XY; torch.cuda.get_arch_list() reads [] without a GPU), against the
expected list (a TORCH_CUDA_ARCH_LIST: X.Y+PTX is sm_XY and compute_XY). A difference fails with
both lists in the detail but never fails the image: the data behind the label may lag the wheel.
Skips on a CPU build and on a torch without that function.

GPU policy (never a pass for something that did not run):
- a GPU is *requested* when --require-gpu / IMAGEKIT_REQUIRE_GPU is given, when
  NVIDIA_VISIBLE_DEVICES names specific devices (indices or UUIDs: someone chose them), or when the
  NVIDIA runtime evidently wired a GPU in (/dev/nvidiactl or /dev/nvidia<N>, or an nvidia-smi on
  PATH, which images do not ship: the container toolkit mounts it). NVIDIA_VISIBLE_DEVICES=all
  alone is NOT a request: nvidia/cuda images set it in their own ENV, so it is there with or
  without `--gpus`. void/none/empty never request. GPU jobs should pass --require-gpu.
- a GPU is *visible* when nvidia-smi lists one or torch counts one.
- requested and not visible: every GPU check FAILS ("--gpus missing or no NVIDIA runtime"), and so
  does the GPU part of compile, extension and train_step. Not requested and not visible: GPU
  checks (and those GPU parts) are skip with reason "no GPU requested".
- GPU checks run on EVERY visible device; the detail holds one result per device and one failing
  device fails the check.
- an emulated run (an arm64 image under QEMU on an x86_64 host) never uses a GPU: requested, every
  GPU check FAILS saying so; not requested, they skip as above. Its timed checks (gemm_perf,
  nccl_bandwidth, compile, extension) say "emulated": true in their detail, and gemm_perf and
  nccl_bandwidth never fail on a floor (their figures are QEMU's, not the machine's).

environment: a CUDA build (expected CUDA, or torch's own CUDA when none is expected) must have
NVIDIA_DRIVER_CAPABILITIES with compute (or all): without it no compute library is mounted and torch
sees no GPU. Unset counts as utility only (what these machines' runtimes did; the toolkit's
defaults vary by version and path), so an image must set it itself. A CPU build needs nothing.

NVIDIA_REQUIRE_* evaluation, as the NVIDIA container toolkit's nvidia-container-cli does it
(libnvidia-container src/cli/dsl.c and configure.c): every NVIDIA_REQUIRE_* variable must hold (but
NVIDIA_REQUIRE_JETPACK, which the hook does not pass); inside one, space = OR and comma = AND,
evaluated left to right with short cuts (an AND group stops at its first false term, the whole
stops at the first true group). Properties (case-insensitive) cuda (the driver's CUDA version),
driver, arch (compute capability) and brand; arch and brand are evaluated per device and every
device must satisfy. Operators: = != < <= > >= exactly (`==` is NOT one: the toolkit calls it an
invalid expression); brand takes = and != only and compares case-insensitively; versions hold only
digits and dots and compare numerically, component by component. A term the toolkit cannot parse
(unknown property, bad operator, empty or non-numeric version) makes the whole variable invalid
when evaluation reaches it: the container would not start, so it reads as not satisfied. Brands are
the toolkit's names for NVML's brand type: Quadro, Tesla, NVS, GRID, GeForce, TITAN, VApps, VPC,
VCS, VWS, CloudGaming, QuadroRTX, NvidiaRTX, Nvidia, GeForceRTX, TitanRTX, Unknown (read from NVML
through libnvidia-ml.so.1, else from nvidia-smi -q's "Product Brand": "NVIDIA RTX" is NvidiaRTX). A
term whose value is not known here (brand with neither) is undetermined; an undetermined result is
a failure, not a pass. NVIDIA_DISABLE_REQUIRE (Go's ParseBool true) skips it. With no
NVIDIA_REQUIRE_CUDA but a CUDA_VERSION, "cuda>=<major.minor>" is implied (the toolkit's legacy
rule).

driver: NVIDIA's driver table (full and minor-version compatibility); below the minor-version floor
an image may still run through the forward-compatibility libraries (cuda-compat: libcuda.so.<ver>
in /usr/local/cuda/compat in nvidia/cuda images, /usr/local/cuda/compat/lib.real in NGC images),
on datacenter GPUs only; the detail says which libcuda the process loaded.

compile: torch.compile (torch >= 2.0) of a small function compared with eager, on the CPU (inductor,
C++: needs a C++ compiler and Python.h) always and on each visible GPU (Triton: needs a C compiler
and Python.h too). Runs in a child process bounded in time; a failure names the missing compiler or
Python headers. Required except in runtime images (which carry no compiler: reported, not fatal).
extension (devel flavour only): a C++ extension through torch.utils.cpp_extension.load_inline, built
and called; plus a CUDA kernel where nvcc exists and a GPU is visible. Where the image built these
modules at image build time (build-extensions) and the manifest matches this probe's sources,
torch's build, Python, machine, arch list (CUDA) and each library's sha256, and the toolchain is
still there, a part only loads and runs the module (detail: "how", "build_s_saved"); otherwise it
builds as below and its "prebuilt" says why not. Loaded or built, the CUDA kernel runs only on a
visible GPU. train_step: a two-layer MLP
on a fixed synthetic problem, a few optimizer steps under autocast (bf16 on the CPU; fp16 with a
GradScaler, and bf16 where the device supports it, on each GPU); the loss must fall by half.
Every build and cache of these (inductor, Triton, torch extensions, the CUDA JIT cache) goes to a
fresh directory under the temporary directory ($TMPDIR, else /tmp), removed at the end, so nothing
is written outside it and nothing stale is reused.

gemm_gpu: per device and dtype, every element is checked against a float64 CPU reference of the
same (rounded) inputs: |got - ref| <= rtol * scale, scale = sqrt(sum_k (a_ik b_kj)^2), rtol from
the dtype's epsilon and K; any element past it fails (the count and the worst are reported). bf16
is skipped where torch.cuda.is_bf16_supported() is false (pre-Ampere with an old torch).

gemm_perf is reported with required=false: a throttled shared device must not fail an image; its
status still says fail when far below the floor. Timed with CUDA events over at least
PERF_MIN_SECONDS after a warm-up, on every device, bf16 (fp16 below compute capability 8.0); floors
are looked up by the EXACT device name and scaled by the SM fraction for MIG slices.
nccl: all-reduce and broadcast across the GPUs in worker processes, each returning its result in
its own file, so library output (NCCL_DEBUG=INFO) cannot break it. In each pod of a multi-node Job
(NNODES above 1: `imagekit k8s --compute-domain`), one world across every pod's GPUs (rendezvous.py).
"""
