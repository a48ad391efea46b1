"""imagekit.refresh.cuda_wheels with pip itself, against a package index on disk (slow: pip
resolves twice, ~3 s each): the report pip writes is read back within its bounds, checked, saved
trimmed, and gives the pins of the table; pip's own refusal is one line naming the build.

The index (testbed/sample_projects.cuda_index) holds stand-in wheels with the Requires-Dist shape of torch
2.1.2's CUDA 12.1 build, whose pins are the ones imagekit/data/cuda_wheels.yaml holds for it.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from imagekit.facts.cuda_wheels import parse_cuda_wheels
from imagekit.refresh import cuda_wheels as tool
from imagekit.refresh.cuda_pins import Build, resolve
from imagekit.refresh.pip_report import RefreshError
from testbed.sample_projects import CUDA_PINS_2_1_2, cuda_index, cuda_index_matrix


def test_the_pins_come_from_pips_own_report_saved_trimmed(tmp_path: Path) -> None:
    index = cuda_index(tmp_path / "index")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(cuda_index_matrix(index), encoding="utf-8")
    data, saved = tmp_path / "cuda_wheels.yaml", tmp_path / "saved"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = tool.main(["--matrix", str(matrix), "--data", str(data), "--save-reports", str(saved),
                          "--today", "2026-12-03", "--write"])  # fmt: skip
    assert code == 0 and not stderr.getvalue()
    table = parse_cuda_wheels(yaml.safe_load(data.read_text(encoding="utf-8")))
    assert table.pinned("2.1.2", "cu121", "x86_64") == CUDA_PINS_2_1_2
    report = json.loads((saved / "torch-2.1.2-cu121-x86_64.json").read_text(encoding="utf-8"))
    assert set(report) == {"environment", "install", "version"}  # what is read, no wheel's URL
    assert all(set(item) == {"metadata"} for item in report["install"])
    assert index.as_uri() not in json.dumps(report)


def test_pips_refusal_is_its_error_line(tmp_path: Path) -> None:
    index = cuda_index(tmp_path / "index")
    build = Build("9.9.9", "cu121", "x86_64", "3.11", "2.35", f"{index.as_uri()}/cu121")
    with pytest.raises(RefreshError, match=r"^ERROR: .*torch==9\.9\.9"):
        resolve(build)
