"""imagekit.refresh.compat_table: the torch section spliced in, the CUDA rows' `toolkit` from the
recorded cuda-toolkit listing (tests/fixtures/compat/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.refresh.compat_table import splice, toolkit_releases, with_toolkit
from imagekit.refresh.pip_report import RefreshError

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "compat"


def test_splice_replaces_only_the_torch_section() -> None:
    text = "# head\n\ntorch:\n  old: 1\n  # owned comment\n\n# about cuda\ncuda:\n  x: 1\n"
    assert splice(text, "torch:\n  new: 2\n") == "# head\n\ntorch:\n  new: 2\n\n# about cuda\ncuda:\n  x: 1\n"
    with pytest.raises(RefreshError):
        splice("cuda: {}\n", "torch:\n")


# What the recorded file list of cuda-toolkit (PyPI, 2026-12-07) holds: the newest final release of
# each CUDA minor. 13.4.0rc1 is a pre-release; the files 12.8.2.0, 12.9.2.0, 13.0.3.0, 13.1.2.0 and
# 13.4.1.0 are the releases 12.8.2 ... 13.4.1 to pip (PEP 440 pads with zeros).
RECORDED_TOOLKITS = {
    "11.8": "11.8.0",
    "12.0": "12.0.1",
    "12.1": "12.1.1",
    "12.2": "12.2.2",
    "12.3": "12.3.2",
    "12.4": "12.4.1",
    "12.5": "12.5.1",
    "12.6": "12.6.3",
    "12.8": "12.8.2",
    "12.9": "12.9.2",
    "13.0": "13.0.3",
    "13.1": "13.1.2",
    "13.2": "13.2.2",
    "13.3": "13.3.1",
    "13.4": "13.4.3",
    "13.5": "13.5.0",
}


def toolkit_listing() -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = json.loads((FIXTURES / "files-cuda-toolkit.json").read_text())["files"]
    return files


def test_the_recorded_toolkit_listing_gives_each_cuda_minors_newest_release() -> None:
    files = toolkit_listing()
    assert "cuda_toolkit-13.4.0rc1-py2.py3-none-any.whl" in [f["filename"] for f in files]
    assert toolkit_releases(files) == RECORDED_TOOLKITS
    # a yanked release is no release: 13.5 falls back to nothing, 13.4 to its previous patch
    yanked = [
        {**f, "yanked": "broken metadata"}
        if f["filename"].startswith(("cuda_toolkit-13.5.", "cuda_toolkit-13.4.3"))
        else f
        for f in files
    ]
    found = toolkit_releases(yanked)
    assert "13.5" not in found and found["13.4"] == "13.4.2"


def test_the_shipped_table_carries_the_recorded_toolkits() -> None:
    """imagekit/data/compat.yaml was refreshed from this recording: every row's toolkit is PyPI's."""
    rows = yaml.safe_load((REPO / "imagekit" / "data" / "compat.yaml").read_text())["cuda"]["releases"]
    assert {m: r.get("toolkit") for m, r in rows.items()} == {m: RECORDED_TOOLKITS.get(m) for m in rows}


def test_a_row_keeps_its_form_when_its_toolkit_is_written() -> None:
    assert with_toolkit(' image: "12.1.1", minor_floor: "525.60.13" ', "12.1.1") == (
        ' image: "12.1.1", minor_floor: "525.60.13", toolkit: "12.1.1" '
    )
    assert with_toolkit(' image: "13.4.2", checked: false ', "13.4.3") == (
        ' image: "13.4.2", toolkit: "13.4.3", checked: false '
    )
    assert with_toolkit(' image: null, toolkit: "13.5.0", checked: false ', "13.5.1") == (
        ' image: null, toolkit: "13.5.1", checked: false '
    )
