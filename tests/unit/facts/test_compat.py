"""Compatibility knowledge: the data says what FACTS.md says, and impossible cells are refused."""

from __future__ import annotations

from imagekit.core.versions import compare, cuda_variant, minor_of, version_key
from imagekit.facts.compat import load_compat


def test_version_helpers() -> None:
    assert version_key("12.10") > version_key("12.9")
    assert compare("2.10", "2.10.0") == 0 and compare("2.10.1", "2.10") == 1 and compare("2.9", "2.10") == -1
    assert compare("2.10.0+cu126", "2.10.0") == 0  # the release segment decides
    assert minor_of("2.1.0a0+32f93b1") == "2.1"
    assert (
        cuda_variant("12.1") == "cu121" and cuda_variant("11.8") == "cu118" and cuda_variant("cpu") == "cpu"
    )


def test_wheel_variants_match_facts() -> None:
    compat = load_compat()
    has_118 = [m for m, r in compat.torch.items() if "cu118" in r.variants]
    has_121 = [m for m, r in compat.torch.items() if "cu121" in r.variants]
    assert has_118 == ["2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7"]
    assert has_121 == ["2.1", "2.2", "2.3", "2.4", "2.5"]
    assert set(compat.torch) >= {f"2.{n}" for n in range(10)}
    assert compat.torch["2.0"].patch("2.0.0") is not None
    pair = compat.torch["2.0"].patch("2.0.0")
    assert pair is not None and (pair.torchvision, pair.torchaudio) == ("0.15.1", "2.0.1")
    assert [m for m, r in compat.torch.items() if r.cudnn_major == 8] == ["2.0", "2.1", "2.2", "2.3"]


def test_driver_minimums_and_images_match_facts() -> None:
    compat = load_compat()
    assert (compat.cuda["11.8"].driver_min, compat.cuda["11.8"].driver_minor_floor) == (
        "520.61.05",
        "450.80.02",
    )
    assert (compat.cuda["12.1"].driver_min, compat.cuda["12.1"].driver_minor_floor) == (
        "530.30.02",
        "525.60.13",
    )
    assert compat.cuda["12.2"].driver_min == "535.104.05"
    assert compat.cuda["12.1"].image_version == "12.1.1"  # 12.1.0 is end-of-life
    assert compat.cuda["11.8"].image_version == "11.8.0"


def test_ngc_stack_matches_facts() -> None:
    ngc = load_compat().stacks["ngc-pytorch-23.10"]
    assert (ngc.torch, ngc.cuda, ngc.cudnn, ngc.python, ngc.nccl) == (
        "2.1.0a0+32f93b1",
        "12.2.2",
        "8.9.5.29",
        "3.10",
        "2.19.3",
    )
