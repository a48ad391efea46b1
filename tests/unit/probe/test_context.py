"""What the checks share (imagekit/probe/context.py): NVIDIA_DRIVER_CAPABILITIES read as the
toolkit reads it, and the run's scratch space under the temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagekit.probe import arguments, context
from tests.unit.probe_runs import clean_env


def test_workdir_lives_under_tmpdir_and_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    ctx = context.Context(arguments.Expect(), clean_env(TMPDIR=str(tmp_path)))
    work = Path(ctx.subdir("compile-cpu"))
    assert work.parent.parent == tmp_path and work.is_dir()
    with ctx.cache_environment():
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # restored
    ctx.cleanup()
    assert list(tmp_path.iterdir()) == []


def test_driver_capabilities_parsing() -> None:
    assert context.driver_capabilities(None) == {"utility"}
    assert "compute" in context.driver_capabilities("all")
    assert context.driver_capabilities("compute, video") == {"compute", "video"}
