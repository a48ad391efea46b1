"""Version parsers of the probe (imagekit/probe/versions.py) on real captured outputs
(nvcc/ptxas, version.json, cudnn_version.h, os-release; tests/fixtures/check/NOTES.md)."""

from __future__ import annotations

import pytest

from imagekit.probe import versions
from tests.unit.probe_runs import (
    fixture,
)


@pytest.mark.parametrize(
    ("name", "release", "version"),
    [
        ("ptxas-version-11.8.89.txt", "11.8", "11.8.89"),
        ("ptxas-version-12.1.105.txt", "12.1", "12.1.105"),
        ("nvcc-version-13.0.88.txt", "13.0", "13.0.88"),
    ],
)
def test_parse_nvcc_version_on_captured_outputs(name: str, release: str, version: str) -> None:
    assert versions.parse_nvcc_version(fixture(name)) == {"release": release, "version": version}


def test_parse_nvcc_version_published_12_1_and_garbage() -> None:
    published = (
        "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\n"
        "Built on Tue_Feb__7_19:32:13_PST_2023\nCuda compilation tools, release 12.1, V12.1.66\n"
        "Build cuda_12.1.r12.1/compiler.32415258_0\n"
    )
    assert versions.parse_nvcc_version(published) == {"release": "12.1", "version": "12.1.66"}
    assert versions.parse_nvcc_version("bash: nvcc: command not found") is None


def test_parse_version_json() -> None:
    assert versions.parse_version_json(fixture("version-json-11.8-excerpt.json")) == "11.8.20220929"
    assert versions.parse_version_json(fixture("version-json-13.3.1-excerpt.json")) == "13.3.1"
    assert versions.cuda_minor("11.8.20220929") == "11.8"
    assert versions.parse_version_json("not json") is None
    assert versions.parse_version_json("[]") is None


def test_parse_cudnn_header_and_torch_ints() -> None:
    assert versions.parse_cudnn_header(fixture("cudnn-version-h-9.5.0.txt")) == "9.5.0"
    header_8 = "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 2\n"
    assert versions.parse_cudnn_header(header_8) == "8.9.2"
    assert versions.parse_cudnn_header("#define CUDNN_MAJOR 8\n") is None
    assert versions.cudnn_int_to_version(8902) == "8.9.2"
    assert versions.cudnn_int_to_version(8700) == "8.7.0"
    assert versions.cudnn_int_to_version(90100) == "9.1.0"
    assert versions.cudnn_int_to_version(91200) == "9.12.0"


def test_parse_os_release() -> None:
    found = versions.parse_os_release('NAME="Ubuntu"\nVERSION_ID="22.04"\n# comment\n')
    assert found == {"NAME": "Ubuntu", "VERSION_ID": "22.04"}
