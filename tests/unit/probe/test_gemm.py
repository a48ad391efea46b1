"""gemm_cpu and gemm_gpu (imagekit/probe/gemm.py) without torch: the per-element tolerance, the pure
Python reference gemm_cpu compares with, and a failure named per device and dtype. On the real torch
CPU wheel with a stand-in of torch.cuda: tests/slow/probe/test_run_gpu_checks.py."""

from __future__ import annotations

import math

import pytest

from imagekit.probe import gemm, protocol


def test_the_tolerance_grows_with_k_and_the_dtype_s_epsilon() -> None:
    assert gemm.gemm_tolerance("float32", 1024) < gemm.gemm_tolerance("float32", 4096)
    assert gemm.gemm_tolerance("float32", 1024) < gemm.gemm_tolerance("bfloat16", 1024)
    assert gemm.gemm_tolerance("float16", 1024) < gemm.gemm_tolerance("bfloat16", 1024)
    assert gemm.gemm_tolerance("float32", 4096) == pytest.approx(8 * 2.0**-23 * (1 + math.sqrt(4096)))


def test_the_python_reference_is_a_matrix_product() -> None:
    assert gemm._python_matmul([[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]) == [
        [19.0, 22.0],
        [43.0, 50.0],
    ]
    assert gemm._python_matmul([[1.0, 2.0, 3.0]], [[1.0], [1.0], [1.0]]) == [[6.0]]


def test_a_failure_names_the_device_the_dtype_and_the_worst_element() -> None:
    worst = {"row": 3, "col": 7, "got": 1.5, "ref": 1.0, "tolerance": 0.01}
    bad = [
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "dtypes": {
                "float32": {"status": protocol.PASS},
                "bfloat16": {"status": protocol.FAIL, "exceeding": 2, "elements": 4096, "worst": worst},
                "float16": {"status": protocol.FAIL, "error": "RuntimeError: CUDA error"},
            },
        }
    ]
    assert gemm._gemm_failures(bad) == [
        "GPU 1 (NVIDIA H100 80GB HBM3) bfloat16: 2 of 4096 elements off by more than the bound"
        " (worst [3,7] got 1.5, expected 1 +- 0.01)",
        "GPU 1 float16: RuntimeError: CUDA error",
    ]
