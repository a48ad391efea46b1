"""The report store: records round-trip, unreadable reports, the state lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.errors import EnvironmentProblem, InputError
from imagekit.store import (
    REPORT_NAME,
    REPORT_VERSION,
    read_report,
    state_lock,
    write_report,
)
from tests.conftest import REPO
from tests.unit.report_samples import build_report

# -- the report --------------------------------------------------------------------------------------------


def test_report_round_trip(tmp_path: Path) -> None:
    report = build_report()
    path = write_report(tmp_path, report)
    assert path == tmp_path / REPORT_NAME
    assert read_report(tmp_path) == report
    data = json.loads(path.read_text())
    assert data["version"] == REPORT_VERSION
    assert data["counts"] == {"built": 1, "skipped": 1, "failed": 1, "cancelled": 1}
    assert data["cells"][0]["tags"] == ["reg/it:cuda-2.1", "reg/it:cuda-2.1-20240517"]
    assert [entry["id"] for entry in data["bases"]] == ["base-inner"]
    # A second write replaces the first completely.
    smaller = replace(report, cells=report.cells[:1], bases=())
    write_report(tmp_path, smaller)
    assert read_report(tmp_path) == smaller


def test_report_failed_and_counts() -> None:
    report = build_report()
    assert report.failed
    assert report.counts() == {"built": 1, "skipped": 1, "failed": 1, "cancelled": 1}
    fine = replace(report, cells=report.cells[:2])
    assert not fine.failed
    failed_base = replace(fine, bases=(replace(fine.bases[0], status="failed"),))
    assert failed_base.failed
    assert failed_base.counts() == {"built": 1, "skipped": 1, "failed": 0, "cancelled": 0}  # cells only


def test_read_report_without_a_report(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    assert caught.value.message == f"no build report at {tmp_path / REPORT_NAME}; run `imagekit build` first"


@pytest.mark.parametrize("text", ["{not json", "", "\x00\x01garbage"])
def test_read_report_of_garbage(tmp_path: Path, text: str) -> None:
    (tmp_path / REPORT_NAME).write_text(text)
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: not a readable report \("):
        read_report(tmp_path)


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_read_report_of_another_version(tmp_path: Path, version: object) -> None:
    data = build_report().as_json()
    data["version"] = version
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    assert caught.value.message.startswith(
        f"{tmp_path / REPORT_NAME}: report version {version!r}; expected {REPORT_VERSION}; fix it, or move"
        f" it away (`mv {tmp_path / REPORT_NAME} {tmp_path / REPORT_NAME}.bad`)"
    )


def test_read_report_without_a_version(tmp_path: Path) -> None:
    data = build_report().as_json()
    del data["version"]
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="report version None; expected 1"):
        read_report(tmp_path)


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],
        "a string",
        {"version": 1},
        {
            "version": 1,
            "matrix": "m",
            "started": "s",
            "duration_s": 1,
            "engine": "e",
            "cells": [{}],
            "bases": [],
        },
        {
            "version": 1,
            "matrix": "m",
            "started": "s",
            "duration_s": 1,
            "engine": "e",
            "cells": 3,
            "bases": [],
        },
    ],
    ids=["list", "string", "keys missing", "cell empty", "cells not a list"],
)
def test_read_report_of_a_malformed_report(tmp_path: Path, data: object) -> None:
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: malformed report \("):
        read_report(tmp_path)


# -- the state lock ----------------------------------------------------------------------------------------


def test_state_lock_writes_the_holders_pid_and_refuses_a_second_holder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "lock").write_text("4194303 left over by a crashed build\n")
    with state_lock(state):
        assert (state / "lock").read_text() == f"{os.getpid()}\n"
        for _ in range(2):  # the refused attempt must not release the first holder's lock
            with pytest.raises(EnvironmentProblem) as caught, state_lock(state):
                pytest.fail("a second holder got the lock")
            assert f"(pid {os.getpid()})" in caught.value.message
            assert str(state / "lock") in caught.value.message
    with state_lock(state):  # released on exit
        pass


def test_state_lock_is_released_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(KeyError), state_lock(tmp_path):
        raise KeyError("x")
    with state_lock(tmp_path):
        pass


def test_state_lock_held_by_another_process(tmp_path: Path) -> None:
    holder = (
        "import sys\nfrom pathlib import Path\nfrom imagekit.store import state_lock\n"
        "with state_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    sys.stdin.readline()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline() == "held\n"
        with (
            pytest.raises(EnvironmentProblem, match=rf"another `imagekit build` \(pid {process.pid}\) holds"),
            state_lock(tmp_path),
        ):
            pass
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with state_lock(tmp_path):
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"


def test_a_report_without_the_staging_fields_still_reads(tmp_path: Path) -> None:
    """Reports written before build --push: no `staged`, no verified `image_digest`."""
    report = build_report()
    data = report.as_json()
    assert data["cells"][0]["staged"]["digest"] == "sha256:" + "5" * 64
    for entry in data["cells"]:
        entry.pop("staged")
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    old = read_report(tmp_path)
    assert all(r.staged is None for r in old.cells)
    assert old.cells[1:] == report.cells[1:]


def test_staged_names_the_reference_by_digest() -> None:
    staged = build_report().cells[0].staged
    assert staged is not None
    assert staged.name == "reg/it-staging"
    assert staged.reference == "reg/it-staging@sha256:" + "5" * 64


def test_an_unchanged_image_keeps_its_staging_record_and_a_rebuilt_one_loses_it() -> None:
    from imagekit.store import Staged

    previous = build_report()
    staged = Staged("reg", "it", "staging-0", "sha256:" + "7" * 64)
    before = replace(previous, cells=(replace(previous.cells[1], staged=staged),))
    again = replace(previous, cells=(previous.cells[1],))  # skipped, same image id, nothing staged
    assert again.keeping_verifications(before).cells[0].staged == staged
    rebuilt = replace(previous, cells=(replace(previous.cells[1], image_id="sha256:" + "8" * 64),))
    assert rebuilt.keeping_verifications(before).cells[0].staged is None
