"""pin-bases: writes the lock of what the registries name now, or with --check only compares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.plan.pin_file import pins_path
from tests.conftest import run_cli
from tests.unit.cli.samples import CUDA_BASE, GOOD_AXES

DEVEL = "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04"


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The digest every registry names for any tag, as the test sets it (no network)."""
    from imagekit.registry import lookup

    answer = {"digest": "sha256:" + "1" * 64}

    class Registry:
        def __init__(self, host: str, credentials: object, **_: object) -> None:
            pass

        def tag_digest(self, repository: str, tag: str) -> str:
            return answer["digest"]

        def close(self) -> None:
            pass

    monkeypatch.setattr(lookup, "Registry", Registry)
    return answer


def test_pin_bases_writes_the_lock_and_check_refuses_a_moved_tag(
    write_matrix: Callable[[str], Path], answers: dict[str, str]
) -> None:
    matrix = write_matrix(GOOD_AXES + CUDA_BASE)
    one = answers["digest"]
    written = run_cli("pin-bases", "--matrix", str(matrix))
    assert written.exit_code == 0, written
    assert written.stdout == f"{DEVEL} {one} (new)\n"
    assert written.stderr == f"imagekit: pinned: 1 base(s) in {pins_path(matrix)}\n"
    lock = pins_path(matrix).read_bytes()
    assert run_cli("pin-bases", "--matrix", str(matrix), "--check").exit_code == 0

    answers["digest"] = "sha256:" + "2" * 64
    checked = run_cli("pin-bases", "--matrix", str(matrix), "--check")
    assert checked.exit_code == 1
    assert checked.stdout == f"{DEVEL} {answers['digest']} (moved from {one})\n"
    assert checked.stderr == (
        f"imagekit: error: {pins_path(matrix).name} differs from what the registries name now;"
        " run without --check\n"
    )
    assert pins_path(matrix).read_bytes() == lock  # --check writes nothing
