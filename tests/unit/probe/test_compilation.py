"""compile and extension (imagekit/probe/compilation.py) without torch: the toolchain as found on a
PATH, the diagnosis naming the missing piece from a failed build's output, and a check's verdict
from its parts. Real builds on the torch CPU wheel: tests/slow/probe/test_compilation.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.probe import compilation, protocol

TOOLS = {"cxx": "/usr/bin/g++", "cc": "/usr/bin/gcc", "python_h": "/usr/include/python3.11/Python.h"}
TOOLS |= {"python_include": "/usr/include/python3.11", "python": "3.11"}


def diagnose(output: str, tools: dict[str, Any] = TOOLS, **outcome: Any) -> tuple[str, str]:
    return compilation.diagnose_build("compile (cpu)", {"output_tail": output, **outcome}, tools, "cxx", 60)


def test_the_toolchain_is_what_path_holds(tmp_path: Path) -> None:
    assert compilation.toolchain({"PATH": str(tmp_path)})["cxx"] is None
    gxx = shutil.which("g++") or shutil.which("c++")
    if gxx is None:
        pytest.skip("no C++ compiler on this host")
    link = tmp_path / "g++"
    link.symlink_to(gxx)
    found = compilation.toolchain({"PATH": str(tmp_path), "CXX": "g++ -O2"})
    assert found["cxx"] == str(link)  # CXX's first word, looked up on the image's PATH
    assert found["python"] == "{}.{}".format(*sys.version_info[:2])


@pytest.mark.parametrize(
    ("output", "tools", "cause", "fix"),
    [
        ("g++: not found", TOOLS, "no C/C++ compiler", "apt-get install -y g++"),
        ("anything", {**TOOLS, "cxx": None}, "no C/C++ compiler", "set CXX/CC"),
        ("fatal error: Python.h: No such file or directory", TOOLS, "Python.h missing", "python3.11-dev"),
        ("OSError: failed to map segment from shared object", TOOLS, "mounted noexec", "--tmpfs /tmp:exec"),
        (
            "The detected CUDA version (12.4) mismatches the version that was used to compile PyTorch (13.0)",
            TOOLS,
            "nvcc is CUDA 12.4",
            "-devel base",
        ),
        ("Segmentation fault\nmore", TOOLS, "failed: Segmentation fault (exit 139)", "output tail"),
    ],
)
def test_a_failed_build_names_its_missing_piece(
    output: str, tools: dict[str, Any], cause: str, fix: str
) -> None:
    got_cause, got_fix = diagnose(output, tools, rc=139)
    assert cause in got_cause and fix in got_fix


def test_a_timeout_and_the_child_s_own_findings_come_first() -> None:
    cause, _ = diagnose("g++: not found", timed_out=True)
    assert "did not finish within 60 s" in cause
    cause, fix = diagnose("", result={"missing": "ninja", "error": "ninja not found"})
    assert "ninja is missing" in cause and "pip install ninja" in fix
    cause, fix = diagnose("", result={"missing": "TORCH_CUDA_ARCH_LIST", "error": "no arch"})
    assert "TORCH_CUDA_ARCH_LIST is unset" in cause and "ENV TORCH_CUDA_ARCH_LIST" in fix


def test_a_check_is_its_parts_verdict() -> None:
    ok = {"status": protocol.PASS}
    bad = {"status": protocol.FAIL, "cause": "no compiler", "fix": "install g++"}
    no_gpu = {"status": protocol.SKIP, "reason": "no GPU requested"}
    failed = compilation.combine_parts(protocol.COMPILE, {"cpu": bad, "cuda:0": ok}, {}, True)
    assert (failed.status, failed.cause, failed.fix) == (protocol.FAIL, "[cpu] no compiler", "install g++")
    assert failed.expected == {"cpu": protocol.PASS, "cuda:0": protocol.PASS}
    passed = compilation.combine_parts(protocol.COMPILE, {"cpu": ok, "cuda:0": no_gpu}, {}, False)
    assert (passed.status, passed.required) == (protocol.PASS, False)
    skipped = compilation.combine_parts(protocol.COMPILE, {"cuda:0": no_gpu}, {"x": 1}, True)
    assert skipped.status == protocol.SKIP and skipped.reason == "[cuda:0] no GPU requested"
    assert skipped.detail == {"x": 1, "parts": {"cuda:0": no_gpu}}
