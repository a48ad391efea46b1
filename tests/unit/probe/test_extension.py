"""The extension check's module (imagekit/probe/extension.py) without torch: the functions it binds,
the digest of the sources a built module must match, and where nvcc is found. Built and run on the
torch CPU wheel: tests/slow/probe/test_compilation.py; built at image build time: test_prebuilt.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagekit.probe import extension


def test_each_build_binds_its_own_function() -> None:
    assert extension.function_name(cuda=False) == extension.CPU_FUNCTION
    assert extension.function_name(cuda=True) == extension.CUDA_FUNCTION
    assert extension.CPU_FUNCTION in extension.EXT_CPP and extension.CUDA_FUNCTION in extension.EXT_CUDA_DECL


def test_the_source_digest_covers_the_sources_and_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = extension.source_digest()
    assert re.fullmatch(r"[0-9a-f]{64}", digest) and extension.source_digest() == digest
    monkeypatch.setattr(extension, "BUILD_RECIPE", extension.BUILD_RECIPE + " changed")
    assert extension.source_digest() != digest  # a module built another way is never loaded


def test_nvcc_is_looked_up_on_the_image_s_path(tmp_path: Path) -> None:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n", encoding="utf-8")
    nvcc.chmod(0o755)
    assert extension.nvcc_path({"PATH": f"/nonexistent:{tmp_path}"}) == str(nvcc)
    found = extension.nvcc_path({"PATH": "/nonexistent"})
    assert found is None or found == "/usr/local/cuda/bin/nvcc"  # where CUDA images keep it
