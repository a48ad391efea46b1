"""The GPU paths of the in-image check (gemm_gpu per device and dtype, gemm_perf with floors and
telemetry, train_step with a GradScaler) driven through a stand-in of torch.cuda that runs the real
PyTorch CPU wheel underneath: no GPU here, so devices, capabilities, events and faults are played by
the stand-in, and every tensor operation is real. Runs in the venv with the real torch CPU wheel
(the torch_python fixture of tests/slow/conftest.py); skipped where that wheel is absent. CI's
own venv has no torch: the GPU-machine runs are the integration tests' job."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.probe import extension, prebuilt
from tests.unit.probe_runs import SCRIPT, TORCH_VERSION

FAKE_TORCH = '''
"""A stand-in for `torch` whose CUDA devices are played on the CPU by the real torch."""
import contextlib
import time
import types

import torch as real


class Props:
    def __init__(self, spec):
        self.name = spec["name"]
        self.major, self.minor = spec["cap"]
        self.multi_processor_count = spec["sms"]
        self.uuid = spec.get("uuid")
        self.total_memory = 80 * 2**30


class Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


class Cuda:
    def __init__(self, devices, broken):
        self.devices = devices
        self.broken = set(broken)
        self.current = 0
        self.Event = Event

    def is_available(self):
        return True

    def _is_compiled(self):
        return True

    def device_count(self):
        return len(self.devices)

    def get_device_properties(self, i):
        return Props(self.devices[i])

    def get_device_name(self, i=0):
        return self.devices[i]["name"]

    def get_device_capability(self, i=0):
        return tuple(self.devices[i]["cap"])

    @contextlib.contextmanager
    def device(self, i):
        previous, self.current = self.current, i
        try:
            yield
        finally:
            self.current = previous

    def is_bf16_supported(self):
        return self.devices[self.current]["cap"][0] >= 8

    def synchronize(self, i=None):
        if (self.current if i is None else i) in self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def empty_cache(self):
        pass


class Cudnn:
    """cuDNN as a CUDA torch reports it; the convolutions themselves run on the CPU."""

    def is_available(self):
        return True

    def version(self):
        return 91000

    def flags(self, **kwargs):
        return real.backends.cudnn.flags(**kwargs)


class FakeTorch:
    def __init__(self, devices, broken=()):
        self.cuda = Cuda(devices, broken)
        self.backends = types.SimpleNamespace(cudnn=Cudnn(), cuda=real.backends.cuda)
        self.amp = types.SimpleNamespace(GradScaler=lambda *args, **kwargs: real.amp.GradScaler("cpu"))
        self.version = types.SimpleNamespace(cuda="12.1")
        self.__version__ = real.__version__

    def imagekit_device(self, index):
        return "cpu"

    def autocast(self, device_type, dtype=None, **kwargs):
        return real.autocast("cpu", dtype=dtype)

    def __getattr__(self, name):
        return getattr(real, name)
'''

DRIVER = """
import json, os, sys
from dataclasses import asdict
sys.path.insert(0, {script!r})
sys.path.insert(0, {fake_dir!r})
from imagekit_probe import arguments, bandwidth, context, perf, results, run
import fake_torch
scenario = json.loads(sys.argv[2])
for name, value in scenario.get("patch", {{}}).items():
    setattr(perf, name, value)  # gemm_perf's own settings
for name, value in scenario.get("patch_bandwidth", {{}}).items():
    setattr(bandwidth, name, value)  # nccl_bandwidth's (gloo on the CPU in place of NCCL)
torch = fake_torch.FakeTorch(scenario["devices"], scenario.get("broken", ()))
env = dict(os.environ)
env.update(scenario.get("env", {{}}))
expect = scenario.get("expect", {{"cuda": "12.1", "require_gpu": True}})
ctx = context.Context(arguments.Expect(**expect), env)
ctx._torch, ctx._torch_tried = torch, True
if scenario.get("smi"):
    ctx._smi = {{"path": scenario["smi"], "gpus": [{{"index": "0"}}]}}
