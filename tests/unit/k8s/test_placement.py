"""Where a cell's Job may run, as node labels say it (GPU feature discovery): the node affinity admits
the nodes the cell serves, by its architecture, compute capability and driver major."""

from __future__ import annotations

from typing import Any

from imagekit.k8s.placement import entry_fit, gfd_affinity
from tests.unit.k8s.test_dra import DRA, allocatable, cluster, entries_of, rendered, whole_gpus


def test_the_claim_holds_the_full_driver_floor_where_feature_discovery_has_only_its_major() -> None:
    cell = "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"
    _, devices = cluster()
    early = next(d for d in devices if d.node == "node-a100-r525-early" and d.name == "gpu-0")
    labels = {  # what feature discovery would label that node with
        "kubernetes.io/arch": early.arch,
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver.major": early.attribute("driverVersion").split(".")[0],
    }
    affinity = gfd_affinity(entry_fit(entries_of("matrix.yaml")[cell]), 1)
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert any(all(_holds(r, labels) for r in t["matchExpressions"]) for t in terms)  # the label admits it
    assert "node-a100-r525-early" not in whole_gpus(allocatable(rendered("matrix.yaml", DRA)[cell]))


def _holds(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    value = labels.get(requirement["key"])
    if value is None:
        return False
    if requirement["operator"] == "In":
        return value in requirement["values"]
    return int(value) > int(requirement["values"][0])  # Gt
