"""nccl_bandwidth (imagekit/probe/bandwidth.py): nvidia-smi topo -m parsed, floors by link, and the
verdict per pair."""

from __future__ import annotations

TOPO_8 = """\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tSYS\tPIX\t0-47\t0\t\tN/A
GPU1\tNV18\t X \tPXB\tSYS\t0-47\t0\t\tN/A
GPU2\tSYS\tPXB\t X \tSYS\t48-95\t1\t\tN/A
NIC0\tPIX\tSYS\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_parse_topo_and_floors_by_link() -> None:
    from imagekit.probe import bandwidth, tables

    links = bandwidth.parse_topo(TOPO_8)
    assert links[(0, 1)] == "NV18" and links[(1, 2)] == "PXB" and links[(0, 2)] == "SYS"
    assert links[(0, 0)] == "X" and (0, 3) not in links  # NIC columns are not GPUs
    table = tables.nccl_bandwidth()
    assert bandwidth.pair_floor("NV18", table)[0] == 180.0
    assert bandwidth.pair_floor("PXB", table)[0] == 6.0 and bandwidth.pair_floor("SYS", table)[0] == 2.0
    assert bandwidth.pair_floor("XYZ", table)[0] is None and bandwidth.pair_floor(None, table)[0] is None
    assert bandwidth.bus_bandwidth(2 * 10**9, 1.0, 2) == 2.0  # nccl-tests: algbw x 2(n-1)/n
    assert bandwidth.bus_bandwidth(8 * 10**9, 1.0, 8) == 14.0


def test_bandwidth_verdict_passes_skips_and_fails_by_pair() -> None:
    from imagekit.probe import bandwidth, tables

    table = tables.nccl_bandwidth()
    links = bandwidth.parse_topo(TOPO_8)
    measured = [
        {"pair": [0, 1], "seconds": 0.01, "busbw_gbps": 350.0},  # NV18: floor 180
        {"pair": [1, 2], "seconds": 0.02, "busbw_gbps": 18.0},  # PXB: floor 6
    ]
    pairs = bandwidth._judge_pairs(measured, links, table)
    assert [p["status"] for p in pairs] == ["pass", "pass"]
    assert bandwidth._verdict(pairs, {}).status == "pass"
    slow = bandwidth._judge_pairs([{**measured[0], "busbw_gbps": 20.0}], links, table)  # NVLink unused
    verdict = bandwidth._verdict(slow, {})
    assert (
        verdict.status == "fail"
        and verdict.required is False
        and "GPUs 0-1 (NV18) 20.0 GB/s" in verdict.cause
    )
    unknown = bandwidth._judge_pairs(measured, {}, table)  # no topology: no floors
    assert bandwidth._verdict(unknown, {}).status == "skip"
