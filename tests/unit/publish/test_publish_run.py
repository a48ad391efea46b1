"""One publish run (imagekit.publish.publish_run): its registry session closed, no engine when every
cell is staged, nothing rendered, and a lock it could not write refused before anything moves."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.core.errors import EnvironmentProblem
from imagekit.publish.policy import Candidate, Selection
from tests.unit.publish.test_promote import IMAGE, FakeRegistry, staged_result, validated_offline_checkout


def test_publish_closes_its_registry_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from imagekit.publish import publish_run as publishing
    from imagekit.report import store
    from tests.conftest import REPO, run_cli

    closed: list[bool] = []

    class FakeRegistry:
        def close(self) -> None:
            closed.append(True)

    class FakePublisher:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def run(self, *args: Any) -> Any:
            raise EnvironmentProblem("registry down")

    candidate = Candidate("c", "sha256:img", "f" * 64, "validated", ("t",), None)
    monkeypatch.setattr(store, "read_previous", lambda _: object())
    monkeypatch.setattr(publishing, "select", lambda *_: Selection((candidate,), (), ()))
    monkeypatch.setattr(publishing, "connect_registry", lambda *_: FakeRegistry())
    monkeypatch.setattr(publishing, "Publisher", FakePublisher)
    monkeypatch.setattr(publishing, "connect", lambda **_: object())
    result = run_cli(
        "publish", "-m", str(REPO / "matrix.yaml"), "--registry", "127.0.0.1:5000",
        "--state-dir", str(tmp_path), "--lock", str(tmp_path / "lock.json"),
    )  # fmt: skip
    assert result.exit_code == 3, result.stderr
    assert closed == [True]


def test_publish_connects_to_no_engine_when_every_cell_is_staged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from imagekit.publish import publish_run as publishing
    from imagekit.publish.promote import PublishOptions

    def no_engine(**_: Any) -> Any:
        raise AssertionError("publish connected to a Docker engine")

    registry = FakeRegistry()
    staged = staged_result("checked")
    candidate = Candidate("c", IMAGE, "f" * 64, "checked", ("t",), staged.verification, staged.staged)
    monkeypatch.setattr(publishing, "select", lambda *_: Selection((candidate,), (), ()))
    monkeypatch.setattr(publishing, "connect_registry", lambda *_: registry)
    monkeypatch.setattr(publishing, "connect", no_engine)
    registry.close = lambda: None  # type: ignore[attr-defined]
    options = PublishOptions("reg:5000", "acme/staging", tmp_path / "lock.json")
    plan = SimpleNamespace(matrix=SimpleNamespace(publish=SimpleNamespace(policy="checked")))
    run = publishing.publish_cells(plan, [], None, options, print, print, print, lambda _: None)  # type: ignore[arg-type]
    assert [p.entry.cell for p in run.published] == ["c"]
    assert not [c for c in registry.calls if c[0] == "mount_blob"]  # staging is the final repository


def test_publish_renders_nothing_and_needs_no_wheelhouse(tmp_path: Path) -> None:
    """The build decided each cell's identity (input digest, build day): publish reads it from the
    report and never renders again, so a publish runner needs neither templates nor a wheelhouse."""
    import json
    import subprocess
    import sys

    from imagekit.report.store import BuildReport, write_report

    project, cells, records = validated_offline_checkout(tmp_path)
    report = BuildReport("m", "2026-12-01T00:00:00Z", 1.0, "e", tuple(records), ())
    write_report(project / ".imagekit", report)
    script = (
        "import json, sys\nfrom imagekit.cli import main\ncode = 0\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "loaded = [m for m in sys.modules if m in ('imagekit.render.dockerfile', 'imagekit.render.wheels', "
        "'imagekit.render.recipe')"
        " or m.split('.')[0] == 'jinja2']\n"
        "print(json.dumps({'code': code, 'loaded': loaded}))\n"
    )
    argv = ["publish", "--matrix", "matrix.yaml", "--registry", "127.0.0.1:5000", "--dry-run", "--json"]
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"code": 0, "loaded": []}, done.stderr
    published = json.loads("\n".join(done.stdout.strip().splitlines()[:-1]))["published"]
    assert [entry["cell"] for entry in published] == [cell.id for cell in cells]
    assert all(entry["tags"][1].endswith("-20261201") for entry in published), published


def _lock_target(kind: str, directory: Path) -> Path:
    """A --lock path that publish could not replace, or could not read back to merge."""
    lock = directory / "lock.json"
    if kind == "a directory":
        lock.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(lock)
    elif kind == "a symbolic link":
        lock.symlink_to(directory / "elsewhere")
    elif kind == "a newer version":
        lock.write_text('{"version": 99, "images": {}}')
    elif kind == "not JSON":
        lock.write_text("{")
    else:
        return directory / "state" / {"the report": "report.json", "the state lock": "lock"}[kind]
    return lock


LOCK_TARGETS = ("a directory", "a FIFO", "a symbolic link", "a newer version", "not JSON", "the report")
LOCK_TARGETS += ("the state lock",)


@pytest.mark.parametrize("kind", LOCK_TARGETS)
def test_a_lock_target_publish_could_not_write_or_read_back_is_refused_first(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.publish import publish_run as publishing
    from tests.conftest import REPO, run_cli

    (tmp_path / "state").mkdir()
    lock = _lock_target(kind, tmp_path)
    monkeypatch.setattr(publishing, "select", lambda *_: pytest.fail("publish got past the lock check"))
    result = run_cli(
        "publish", "-m", str(REPO / "matrix.yaml"), "--registry", "127.0.0.1:5000",
        "--state-dir", str(tmp_path / "state"), "--lock", str(lock),
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert str(lock) in result.stderr and len(result.stderr.strip().splitlines()) == 1
