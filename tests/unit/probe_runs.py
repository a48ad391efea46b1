"""Running the in-image probe as the tests do: the shipped zipapp, the captured outputs it parses
(tests/fixtures/check), a clean environment, and where a real torch CPU wheel and a Python 3.8 may
be found. The probe's test modules share these; the `torch_python` fixture is in conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from imagekit.render.probe_bundle import zipapp_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = zipapp_path("check")  # the zipapp every image carries, built from imagekit/probe
PROBE = REPO / "imagekit" / "probe"
FIXTURES = REPO / "tests" / "fixtures" / "check"
TORCH_VERSION = "2.13.0"  # what the real-torch tests expect
# Where a real torch CPU wheel may lie: a host's wheel store, or the offline demo's wheelhouse
# (examples/offline/setup.sh downloads torch-X+cpu there, with its dependencies).
WHEEL_DIRS = (Path("/opt/wheels"), REPO / "examples" / "offline" / "wheelhouse")
TORCH_VENV = Path("/tmp/imagekit-check-torch-venv")
PYTHON_3_8 = Path("/root/.pyenv/versions/3.8.18/bin/python")


def torch_wheel() -> Path | None:
    """The first torch CPU wheel of TORCH_VERSION in WHEEL_DIRS, or None."""
    for directory in WHEEL_DIRS:
        found = sorted(directory.glob(f"torch-{TORCH_VERSION}+cpu*.whl"))
        if found:
            return found[0]
    return None


def python_3_8() -> str | None:
    """A real Python 3.8 interpreter, when this host has one."""
    for candidate in (str(PYTHON_3_8), shutil.which("python3.8")):
        if not candidate or not Path(candidate).exists():
            continue
        probe = [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def clean_env(**extra: str) -> dict[str, str]:
    """No NVIDIA_* / IMAGEKIT_* / CUDA_VERSION from the test host; PATH without nvidia-smi."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NVIDIA_", "IMAGEKIT_")) and k not in ("CUDA_VERSION", "NV_CUDNN_VERSION")
    }
    env["PATH"] = "/usr/bin:/bin"
    env.update(extra)
    return env


def run_script(python: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [python, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        timeout=300,
        check=False,
    )
    report = json.loads(proc.stdout) if proc.returncode in (0, 1) else {}
    return proc.returncode, report, proc.stderr


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


# the --query-gpu fields of fixtures/nvidia-smi-csv-noheader-nounits-440.txt, in its column order
FIELDS_440 = (
    "power.limit", "power.min_limit", "power.max_limit", "memory.total", "vbios_version",
    "driver_version", "name", "gpu_uuid", "power.draw", "temperature.gpu", "temperature.memory",
    "clocks.current.graphics", "clocks.sm", "clocks.mem", "utilization.gpu", "utilization.memory",
    "fan.speed", "pcie.link.width.current", "pstate",
)  # fmt: skip


# NVIDIA_REQUIRE_CUDA of published nvidia/cuda images, which several probe modules' tests evaluate:
# 12.1's own rule (as written in its image) and 12.1.1's whole captured value.
REQ_121 = "cuda>=12.1 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=525,driver<526"
REQ_1211 = fixture("nvidia-require-cuda-12.1.1.txt").strip()
