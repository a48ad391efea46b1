"""The device names an engine's CDI specs define: read as nvidia-ctk writes them (by index and by
uuid, tests/fixtures/cdi), of the kind asked for only, and a bounded look at each spec directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.verify import cdi_specs
from imagekit.verify.cdi_specs import spec_device_names, spec_paths
from tests.conftest import REPO

SPECS = REPO / "tests" / "fixtures" / "cdi"
GPU = "nvidia.com/gpu"


def test_the_names_nvidia_ctk_writes_by_index_and_by_uuid_are_read() -> None:
    assert spec_device_names([str(SPECS / "index")], GPU) == {"0", "1", "1:0", "all"}
    by_uuid = spec_device_names([str(SPECS / "uuid")], GPU)
    assert by_uuid is not None and "all" in by_uuid and len(by_uuid) == 4
    assert {name.split("-")[0] for name in by_uuid} == {"GPU", "MIG", "all"}
    # several directories: every name of every spec of the kind
    both = spec_device_names([str(SPECS / "index"), str(SPECS / "uuid")], GPU)
    assert both == {"0", "1", "1:0", "all"} | by_uuid


def test_no_spec_of_the_kind_is_none_and_an_empty_one_is_no_names(tmp_path: Path) -> None:
    assert spec_device_names([str(tmp_path), str(tmp_path / "missing")], GPU) is None
    (tmp_path / "fpga.yaml").write_text("kind: vendor.example/fpga\ndevices: [{name: '0'}]\n")
    assert spec_device_names([str(tmp_path)], GPU) is None
    assert spec_device_names([str(tmp_path)], "vendor.example/fpga") == {"0"}
    (tmp_path / "nvidia.yaml").write_text(f"kind: {GPU}\ndevices: []\n")
    assert spec_device_names([str(tmp_path)], GPU) == frozenset()


@pytest.mark.parametrize(
    "text",
    [
        f"kind: {GPU}\ndevices: [{{name: '0'\n",  # broken YAML
        f"kind: {GPU}\ndevices: {{name: '0'}}\n",  # devices not a list
        "- a list\n",
        "\xff\xfe",
    ],
)
def test_a_spec_that_cannot_be_read_is_passed_over(tmp_path: Path, text: str) -> None:
    (tmp_path / "broken.yaml").write_text(text, encoding="latin-1")
    (tmp_path / "nvidia.json").write_text(
        f'{{"kind": "{GPU}", "devices": [{{"name": "0"}}, {{"name": ["x"]}}]}}'
    )
    assert spec_device_names([str(tmp_path)], GPU) == {"0"}  # the good spec's, a name of no string left out


def test_only_cdis_suffixes_are_specs_and_each_directory_is_looked_at_boundedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("b.yaml", "a.json", "c.yml", "nvidia.yaml.bak", "README.md"):
        (tmp_path / name).write_text(f"kind: {GPU}\ndevices: [{{name: '{name}'}}]\n")
    assert [p.name for p in spec_paths([str(tmp_path)])] == ["a.json", "b.yaml", "c.yml"]
    assert spec_device_names([str(tmp_path)], GPU) == {"a.json", "b.yaml", "c.yml"}
    monkeypatch.setattr(cdi_specs, "MAX_CDI_SPEC_FILES", 2)
    assert len(spec_paths([str(tmp_path)])) <= 2


def test_a_spec_over_the_bound_or_not_a_regular_file_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.yaml")  # a reader that opened it would wait for a writer forever
    (tmp_path / "dir.json").mkdir()
    big = f"kind: {GPU}\ndevices: [{{name: '0'}}]\n"
    (tmp_path / "nvidia.yaml").write_text(big)
    monkeypatch.setattr(cdi_specs, "CDI_SPEC_BYTES", len(big) - 1)
    assert spec_device_names([str(tmp_path)], GPU) is None
    monkeypatch.setattr(cdi_specs, "CDI_SPEC_BYTES", len(big))
    assert spec_device_names([str(tmp_path)], GPU) == {"0"}
