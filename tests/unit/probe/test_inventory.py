"""The probe's inventory (imagekit/probe/inventory.py): the CUDA libraries this process mapped."""

from __future__ import annotations

from pathlib import Path

from imagekit.probe import inventory


def test_loaded_cuda_libraries_include_curand_and_cusolver(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /site/nvidia/curand/lib/libcurand.so.10\n"
        "7f01-7f02 r-xp 00000000 08:01 2 /site/nvidia/cusolver/lib/libcusolver.so.11\n"
        "7f02-7f03 r-xp 00000000 08:01 3 /usr/lib/libz.so.1\n"
    )
    names = [Path(p).name for p in inventory.loaded_cuda_libraries(str(maps))]
    assert names == ["libcurand.so.10", "libcusolver.so.11"]