else:
    ctx._smi = {{"path": None, "gpus": []}}
result = results.run_check(scenario["check"], dict(run.CHECKS)[scenario["check"]], ctx)
out = {{"result": asdict(result), "telemetry": ctx.telemetry}}
ctx.cleanup()
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle, default=str)
"""

H200 = {"name": "NVIDIA H200", "cap": [9, 0], "sms": 132, "uuid": "aaaaaaaa-0000-0000-0000-000000000000"}
T4 = {"name": "Tesla T4", "cap": [7, 5], "sms": 40, "uuid": "bbbbbbbb-0000-0000-0000-000000000000"}
MIG = {
    "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "cap": [8, 0],
    "sms": 14,
    "uuid": "cccccccc-0000-0000-0000-000000000000",
}
A1000 = {"name": "NVIDIA RTX A1000", "cap": [8, 6], "sms": 20, "uuid": None}


def run_scenario(python: str, tmp_path: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    fake_dir = tmp_path / "fake"
    fake_dir.mkdir(exist_ok=True)
    (fake_dir / "fake_torch.py").write_text(FAKE_TORCH, encoding="utf-8")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(script=str(SCRIPT), fake_dir=str(fake_dir)), encoding="utf-8")
    out = tmp_path / "out.json"
    done = subprocess.run(
        [python, str(driver), str(out), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.exists(), done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def test_gemm_gpu_checks_every_device_and_skips_bf16_below_sm80(torch_python: str, tmp_path: Path) -> None:
    out = run_scenario(torch_python, tmp_path, {"check": "gemm_gpu", "devices": [H200, T4]})
    result = out["result"]
    assert result["status"] == "pass", (result["cause"], result["detail"])
    h200, t4 = result["detail"]["devices"]
    assert [h200["index"], t4["index"]] == [0, 1]
    assert result["detail"]["tf32"] is False and "_scaled_mm" in result["detail"]["fp8"]
    for dtype in ("float32", "float16", "bfloat16", "float8_e4m3fn"):  # FP8 on sm_89+ (the H200)
        stats = h200["dtypes"][dtype]
        assert stats["status"] == "pass" and stats["exceeding"] == 0 and stats["elements"] == 1024 * 1024
        assert stats["max_error_ratio"] < 0.5, (dtype, stats)  # the real CPU GEMM sits well inside
    assert t4["dtypes"]["bfloat16"]["status"] == "skip"
    assert "is_bf16_supported() is False on device 1 (sm_75)" in t4["dtypes"]["bfloat16"]["reason"]
    assert (
        t4["dtypes"]["float8_e4m3fn"]["status"] == "skip" and "8.9" in t4["dtypes"]["float8_e4m3fn"]["reason"]
    )
    assert t4["dtypes"]["float16"]["status"] == "pass"
    assert result["actual"] == [
        {
            "index": 0,
            "status": "pass",
            "exceeding": {"float32": 0, "float16": 0, "bfloat16": 0, "float8_e4m3fn": 0},
        },
        {"index": 1, "status": "pass", "exceeding": {"float32": 0, "float16": 0}},
    ]


def test_gemm_gpu_fails_when_one_device_fails(torch_python: str, tmp_path: Path) -> None:
    out = run_scenario(torch_python, tmp_path, {"check": "gemm_gpu", "devices": [H200, H200], "broken": [1]})
    result = out["result"]
    assert result["status"] == "fail"
    assert [d["status"] for d in result["detail"]["devices"]] == ["pass", "fail"]
    assert "GPU 1 float32: RuntimeError: CUDA error: an illegal memory access" in result["cause"]
    assert "GPU 0" not in result["cause"]
    assert "ECC" in result["fix"]


LOOPING_SMI = """#!/bin/sh
# the telemetry query of three GPUs, every 100 ms: GPU 0 at its power cap (made-up values)
case "$*" in
  *-lms*) while :; do
            echo "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, 100, 1000, 699.1, 71, 1755, 0x0000000000000004"
            echo "1, GPU-cccc, 100, 900, 120.0, 50, 1410, 0x0000000000000000"
            echo "2, GPU-dddd, 100, 800, 40.0, 45, 1900, 0x0000000000000000"
            sleep 0.1; done ;;
  *) echo "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, 0, 0, 80.0, 30, 345, 0x0000000000000001"
     echo "1, GPU-cccc, 0, 0, 60.0, 30, 210, 0x0000000000000001"
     echo "2, GPU-dddd, 0, 0, 20.0, 30, 210, 0x0000000000000001" ;;
