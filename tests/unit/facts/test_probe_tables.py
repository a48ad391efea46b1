"""The probe's tables (driver table, GEMM and NCCL floors, datacenter brands, wheel arch lists): data
in imagekit/data, generated into the zipapp as tables.json, and read from there by the probe."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

from imagekit.facts import probe_tables
from imagekit.facts.compat import load_compat
from imagekit.probe import arguments, context, require, tables
from imagekit.probe.driver import CUDA_DRIVER_TABLE, _runs_through_forward_compat, driver_satisfies
from imagekit.render import probe_bundle, recipe
from tests.conftest import REPO

DATA = REPO / "imagekit" / "data"


def archived_tables() -> bytes:
    with zipfile.ZipFile(io.BytesIO(probe_bundle.build_zipapp())) as archive:
        return archive.read(f"{probe_bundle.PACKAGE}/{tables.TABLES_NAME}")


def test_the_zipapp_carries_the_generated_tables_byte_for_byte() -> None:
    assert archived_tables() == probe_tables.tables_json() == probe_tables.tables_json()
    assert json.loads(archived_tables()) == json.loads(json.dumps(tables.tables()))  # the source-tree path


def test_every_table_keeps_its_source_note() -> None:
    gpus = yaml.safe_load((DATA / "gpus.yaml").read_text(encoding="utf-8"))
    for name, table in gpus.items():
        assert isinstance(table.get("source"), str) and len(table["source"]) > 80, name
    generated = probe_tables.probe_tables()
    for name, table in generated.items():
        assert table.get("source"), name


def test_the_driver_table_is_compat_yaml_with_the_newest_patch_driver() -> None:
    data = yaml.safe_load((DATA / "compat.yaml").read_text(encoding="utf-8"))
    releases = data["cuda"]["releases"]
    for minor, row in releases.items():
        full, floor = CUDA_DRIVER_TABLE[minor]
        assert floor == row["minor_floor"]
        known = [d for d in [row["driver"], *(row.get("patch_drivers") or {}).values()] if d]
        newest = max(known, key=lambda v: [int(x) for x in v.split(".")]) if known else None
        assert full == newest
    # CUDA 13.2.2's full-compatibility driver is 595.71.05, not 13.2.1's 595.58.03 (pytorch issue 196351)
    assert CUDA_DRIVER_TABLE["13.2"] == ("595.71.05", "580.65.06")
    assert driver_satisfies("595.58.03", "13.2") == "minor"
    assert driver_satisfies("595.71.05", "13.2") == "full"
    # CUDA 13.5's own driver was not read: an R580+ driver runs it under minor-version compatibility
    assert CUDA_DRIVER_TABLE["13.5"] == (None, "580.65.06")
    assert driver_satisfies("620.10.01", "13.5") == "minor"
    assert driver_satisfies("575.57.08", "13.5") == "too_old"
    assert CUDA_DRIVER_TABLE["13.4"] == ("615.71.09", "580.65.06")


def test_the_probe_reads_the_tables_from_the_archive_alone(tmp_path: Path) -> None:
    """Isolated from this source tree (-I: no imagekit importable), as in an image."""
    archive = tmp_path / "check.py"
    archive.write_bytes(probe_bundle.build_zipapp())
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from imagekit_probe import tables, driver, perf; "
        "print(json.dumps([driver.CUDA_DRIVER_TABLE['13.2'], sorted(tables.datacenter_brands()), "
        "perf.gemm_floor('NVIDIA L40S')[0]]))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code, str(archive)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [["595.71.05", "580.65.06"], ["nvidia", "tesla"], 150.0]


def test_wheel_arch_lists_per_variant_and_release() -> None:
    assert probe_tables.wheel_arch_list("cu126") == "5.0;6.0;7.0;7.5;8.0;8.6;9.0"
    assert probe_tables.wheel_arch_list("cu128", "2.8.0") == "7.0;7.5;8.0;8.6;9.0;10.0;12.0"
    assert probe_tables.wheel_arch_list("cu128", "2.7.1") == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert probe_tables.wheel_arch_list("cpu") is None
    # read from the wheels' arch flags (and 2.11.0's images): no Volta in CUDA 13, no PTX on
    # x86_64, Thor (11.0) on aarch64
    for variant, torch in (("cu130", "2.11.0"), ("cu130", "2.14.1"), ("cu132", "2.15.0")):
        assert probe_tables.wheel_arch_list(variant, torch) == "7.5;8.0;8.6;9.0;10.0;12.0"
        assert probe_tables.wheel_arch_list(variant, torch, "aarch64") == "8.0;9.0;10.0;11.0;12.0"


def test_every_cuda_wheel_variant_has_an_arch_list() -> None:
    for release in load_compat().torch.values():
        for variant in release.variants:
            assert variant == "cpu" or probe_tables.wheel_arch_list(variant, release.minor), variant


# -- forward compatibility counts only on datacenter brands ----------------------------------------


def _compat_ctx(brand: str | None) -> tuple[context.Context, dict[str, Any], dict[str, Any]]:
    brands = ("tesla", "nvidia", "geforce", "nvidiartx")
    terms = " ".join(f"brand={b},driver>=470,driver<471" for b in brands)
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.1 " + terms}
    ctx = context.Context(arguments.Expect(cuda="12.1"), env)
    ctx._devices = [{"arch": "8.0", "brand": brand, "product_brand": None, "brand_source": "test"}]
    compat = {"libs": ["/usr/local/cuda/compat/libcuda.so.530.30.02"], "versions": ["530.30.02"], "dirs": []}
    detail: dict[str, Any] = {"host_cuda": "11.4", "forward_compat": dict(compat)}
    return ctx, compat, detail


def test_forward_compat_counts_on_datacenter_brands_only() -> None:
    for brand, runs in (
        ("tesla", True),
        ("nvidia", True),
        ("geforce", False),
        ("nvidiartx", False),
        (None, False),
    ):
        ctx, compat, detail = _compat_ctx(brand)
        got = _runs_through_forward_compat(ctx, "470.57.02", detail, compat, True)
        assert got is runs, brand
        if not runs:
            assert "datacenter GPUs" in detail["forward_compat"]["brand_note"]


# -- NVIDIA_REQUIRE_CUDA on plain bases agrees with the driver check --------------------------------


def test_require_cuda_on_plain_bases_admits_what_the_driver_check_admits() -> None:
    """The toolkit compares `cuda` with the CUDA version the host driver reports; the driver check
    compares the driver with the minor-version floor. A driver at the floor passes both."""
    # driver -> the CUDA version it reports (NVIDIA's table: the GA drivers of 11.0, 12.0, 12.1, 13.0)
    reports = {"450.80.02": "11.0", "525.60.13": "12.0", "530.30.02": "12.1", "580.65.06": "13.0"}
    for minor, (_, floor) in CUDA_DRIVER_TABLE.items():
        requirement = recipe.require_cuda(minor)
        host_cuda = reports[floor]
        verdict = require.evaluate_require_verdict(requirement, {"cuda": host_cuda, "driver": floor})
        assert verdict.satisfied is True, (minor, requirement, host_cuda)
        assert driver_satisfies(floor, minor) in ("minor", "full")
    # the drivers the old cuda>=<minor> refused: R525-R529 for cu121, R580/R590 for cu13x
    for minor, driver, host_cuda in (("12.1", "525.147.05", "12.0"), ("13.2", "580.95.05", "13.0")):
        props = {"cuda": host_cuda, "driver": driver}
        assert require.evaluate_require_verdict(recipe.require_cuda(minor), props).satisfied is True
        assert require.evaluate_require_verdict(f"cuda>={minor}", props).satisfied is False
        assert driver_satisfies(driver, minor) == "minor"
