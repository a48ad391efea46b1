"""Loading a matrix: a front end built from its cell (and refused with other settings), an
8-million-cell matrix refused within a second, many unknown versions a few warning lines."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.core.limits import WARNINGS_SHOWN
from imagekit.plan.cells import FrontendCell, WheelCell
from imagekit.plan.matrix import load_plan
from testbed.waivers import WAIVE_TORCH_2_5
from tests.conftest import CUDA_BASE, run_cli


def test_a_front_end_is_built_from_its_cell(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.5.1"]\n  cuda: [cpu]\n  frontend: [jupyter, ssh]\n'
        "bases:\n  deb: {image: debian:bookworm, os: debian12, python: '3.11'}\n"
        "publish: {registry: ghcr.io, repository: acme/pytorch}\n" + WAIVE_TORCH_2_5
    )
    plan = load_plan(path)
    parent, jupyter, ssh = plan.cells  # the cell itself is implied, first, and listed once
    assert isinstance(parent, WheelCell) and parent.id == "deb-torch2.5.1-cpu-py3.11-devel"
    assert isinstance(jupyter, FrontendCell) and isinstance(ssh, FrontendCell)
    assert (jupyter.id, jupyter.frontend, jupyter.parent) == (f"{parent.id}-jupyter", "jupyter", parent.id)
    # what a front end holds is its parent's: the same versions, nothing of its own to install
    assert (jupyter.torch, jupyter.python, jupyter.env) == (parent.torch, parent.python, parent.env)
    assert jupyter.base_image == f"ghcr.io/acme/pytorch:{parent.readable_tag}"
    assert jupyter.readable_tag == f"{parent.readable_tag}-jupyter" and ssh.readable_tag.endswith("-ssh")
    assert plan.with_parents((ssh,)) == (parent, ssh)


def test_a_front_end_with_other_settings_than_its_cell_is_refused(
    write_matrix: Callable[[str], Path],
) -> None:
    path = write_matrix(
        'axes:\n  torch: ["2.5.1"]\n  cuda: [cpu]\n  frontend: [none, jupyter]\n'
        "include:\n  - {frontend: jupyter, env: {X: '1'}}\n"
        "bases:\n  deb: {image: debian:bookworm, os: debian12, python: '3.11'}\n" + WAIVE_TORCH_2_5
    )
    with pytest.raises(InputError, match="other settings than the cell itself"):
        load_plan(path)


def test_an_eight_million_cell_matrix_is_refused_within_a_second(write_matrix: Callable[[str], Path]) -> None:
    torch, cuda, python = ([f'"{major}.{i}"' for i in range(200)] for major in (2, 12, 3))
    path = write_matrix(
        f"axes:\n  torch: {torch}\n  cuda: {cuda}\n  python: {python}\n".replace("'", "") + CUDA_BASE
    )
    started = time.monotonic()
    with pytest.raises(InputError, match=r"makes 8,000,000 combinations \(200 x 200 x 200\)"):
        load_plan(path)
    assert time.monotonic() - started < 1.0


def test_many_unknown_versions_print_a_few_warning_lines(write_matrix: Callable[[str], Path]) -> None:
    versions = ", ".join(f'"3.{i}.0"' for i in range(40))
    path = write_matrix(
        f"allow_unknown: true\naxes:\n  torch: [{versions}]\n  cuda: [cpu]\n"
        "defaults: {torchvision: none, torchaudio: none}\n"
        "bases:\n  deb: {image: debian:bookworm, os: debian12, python: '3.11'}\n"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("imagekit: warning:")]
    assert len(warnings) == WARNINGS_SHOWN + 1
    assert (
        warnings[-1]
        == f"imagekit: warning: ... and {40 - WARNINGS_SHOWN} more warnings like it (allow_unknown)"
    )