esac
"""


def test_gemm_perf_per_device_floors_mig_and_telemetry(torch_python: str, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(LOOPING_SMI, encoding="utf-8")
    smi.chmod(0o755)
    scenario = {
        "check": "gemm_perf",
        "devices": [H200, MIG, A1000],
        "smi": str(smi),
        "patch": {"PERF_N": 96, "PERF_MIN_SECONDS": 0.5, "TELEMETRY_INTERVAL_MS": 100},
    }
    out = run_scenario(torch_python, tmp_path, scenario)
    result = out["result"]
    assert result["required"] is False
    assert result["status"] == "fail"  # a CPU is far below an H200's floor
    h200, mig, a1000 = result["detail"]["devices"]
    for entry in (h200, mig, a1000):
        assert entry["seconds"] >= 0.5 and entry["iterations"] >= 10 and entry["tflops"] > 0
    assert h200["dtype"] == "bfloat16" and h200["floor_tflops"] == 400.0 and h200["status"] == "fail"
    # FP8 (torch._scaled_mm) timed on the sm_90 device against its FP8 floor; not below sm_89
    assert h200["fp8"]["dtype"] == "float8_e4m3fn" and h200["fp8"]["floor_tflops"] == 700.0
    assert h200["fp8"]["status"] == "fail" and h200["fp8"]["tflops"] > 0
    assert "fp8" not in mig and "fp8" not in a1000
    assert result["detail"]["tf32"] is False
    assert mig["floor_tflops"] == round(140.0 * 14 / 108, 1) and "14/108" in mig["floor"]
    assert (
        a1000["status"] == "skip" and a1000["floor_tflops"] is None and "exact device name" in a1000["reason"]
    )
    # GPU 0's samples show the power cap: the cause says throttled, not "Tensor Cores not in use"
    assert h200["telemetry"]["throttle_reasons"]["counts"]["sw_power_cap"] >= 2
    assert h200["telemetry"]["metrics"]["power_draw_w"]["max"] == 699.1
    assert result["cause"].startswith("device throttled: ")
    assert "GPU 0 (NVIDIA H200)" in result["cause"] and "sw_power_cap" in result["cause"]
    assert "SM clock 1755-1755 MHz" in result["cause"]
    # the headline figure is the device furthest below its floor: the H200 (floor 400, not 18.1)
    assert result["actual"] == h200["tflops"] and result["detail"]["device"] == "NVIDIA H200"
    assert result["detail"]["floor_tflops"] == 400.0
    telemetry = out["telemetry"]
    assert telemetry["source"] == "nvidia-smi"
    assert telemetry["fields"][-1] == "clocks_throttle_reasons.active"
    windows = telemetry["devices"]
    assert [w["cuda_index"] for w in windows] == [0, 1, 2]
    assert windows[0]["matched_by"] == "uuid" and windows[0]["nvidia_smi_index"] == "0"
    assert windows[1]["nvidia_smi_index"] is None  # a MIG UUID names no whole GPU; models differ
    assert set(windows[1]["all_gpus"]) == {"0", "1", "2"}


def test_train_step_on_every_device_with_a_grad_scaler(torch_python: str, tmp_path: Path) -> None:
    out = run_scenario(torch_python, tmp_path, {"check": "train_step", "devices": [H200, T4]})
    result = out["result"]
    assert result["status"] == "pass", (result["cause"], result["detail"])
    parts = result["detail"]["parts"]
    assert sorted(parts) == [
        "cpu/bfloat16",
        "cuda:0/bfloat16",
        "cuda:0/float16",
        "cuda:1/bfloat16",
        "cuda:1/float16",
    ]
    assert parts["cuda:0/float16"]["grad_scaler"] is True and parts["cuda:0/float16"]["status"] == "pass"
    assert parts["cuda:0/bfloat16"]["grad_scaler"] is False and parts["cuda:0/bfloat16"]["status"] == "pass"
    assert parts["cuda:1/bfloat16"]["status"] == "skip" and "sm_75" in parts["cuda:1/bfloat16"]["reason"]
    for key in ("cpu/bfloat16", "cuda:0/float16", "cuda:1/float16"):
        assert parts[key]["final_loss"] < 0.5 * parts[key]["initial_loss"], key


BOUND = """
import json, sys
sys.path.insert(0, {script!r})
import torch
from imagekit_probe import gemm as check
gen = torch.Generator().manual_seed(0)
a = torch.randn(512, 512, generator=gen)
b = torch.randn(512, 512, generator=gen)
refs = check.gemm_references(torch, a, b, ("float32", "float16", "bfloat16"))
out = {{}}
for name in ("float32", "float16", "bfloat16"):
    dtype = getattr(torch, name)
    got = (a.to(dtype) @ b.to(dtype)).float()  # the real CPU GEMM in that dtype
    ref, scale = refs[name]
    rtol = check.gemm_tolerance(name, 512)
    out[name] = check.gemm_error_stats(torch, got, ref, scale, rtol)
    bad = got.clone()
    flat = bad.view(-1)
    idx = torch.randperm(flat.numel(), generator=gen)[:150]
    flat[idx] = 0.0  # 150 wrong elements out of 262144 (the old check's 2000x2000: ~2300 of 4M)
    flat[7] = float("nan")
    out[name + "_corrupt"] = check.gemm_error_stats(torch, bad, ref, scale, rtol)
    # the old single whole-matrix relative norm of the same corrupt result
    out[name + "_old_norm"] = float((bad.double() - ref).nan_to_num(0).norm() / ref.norm())
