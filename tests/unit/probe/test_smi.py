"""nvidia-smi and NVML as the probe reads them (imagekit/probe/smi.py): its CSV, banner and -L
outputs as captured, and brand names mapped to the NVIDIA container toolkit's (NVML brand type ->
libnvidia-container's strings, nvidia-smi -q's "Product Brand" -> the same)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from imagekit.probe import smi
from tests.unit.probe_runs import (
    FIELDS_440,
    REQ_1211,
    fixture,
)


class FakeNvml:
    """Stands in for libnvidia-ml.so.1 as ctypes sees it: functions filling their out-arguments."""

    def __init__(self, brands: list[int], fail: str | None = None) -> None:
        self.brands = brands
        self.fail = fail
        self.shutdown = False

    def _rc(self, name: str) -> int:
        return 999 if self.fail == name else 0

    def nvmlInit_v2(self) -> int:
        return self._rc("init")

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        count._obj.value = len(self.brands)
        return self._rc("count")

    def nvmlDeviceGetHandleByIndex_v2(self, index: ctypes.c_uint, handle: Any) -> int:
        handle._obj.value = 1000 + index.value
        return self._rc("handle")

    def nvmlDeviceGetBrand(self, handle: ctypes.c_void_p, brand: Any) -> int:
        brand._obj.value = self.brands[int(handle.value or 0) - 1000]
        return self._rc("brand")

    def nvmlShutdown(self) -> int:
        self.shutdown = True
        return 0


def test_parse_nvidia_smi_csv_with_header() -> None:
    fields = ["compute_cap", "compute_mode", "driver_version", "name", "index"]
    rows = smi.parse_nvidia_smi_csv(fixture("nvidia-smi-csv-compute-cap-header.txt"), fields)
    assert rows == [
        {
            "compute_cap": "7.0",
            "compute_mode": "Default",
            "driver_version": "570.86.15",
            "name": "NVIDIA TITAN V",
            "index": "0",
        },
        {
            "compute_cap": "8.9",
            "compute_mode": "Default",
            "driver_version": "570.86.15",
            "name": "NVIDIA RTX 5880 Ada Generation",
            "index": "1",
        },
    ]
    b300 = smi.parse_nvidia_smi_csv(
        fixture("nvidia-smi-csv-b300-header.txt"), ["driver_version", "name", "compute_cap"]
    )
    assert len(b300) == 7
    assert {r["compute_cap"] for r in b300} == {"10.3"}


def test_parse_nvidia_smi_csv_noheader_nounits() -> None:
    text = fixture("nvidia-smi-csv-noheader-nounits-440.txt")
    (row,) = smi.parse_nvidia_smi_csv(text, list(FIELDS_440))
    assert row["name"] == "GeForce RTX 2080"
    assert row["driver_version"] == "440.64"
    assert row["memory.total"] == "7979"


def test_parse_nvidia_smi_csv_ignores_the_old_driver_rejection() -> None:
    text = fixture("nvidia-smi-compute-cap-rejected.txt")
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    assert smi.parse_nvidia_smi_csv(text, fields) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvidia-smi-header-580-a100.txt", {"smi": "580.126.09", "driver": "580.126.09", "cuda": "13.0"}),
        ("nvidia-smi-header-r610-kmd.txt", {"smi": "610.43.02", "driver": "610.43.02", "cuda": "13.3"}),
        (
            "nvidia-smi-header-snap-470-tool-580-driver.txt",
            {"smi": "470.256.02", "driver": "580.95.05", "cuda": "13.0"},
        ),
        ("nvidia-smi-header-331-no-cuda.txt", {"smi": "331.62", "driver": "331.62"}),
    ],
)
def test_parse_nvidia_smi_header(name: str, expected: dict[str, str]) -> None:
    assert smi.parse_nvidia_smi_header(fixture(name)) == expected


def test_parse_nvidia_smi_list_and_brands() -> None:
    gpus = smi.parse_nvidia_smi_list(fixture("nvidia-smi-L.txt"))
    assert [g["name"] for g in gpus] == ["NVIDIA TITAN V", "NVIDIA RTX 5880 Ada Generation"]
    assert gpus[0]["uuid"] == "GPU-b5169cef-2205-c30e-f2b3-220cfa14bafd"
    # `nvidia-smi -q` line layout as in https://github.com/anderskm/gputil/issues/38
    assert smi.parse_nvidia_smi_brands("    Product Brand                   : GeForce\n") == ["GeForce"]


@pytest.mark.parametrize(
    ("name", "product_brand", "toolkit"),
    [
        ("nvidia-smi-q-rtx-a6000-550.txt", "NVIDIA RTX", "NvidiaRTX"),
        ("nvidia-smi-q-v100-tesla-550.txt", "Tesla", "Tesla"),
        ("nvidia-smi-q-v100-tesla-470.txt", "Tesla", "Tesla"),
        ("nvidia-smi-q-h100-nvidia-560.txt", "NVIDIA", "Nvidia"),
        ("nvidia-smi-q-t4-nvidia-530.txt", "NVIDIA", "Nvidia"),
        ("nvidia-smi-q-vgpu-vws-535.txt", "NVIDIA RTX Virtual Workstation", "VWS"),
    ],
)
def test_product_brand_maps_to_the_toolkit_name(name: str, product_brand: str, toolkit: str) -> None:
    (brand,) = smi.parse_nvidia_smi_brands(fixture(name))
    assert brand == product_brand
    assert smi.toolkit_brand(brand) == toolkit


def test_every_nvml_brand_has_a_toolkit_name_and_an_smi_spelling() -> None:
    # nvml.h: NVML_BRAND_UNKNOWN = 0 ... NVML_BRAND_TITAN_RTX = 16 (NVML_BRAND_COUNT = 18 skips 17)
    assert sorted(smi.NVML_BRAND_TOOLKIT_NAMES) == list(range(17))
    assert set(smi.SMI_BRAND_TO_NVML.values()) == set(range(17))
    # the spellings the cuda images' NVIDIA_REQUIRE_CUDA use are among the toolkit's names
    names = {n.lower() for n in smi.NVML_BRAND_TOOLKIT_NAMES.values()}
    used = {term.split("=")[1] for term in REQ_1211.replace(" ", ",").split(",") if term.startswith("brand=")}
    assert used == {
        *("tesla", "unknown", "nvidia", "nvidiartx", "geforce", "geforcertx"),
        *("quadro", "quadrortx", "titan", "titanrtx"),
    }
    assert used <= names
    assert smi.toolkit_brand("Quadro RTX") == "QuadroRTX"
    assert smi.toolkit_brand("GeForce") == "GeForce"
    assert smi.toolkit_brand("  nvidia   rtx ") == "NvidiaRTX"
    assert smi.toolkit_brand("Some Brand Of Tomorrow") is None
    assert smi.toolkit_brand(None) is None


def test_nvml_brands_read_as_the_toolkit_reads_them() -> None:
    lib = FakeNvml([13, 2, 14, 99])
    # an unknown enum reads as the default
    assert smi.nvml_brands_from(lib) == ["NvidiaRTX", "Tesla", "Nvidia", "Unknown"]
    assert lib.shutdown
    for step in ("init", "count", "handle", "brand"):
        assert smi.nvml_brands_from(FakeNvml([13], fail=step)) is None, step
