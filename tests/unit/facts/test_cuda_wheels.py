"""imagekit/data/cuda_wheels.yaml as typed facts: what a lookup answers, and a bad edit refused."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.facts.compat import load_compat
from imagekit.facts.cuda_wheels import is_cuda_project, load_cuda_wheels, parse_cuda_wheels


def table(pins: Any) -> dict[str, Any]:
    return {
        "checked_on": "2026-12-03",
        "wheels": {"2.1.2": {"cu121": {"x86_64": pins}}},
        "sources": {"2.1.2": {"cu121": {"x86_64": "pip --dry-run --report"}}},
    }


def test_the_packaged_table_answers_per_build_and_machine() -> None:
    wheels = load_cuda_wheels()
    old = wheels.pinned("2.1.2", "cu121", "x86_64")
    assert old is not None and "nvidia-cudnn-cu12==8.9.2.26" in old and len(old) == 11
    # an open requirement (cuSOLVER's nvjitlink) is left to torch's own step
    assert not any(p.startswith("nvidia-nvjitlink") for p in old)
    current = wheels.pinned("2.15.0", "cu132", "aarch64")
    assert current is not None and "cuda-toolkit==13.2.2" in current and "nvidia-cublas==13.4.1.3" in current
    assert wheels.pinned("2.1.2", "cu118", "x86_64") is None  # not read: PyPI serves only cu121
    assert wheels.pinned("2.9.1", "cu128", "aarch64") is None  # PyPI's aarch64 2.9.1 is a CPU build


def test_the_table_agrees_with_compat_yaml_where_both_name_a_library() -> None:
    """Two files, one fact: the cuDNN, NCCL and cudart versions compat.yaml records for a variant
    must be the ones the CUDA layer installs (a refresh of one alone fails here)."""
    compat = load_compat()
    checked = 0
    for (torch, variant, machine), pins in load_cuda_wheels().pins.items():
        release = compat.torch_release(torch)
        libraries = release.libraries.get(variant) if release else None
        if libraries is None or machine != "x86_64" or release is None or release.latest.torch != torch:
            continue
        versions = {pin.split("==")[0]: pin.split("==")[1] for pin in pins}
        suffix = "" if variant.startswith("cu13") else f"-{variant[:4]}"
        assert versions[f"nvidia-cudnn{suffix or '-cu13'}"] == libraries.cudnn, (torch, variant)
        if libraries.nccl:
            assert versions[f"nvidia-nccl{suffix or '-cu13'}"] == libraries.nccl, (torch, variant)
        if libraries.cudart:
            assert versions[f"nvidia-cuda-runtime{suffix}"] == libraries.cudart, (torch, variant)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize(
    ("pins", "problem"),
    [
        ([], "non-empty list"),
        ("nvidia-cublas-cu12==12.1.3.1", "non-empty list"),
        (["triton==2.1.0"], "not one of CUDA's wheels"),
        (["nvidia-cublas-cu12>=12"], "not project==version"),
        (["nvidia-cublas-cu12==12.1.3.1; rm -rf /"], "not project==version"),
        (["nvidia_cublas_cu12==12.1.3.1"], "not project==version"),
        (["nvidia-nccl-cu12==2.18.1", "nvidia-cublas-cu12==12.1.3.1"], "sorted"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(pins: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        parse_cuda_wheels(table(pins))
    assert "wheels.2.1.2.cu121.x86_64" in str(caught.value)


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="machine must be one of"):
        parse_cuda_wheels({"wheels": {"2.1.2": {"cu121": {"riscv64": ["nvidia-x==1"]}}}})
    with pytest.raises(ValueError, match="CUDA variant"):
        parse_cuda_wheels({"wheels": {"2.1.2": {"cpu": {"x86_64": ["nvidia-x==1"]}}}})
    with pytest.raises(ValueError, match="torch patch"):
        parse_cuda_wheels({"wheels": {"2.1": {"cu121": {"x86_64": ["nvidia-x==1"]}}}})
    with pytest.raises(ValueError, match="mapping"):
        parse_cuda_wheels({"wheels": ["nvidia-x==1"]})


def test_cuda_projects() -> None:
    assert is_cuda_project("nvidia-cudnn-cu12") and is_cuda_project("cuda-toolkit")
    assert not is_cuda_project("triton") and not is_cuda_project("torch")


@pytest.mark.parametrize("raw", [None, ["wheels"], "wheels: {}", 3])
def test_a_value_that_is_no_mapping_is_refused_naming_the_source(raw: Any) -> None:
    """The refresh script reads the table from any path it is given: whatever it holds is refused
    in one ValueError naming that file, never an AttributeError."""
    with pytest.raises(ValueError, match=r"^/tmp/t\.yaml: wheels: expected a mapping"):
        parse_cuda_wheels(raw, "/tmp/t.yaml")


def test_a_bad_key_or_value_is_repeated_bounded_and_by_its_kind() -> None:
    with pytest.raises(ValueError, match=r"wheels\.'2\.1\.2x+\.\.\.': expected a torch patch") as caught:
        parse_cuda_wheels({"wheels": {"2.1.2" + "x" * 5_000: {}}})
    assert len(str(caught.value)) < 200
    with pytest.raises(ValueError, match=r"x86_64: a mapping is not project==version"):
        parse_cuda_wheels(table([{"nvidia-x": "1"}]))


def test_every_entry_names_its_source_and_a_stray_note_is_refused() -> None:
    raw = table(["nvidia-cublas-cu12==12.1.3.1"])
    del raw["sources"]
    with pytest.raises(ValueError, match=r"wheels\.2\.1\.2\.cu121\.x86_64: no note in sources"):
        parse_cuda_wheels(raw)
    raw = table(["nvidia-cublas-cu12==12.1.3.1"])
    raw["sources"]["2.2.2"] = {"cu121": {"x86_64": "a note"}}
    with pytest.raises(ValueError, match=r"sources\.2\.2\.2\.cu121\.x86_64: names no entry"):
        parse_cuda_wheels(raw)
    raw = table(["nvidia-cublas-cu12==12.1.3.1"])
    raw["bundled"] = {"2.1.2": {"cu118": {"x86_64": ""}}}
    with pytest.raises(ValueError, match=r"bundled\.2\.1\.2\.cu118\.x86_64: expected a note"):
        parse_cuda_wheels(raw)


def test_the_packaged_table_records_the_bundled_builds_and_the_compiled_pins() -> None:
    wheels = load_cuda_wheels()
    # PyTorch's index's 2.1.2 brings CUDA inside torch: nothing to split, for cu118 and cu121
    assert "bundles" in (wheels.bundles("2.1.2", "cu118", "x86_64") or "")
    assert wheels.bundles("2.1.2", "cu121", "x86_64") and wheels.bundles("2.2.2", "cu121", "x86_64") is None
    for torch, cudnn, nccl in (("2.2.2", "8.7.0.84", "2.19.3"), ("2.5.1", "9.1.0.70", "2.21.5")):
        pins = wheels.pinned(torch, "cu118", "x86_64")
        assert pins and f"nvidia-cudnn-cu11=={cudnn}" in pins and f"nvidia-nccl-cu11=={nccl}" in pins
        assert "replicate/monobase@" in wheels.sources[(torch, "cu118", "x86_64")]
    assert "nvidia-nccl-cu12==2.21.5" in (wheels.pinned("2.5.1", "cu121", "x86_64") or ())


def test_the_layer_order_puts_what_changes_least_lowest_whatever_the_cell_pins() -> None:
    wheels = load_cuda_wheels()
    old, new = wheels.pinned("2.2.2", "cu121", "x86_64"), wheels.pinned("2.4.1", "cu121", "x86_64")
    assert old and new
    ordered_old, ordered_new = wheels.layer_order(old), wheels.layer_order(new)
    # NCCL changes with nearly every release, cuDNN with a major: both on top, NCCL last
    assert ordered_old[-2:] == ("nvidia-cudnn-cu12==8.9.2.26", "nvidia-nccl-cu12==2.19.3")
    assert ordered_new[:9] == ordered_old[:9]  # the nine that never moved: the same layers, same order
    # a pin's place never depends on the others: any subset keeps the relative order
    assert wheels.layer_order(tuple(reversed(old[::2]))) == tuple(p for p in ordered_old if p in old[::2])
    assert wheels.layer_order(("nvidia-unknown-cu12==1", *old))[-1] == "nvidia-unknown-cu12==1"