json.dump(out, open(sys.argv[1], "w"))
"""


def test_per_element_bound_catches_what_the_norm_missed(torch_python: str, tmp_path: Path) -> None:
    driver = tmp_path / "bound.py"
    driver.write_text(BOUND.format(script=str(SCRIPT)), encoding="utf-8")
    out_path = tmp_path / "bound.json"
    subprocess.run([torch_python, str(driver), str(out_path)], check=True, capture_output=True, timeout=300)
    out = json.loads(out_path.read_text(encoding="utf-8"))
    for name in ("float32", "float16", "bfloat16"):
        clean = out[name]
        assert clean["exceeding"] == 0 and clean["max_error_ratio"] < 0.5, (name, clean)
        corrupt = out[name + "_corrupt"]
        # nearly all 150 zeroed elements are caught (a few may have had a reference within the bound
        # of 0), and the NaN always counts
        assert 140 <= corrupt["exceeding"] <= 151, (name, corrupt["exceeding"])
        assert corrupt["worst"]["row"] == 0 and corrupt["worst"]["col"] == 7  # the NaN
    # the old check (one whole-matrix relative norm, bf16 tolerance 3e-2) passed the same result
    assert out["bfloat16_old_norm"] < 3e-2


def test_extension_builds_a_cuda_extension_with_no_gpu_visible(torch_python: str, tmp_path: Path) -> None:
    """A devel image on a machine without a GPU (a `docker build`): the CUDA extension is still built,
    from TORCH_CUDA_ARCH_LIST (what imagekit's devel images set from the wheel's arch list), by the
    real nvcc here; the part that needs a GPU skips. The image's build-time CUDA module is this
    image's own by its manifest but does not load: the part builds it here and says why; the CPU
    module, which the manifest does not name, is built here too. Needs nvcc (the CUDA toolkit here)."""
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    if nvcc is None:
        pytest.skip("no nvcc on this host")
    arch_list = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"  # a +PTX entry, as cu124 and cu129 wheels have
    modules = tmp_path / "extensions"
    library = tmp_path / "built-cuda.so"
    library.write_bytes(b"not an ELF file")
    here = prebuilt.BuildKey(
        source_sha256=extension.source_digest(),
        torch=TORCH_VERSION + "+cpu",  # the stand-in's: the real wheel's version, CUDA 12.1, no commit
        torch_cuda="12.1",
        torch_git=None,
        python="{}.{}".format(*sys.version_info[:2]),
        machine=platform.machine(),
        arch_list=arch_list,
    )
    prebuilt.install(str(modules), here, {"cuda": (str(library), 95.0)})
    scenario = {
        "check": "extension",
        "devices": [],  # torch (the stand-in) is a CUDA build, but no GPU is visible
        "expect": {"cuda": "13.0", "flavour": "devel"},
        "env": {
            "TORCH_CUDA_ARCH_LIST": arch_list,
            "PATH": f"{Path(nvcc).parent}:/usr/bin:/bin",
            prebuilt.DIRECTORY_ENV: str(modules),
        },
    }
    out = run_scenario(torch_python, tmp_path, scenario)
    result = out["result"]
    parts = result["detail"]["parts"]
    assert result["status"] == "pass", (result["cause"], result["detail"])
    assert parts["cuda"]["status"] == "skip" and parts["cuda"]["reason"] == "no GPU requested"
    nogpu = parts["cuda-no-gpu"]
    assert nogpu["status"] == "pass" and nogpu["visible_gpus"] == 0 and nogpu["CUDA_VISIBLE_DEVICES"] == ""
    assert nogpu["TORCH_CUDA_ARCH_LIST"] == arch_list and nogpu["built"] == ["kernel.o"]
    assert "-gencode=arch=compute_120,code=compute_120" in nogpu["arch_flags"]  # the +PTX entry
    assert result["detail"]["TORCH_CUDA_ARCH_LIST"] == arch_list
    cuda_module = modules / "imagekit_check_cuda.so"
    assert nogpu["prebuilt"].startswith(f"not used: did not load: loading {cuda_module}: ImportError")
    assert parts["cpu"]["prebuilt"] == "not used: not built at image build time (the manifest names cuda)"
    assert (
        result["detail"]["prebuilt"]["loaded"] == [] and result["detail"]["prebuilt"]["build_s_saved"] is None
    )


L40S = {"name": "NVIDIA L40S", "cap": [8, 9], "sms": 142, "uuid": None}
V100S = {"name": "Tesla V100S-PCIE-32GB", "cap": [7, 0], "sms": 80, "uuid": None}
B200 = {"name": "NVIDIA B200", "cap": [10, 0], "sms": 148, "uuid": None}
A10 = {"name": "NVIDIA A10", "cap": [8, 6], "sms": 72, "uuid": None}


def test_gemm_perf_floors_for_the_whole_fleet_from_data(torch_python: str, tmp_path: Path) -> None:
    """Products that had no floor (gemm_perf skipped on them) now fail a CPU's figure, from gpus.yaml."""
    scenario = {
        "check": "gemm_perf",
        "devices": [L40S, V100S, B200, A10],
        "patch": {"PERF_N": 64, "PERF_MIN_SECONDS": 0.2},
    }
    result = run_scenario(torch_python, tmp_path, scenario)["result"]
    l40s, v100s, b200, a10 = result["detail"]["devices"]
    assert (l40s["floor_tflops"], v100s["floor_tflops"], b200["floor_tflops"], a10["floor_tflops"]) == (
        150.0,
        52.0,
        900.0,
        50.0,
    )
    assert v100s["dtype"] == "float16" and "fp8" not in v100s and "fp8" not in a10  # no FP8 below sm_89
    assert l40s["fp8"]["floor_tflops"] == 260.0 and b200["fp8"]["floor_tflops"] == 1600.0
    assert {d["status"] for d in (l40s, v100s, b200, a10)} == {"fail"}
    assert result["status"] == "fail" and result["required"] is False


