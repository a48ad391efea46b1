"""gemm_perf's floors (imagekit/probe/perf.py): looked up by the exact device name, scaled by the
SM fraction for MIG slices, and the dtype timed per compute capability."""

from __future__ import annotations

from imagekit.probe import perf


def test_gemm_floor_exact_names() -> None:
    assert perf.gemm_floor("NVIDIA H200")[0] == 400.0
    assert perf.gemm_floor("NVIDIA H100 80GB HBM3")[0] == 350.0
    assert perf.gemm_floor("NVIDIA GeForce RTX 4090")[0] == 70.0
    assert perf.gemm_floor("NVIDIA A100-SXM4-80GB")[0] == 140.0
    assert perf.gemm_floor("NVIDIA TITAN V")[0] is None
    # the substring match of old gave this Ampere laptop-class card the A100 floor
    floor, how = perf.gemm_floor("NVIDIA RTX A1000")
    assert floor is None and "exact device name" in how
    assert perf.gemm_floor("NVIDIA A100")[0] is None
    assert perf.gemm_floor("Tesla T4")[0] == 20.0 and perf.GEMM_FLOORS["Tesla T4"].dtype == "float16"


def test_gemm_floor_mig_slices_scale_by_sms() -> None:
    # torch's name for a MIG slice: the board, " MIG ", the profile (published PyTorch output)
    floor, how = perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14)
    assert floor == round(140.0 * 14 / 108, 1) and "14/108" in how
    assert perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 98)[0] == round(140.0 * 98 / 108, 1)
    floor, how = perf.gemm_floor("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    assert floor is None and "cannot be scaled" in how
    assert perf.gemm_floor("NVIDIA A30 MIG 1g.6gb", 14)[0] == round(70.0 * 14 / 56, 1)  # A30: data now
    floor, how = perf.gemm_floor("NVIDIA A800-SXM4-80GB MIG 1g.10gb", 14)
    assert floor is None and "no floor known for the board" in how


def test_perf_dtype() -> None:
    assert perf.perf_dtype("NVIDIA H200", (9, 0)) == "bfloat16"
    assert perf.perf_dtype("Tesla V100-SXM2-16GB", (7, 0)) == "float16"
    assert perf.perf_dtype("Some Future GPU", (7, 5)) == "float16"
    assert perf.perf_dtype("Some Future GPU", (10, 0)) == "bfloat16"