def test_cudnn_conv_forward_and_backward_on_every_device(torch_python: str, tmp_path: Path) -> None:
    out = run_scenario(torch_python, tmp_path, {"check": "cudnn_conv", "devices": [H200, T4]})
    result = out["result"]
    assert result["status"] == "pass", (result["cause"], result["detail"])
    assert result["actual"] == {"0": "pass", "1": "pass"}
    detail = result["detail"]
    assert (
        detail["tf32"] is False and detail["cudnn"]["enabled"] is True and detail["cudnn"]["version"] == 91000
    )
    for device in detail["devices"]:
        errors = device["max_rel_error"]
        assert set(errors) == {"forward", "grad_input", "grad_weight"}
        assert max(errors.values()) < 1e-5, errors  # float32 against the float64 reference


def test_cudnn_conv_fails_on_a_device_without_working_kernels(torch_python: str, tmp_path: Path) -> None:
    out = run_scenario(torch_python, tmp_path, {"check": "cudnn_conv", "devices": [H200, T4], "broken": [1]})
    result = out["result"]
    assert result["status"] == "fail" and result["required"] is True
    assert result["actual"] == {"0": "pass", "1": "fail"}
    assert "GPU 1 (Tesla T4, sm_75): RuntimeError: CUDA error" in result["cause"]
    assert "GPU 0" not in result["cause"] and "cuDNN" in result["fix"]


TOPO_SMI = """#!/bin/sh
# `nvidia-smi topo -m` of two NVLink-joined GPUs (the layout nvidia-smi prints; values made up)
case "$*" in
  *topo*) printf '\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\n'
          printf 'GPU0\\t X \\tNV12\\t0-63\\t0\\t\\tN/A\\n'
          printf 'GPU1\\tNV12\\t X \\t0-63\\t0\\t\\tN/A\\n\\nLegend:\\n\\n  X    = Self\\n' ;;
  *) exit 1 ;;
esac
"""


def test_nccl_bandwidth_per_pair_against_the_links_floor(torch_python: str, tmp_path: Path) -> None:
    """Two ranks (gloo on the CPU in place of NCCL) time a large all-reduce; the pair's link (NV12
    from topo -m) sets a floor of 12 x 10 GB/s from gpus.yaml, which the CPU falls far short of."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(TOPO_SMI, encoding="utf-8")
    smi.chmod(0o755)
    scenario = {
        "check": "nccl_bandwidth",
        "devices": [H200, H200],
        "smi": str(smi),
        "patch_bandwidth": {"BACKEND": "gloo"},
        "env": {"IMAGEKIT_NCCL_BANDWIDTH_MIB": "8"},
    }
    result = run_scenario(torch_python, tmp_path, scenario)["result"]
    assert result["required"] is False
    assert result["status"] == "fail", result
    (pair,) = result["detail"]["pairs"]
    assert pair["pair"] == [0, 1] and pair["link"] == "NV12" and pair["floor_gbps"] == 120.0
    assert pair["busbw_gbps"] > 0 and pair["status"] == "fail"
    assert result["detail"]["bytes"] == 8 * 2**20 and result["detail"]["all_busbw_gbps"] > 0
    assert result["detail"]["topology"] == {"0-1": "NV12"}
    assert "GPUs 0-1 (NV12)" in result["cause"] and "< 120.0" in result["cause"]
