"""No-change runs answered from the record of the last full run (imagekit.builds.no_change), against an
engine stand-in on a unix socket: what each change sends down the full path, what a new day tags,
and what an edited record can and cannot do."""

from __future__ import annotations

import json
import os
import socketserver
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from imagekit.builds import named_inputs
from imagekit.builds import no_change as unchanged
from imagekit.builds.outcome import BuildOutcome
from imagekit.builds.read_recorder import ReadRecorder, ignored_dirs
from imagekit.builds.run_key import argv_key, stat_key
from imagekit.core import naming
from imagekit.core.paths import depends_on
from imagekit.engine.raw_socket import EngineSocket, EngineSocketError
from imagekit.report.store import BuildReport, CellResult, read_previous, write_report

DAY = date(2026, 12, 1)
IMAGE = "sha256:" + "a" * 64
BASE_IMAGE = "sha256:" + "b" * 64
LOCAL_BASE = "sha256:" + "c" * 64
DIGEST = "d" * 64
CONTEXT = "e" * 64
REPOSITORY = "imagekit-test/unchanged"
NAMES = unchanged.Names(REPOSITORY, ("{readable}-{date}", "{readable}-{digest}"), {"cell-a": "2.13-cpu"})
KEY = "k" * 64
KEYS = (KEY, "a" * 64)


def cell_tags(day: date) -> list[str]:
    return NAMES.references("cell-a", day, DIGEST)


@dataclass
class FakeEngine:
    """The engine's image inspect and tag calls, over a unix socket, as dockerd answers them."""

    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def find(self, ref: str) -> dict[str, Any] | None:
        for image in self.images.values():
            if ref == image["Id"] or ref in image["RepoTags"]:
                return image
        return None


def _handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _answer(self, status: int, body: object = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            engine.calls.append(f"GET {self.path}")
            parts = self.path.split("/")
            if len(parts) == 4 and parts[1] == "images" and parts[3] == "json":
                image = engine.find(urllib.parse.unquote(parts[2]))
                self._answer(200, image) if image else self._answer(404, {"message": "No such image"})
            else:
                self._answer(404, {"message": "page not found"})

        def do_POST(self) -> None:
            engine.calls.append(f"POST {self.path}")
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            image = engine.find(urllib.parse.unquote(url.path.split("/")[2]))
            if image is None:
                self._answer(404, {"message": "No such image"})
                return
            image["RepoTags"].append(f"{query['repo'][0]}:{query['tag'][0]}")
            self._answer(201)

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    fake = FakeEngine()
    fake.images = {
        "cell": {
            "Id": IMAGE,
            "RepoTags": cell_tags(DAY),
            "Config": {"Labels": {naming.INPUT_DIGEST_LABEL: DIGEST}},
        },
        "base": {"Id": BASE_IMAGE, "RepoTags": ["busybox:latest"], "Config": {"Labels": None}},
        "local": {
            "Id": LOCAL_BASE,
            "RepoTags": ["imagekit-test/local:dev"],
            "Config": {"Labels": {naming.CONTEXT_DIGEST_LABEL: CONTEXT}},
        },
    }
    path = tmp_path / "engine.sock"
    server = _Server(str(path), _handler(fake))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    yield fake
    server.shutdown()
    server.server_close()


def skipped_report() -> BuildReport:
    return BuildReport(
        matrix="matrix.yaml",
        started="2026-12-01T02:17:00Z",
        duration_s=0.5,
        engine="unix:///var/run/docker.sock",
        cells=(
            CellResult(
                id="cell-a",
                kind="cell",
                status="skipped",
                base_image="busybox:latest",
                image_id=IMAGE,
                tags=tuple(cell_tags(DAY)),
                input_digest=DIGEST,
                built_on=DAY,
            ),
        ),
        bases=(
            CellResult(
                id="base-local",
                kind="base",
                status="skipped",
                base_image="FROM busybox:latest",
                image_id=LOCAL_BASE,
                tags=("imagekit-test/local:dev",),
                input_digest=CONTEXT,
            ),
        ),
    )


@dataclass
class Setup:
    state: Path
    inputs: Path  # a directory of the run's inputs
    matrix: Path
    own_templates: Path  # imagekit's own templates, as this run finds them


# What the matrix names, as a full run reads it: its template directory, a local base's context, a
# wheelhouse (only the paths are read here, from the matrix itself: `imagekit.builds.named_inputs`).
MATRIX = """axes: {}
templates: tpl
bases:
  local: {build: {context: ctx}}
sources:
  pip: {find_links: [wheels]}
"""
NAMED_FILES = ("tpl/Dockerfile.j2", "tpl/frontend/Dockerfile.j2", "ctx/Dockerfile", "wheels/torch.whl")


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    """A state directory after a full run that changed nothing: its report and its record."""
    state = tmp_path / "state"
    inputs = tmp_path / "project"
    inputs.mkdir()
    own = tmp_path / "imagekit-templates"  # imagekit's own, which a test may edit
    (own / "frontend").mkdir(parents=True)
    (own / "Dockerfile.j2").write_text("FROM {{ base }}\n")
    (own / "frontend" / "Dockerfile.j2").write_text("FROM {{ parent }}\n")
    monkeypatch.setattr(named_inputs, "default_templates_dir", lambda: own)
    matrix = inputs / "matrix.yaml"
    matrix.write_text(MATRIX)
    for name in NAMED_FILES:
        (inputs / name).parent.mkdir(parents=True, exist_ok=True)
        (inputs / name).write_text(f"{name}\n")
    (inputs / "wheel.whl").write_bytes(b"wheel")
    report = skipped_report()
    state.mkdir()
    write_report(state, report)
    with ReadRecorder(ignored_dirs(state)) as reads:
        matrix.read_text()
        (inputs / "tpl" / "Dockerfile.j2").read_text()
        reads.mark_plan()  # the matrix and its template decided the plan
        depends_on(inputs / "wheel.whl")  # known by its stat, never opened
    outcome = BuildOutcome(report, interrupted=False, external_bases=(("busybox:latest", BASE_IMAGE),))
    assert unchanged.record(state, KEYS, False, reads, outcome, NAMES, DAY, matrix) is None
    return Setup(state, inputs, matrix, own)


def test_a_run_with_nothing_changed_is_answered(recorded: Setup, engine: FakeEngine) -> None:
    before = json.loads((recorded.state / "report.json").read_text())
    found = unchanged.answer(recorded.state, KEY, DAY, recorded.matrix)
    assert found is not None
    assert found.cells == 1
    assert found.since == "2026-12-01T02:17:00Z"
    assert "1 cell: 1 skipped" in found.summary
    assert all(call.startswith("GET ") for call in engine.calls)  # looked, changed nothing
    after = json.loads((recorded.state / "report.json").read_text())
    assert after["started"] != before["started"] or after["duration_s"] != before["duration_s"]
    assert after["cells"] == before["cells"] and after["bases"] == before["bases"]
    assert read_previous(recorded.state) is not None  # still a report its own reader accepts
    # the record follows the rewritten report: the next run is answered too
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is not None


def _touch(setup: Setup, engine: FakeEngine) -> None:
    stat = setup.matrix.stat()
    os.utime(setup.matrix, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))


def _rewrite_unopened_wheel(setup: Setup, engine: FakeEngine) -> None:
    (setup.inputs / "wheel.whl").write_bytes(b"other")


def _add_beside(setup: Setup, engine: FakeEngine) -> None:
    (setup.inputs / "new-template.j2").write_text("x")


def _remove_input(setup: Setup, engine: FakeEngine) -> None:
    setup.matrix.unlink()


def _edit_report(setup: Setup, engine: FakeEngine) -> None:
    path = setup.state / "report.json"
    path.write_text(path.read_text().replace('"duration_s": 0.5', '"duration_s": 0.6'))


def _image_gone(setup: Setup, engine: FakeEngine) -> None:
    del engine.images["cell"]


def _label_differs(setup: Setup, engine: FakeEngine) -> None:
    engine.images["cell"]["Config"]["Labels"][naming.INPUT_DIGEST_LABEL] = "f" * 64


def _tag_gone(setup: Setup, engine: FakeEngine) -> None:
    engine.images["cell"]["RepoTags"].pop()


def _local_base_rebuilt(setup: Setup, engine: FakeEngine) -> None:
    engine.images["local"]["Config"]["Labels"][naming.CONTEXT_DIGEST_LABEL] = "f" * 64


def _base_pulled_anew(setup: Setup, engine: FakeEngine) -> None:
    engine.images["base"]["RepoTags"] = []
    engine.images["newer"] = {"Id": "sha256:" + "9" * 64, "RepoTags": ["busybox:latest"], "Config": {}}


def _record_gone(setup: Setup, engine: FakeEngine) -> None:
    unchanged.forget(setup.state)


@pytest.mark.parametrize(
    "change",
    [
        _touch,
        _rewrite_unopened_wheel,
        _add_beside,
        _remove_input,
        _edit_report,
        _image_gone,
        _label_differs,
        _tag_gone,
        _local_base_rebuilt,
        _base_pulled_anew,
        _record_gone,
    ],
)
def test_any_change_sends_the_run_down_the_full_path(
    recorded: Setup, engine: FakeEngine, change: Any
) -> None:
    report = (recorded.state / "report.json").read_bytes()
    change(recorded, engine)
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None
    assert not any(call.startswith("POST") for call in engine.calls)
    if change is not _edit_report:
        assert (recorded.state / "report.json").read_bytes() == report  # the full run writes it


def test_another_command_line_is_not_answered(recorded: Setup, engine: FakeEngine) -> None:
    assert unchanged.answer(recorded.state, "0" * 64, DAY, recorded.matrix) is None
    assert engine.calls == []


def test_a_new_day_adds_the_dated_tags_the_full_run_would(recorded: Setup, engine: FakeEngine) -> None:
    tomorrow = date(2026, 12, 2)
    assert unchanged.answer(recorded.state, KEY, tomorrow, recorded.matrix) is not None
    posts = [call for call in engine.calls if call.startswith("POST")]
    assert len(posts) == 1 and "tag=2.13-cpu-20261202" in posts[0] and IMAGE in urllib.parse.unquote(posts[0])
    assert set(cell_tags(tomorrow)) <= set(engine.images["cell"]["RepoTags"])
    report = read_previous(recorded.state)
    assert report is not None
    assert report.cells[0].tags == tuple(cell_tags(tomorrow))
    assert report.cells[0].built_on == tomorrow
    assert report.bases[0].tags == ("imagekit-test/local:dev",)  # a local base has no dated tag
    engine.calls.clear()
    assert (
        unchanged.answer(recorded.state, KEY, tomorrow, recorded.matrix) is not None
    )  # and the day after, nothing to tag
    assert not any(call.startswith("POST") for call in engine.calls)


def _record(setup: Setup) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((setup.state / unchanged.RECORD_NAME).read_text())
    return data


def _write_record(setup: Setup, data: object) -> None:
    (setup.state / unchanged.RECORD_NAME).write_text(json.dumps(data))


def test_an_edited_record_cannot_name_other_tags(recorded: Setup, engine: FakeEngine) -> None:
    """A record that names another readable tag (or repository) than the report's tags says is
    answered by the full path; the engine gets no tag call."""
    for edit in ({"readable": {"cell-a": "prod"}}, {"repository": "prod/pytorch"}, {"patterns": ["{date}"]}):
        _write_record(recorded, {**_record(recorded), **edit})
        assert unchanged.answer(recorded.state, KEY, date(2026, 12, 2), recorded.matrix) is None
    assert not any(call.startswith("POST") for call in engine.calls)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "record",
        {"version": 2},
        {"inputs": "x"},
        {"inputs": [["path", 1, 2, 3]]},
        {"inputs": [["path", 1, 2, 3, "4"]]},
        {"inputs": [["path", 1, 2, 3, True]]},
        {"bases": [["busybox:latest"]]},
        {"readable": {"cell-a": 1}},
        {"day": "yesterday"},
        {"keys": None},
        {"keys": [1]},
        {"json": "yes"},
    ],
)
def test_a_malformed_record_is_ignored(recorded: Setup, engine: FakeEngine, data: Any) -> None:
    if isinstance(data, dict) and "version" not in data:
        data = {**_record(recorded), **data}
    _write_record(recorded, data)
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None
    assert engine.calls == []


def test_a_huge_or_odd_record_is_not_read(
    recorded: Setup, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unchanged, "RECORD_BYTES", 64)
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None
    path = recorded.state / unchanged.RECORD_NAME
    path.unlink()
    os.mkfifo(path)  # never opened for reading: it would block
    monkeypatch.undo()
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None


def test_a_full_run_that_built_something_leaves_no_record(tmp_path: Path) -> None:
    report = skipped_report()
    built = BuildReport(
        **{**report.__dict__, "cells": (CellResult(id="c", kind="cell", status="built", base_image="x"),)}
    )
    with ReadRecorder(()) as reads:
        pass
    matrix = tmp_path / "matrix.yaml"
    for outcome in (BuildOutcome(built, False), BuildOutcome(report, True)):
        assert unchanged.record(tmp_path, KEYS, False, reads, outcome, NAMES, DAY, matrix) is not None
    assert not (tmp_path / unchanged.RECORD_NAME).exists()


def test_engine_socket_refuses_what_it_cannot_speak_and_bounds_answers(
    tmp_path: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for address in ("ssh://user@host", "tcp://host", "npipe:////./pipe/docker_engine"):
        with pytest.raises(EngineSocketError):
            EngineSocket(address)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    with pytest.raises(EngineSocketError, match="no TLS"):
        EngineSocket("tcp://127.0.0.1:2376")
    monkeypatch.delenv("DOCKER_TLS_VERIFY")
    socket_engine = EngineSocket()
    assert socket_engine.image(IMAGE) is not None
    assert socket_engine.image("nothing:here") is None
    monkeypatch.setattr("imagekit.engine.raw_socket.ANSWER_BYTES", 100)
    with pytest.raises(EngineSocketError, match="over 100 bytes"):
        socket_engine.image(IMAGE)
    with pytest.raises(EngineSocketError):
        EngineSocket(f"unix://{tmp_path}/no-engine.sock").image(IMAGE)


def test_an_engine_it_cannot_speak_to_means_the_full_path(
    recorded: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder@gpu-node")
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None


# -- a record that does not name the plan's inputs is no record (issue 33) ---------------------------


def _edit_record(setup: Setup, change: Any) -> None:
    path = setup.state / unchanged.RECORD_NAME
    data: dict[str, Any] = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _unrelated(setup: Setup) -> list[list[Any]]:
    """Other files, each with its true stat: a list the check passes, naming no input of the plan."""
    other = setup.state.parent / "elsewhere"
    other.mkdir()
    (other / "a.txt").write_text("a")
    return [list(stat_key(str(p))) for p in (other, other / "a.txt")]


@pytest.mark.parametrize("how", ["emptied", "replaced", "plan emptied too", "plan replaced too"])
def test_a_record_not_naming_the_matrix_is_no_record_after_an_edit(
    recorded: Setup, engine: FakeEngine, how: str
) -> None:
    """The matrix edited, the record's inputs emptied or swapped for unrelated files with correct
    stats: before, "nothing changed"; the matrix the run is given is always part of the check."""
    unrelated = _unrelated(recorded)

    def change(data: dict[str, Any]) -> None:
        data["inputs"] = [] if how.startswith("emptied") or how == "plan emptied too" else unrelated
        if how == "plan emptied too":
            data["plan"] = []
        if how == "plan replaced too":
            data["plan"] = [k[0] for k in unrelated]

    _edit_record(recorded, change)
    recorded.matrix.write_text("axes: {torch: ['2.13']}\n")  # a real change to the matrix
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None


def test_a_record_whose_plan_inputs_are_not_checked_is_no_record(recorded: Setup, engine: FakeEngine) -> None:
    """The plan names the matrix but the inputs leave it out: what the plan read goes unchecked."""
    _edit_record(
        recorded, lambda d: d.update(inputs=[k for k in d["inputs"] if k[0] != str(recorded.matrix)])
    )
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None


def test_another_matrix_than_the_records_is_no_record(recorded: Setup, engine: FakeEngine) -> None:
    other = recorded.state.parent / "other.yaml"  # beside neither the project nor the state
    other.write_text("axes: {}\n")
    assert unchanged.answer(recorded.state, KEY, DAY, other) is None
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is not None


def test_the_command_lines_matrix() -> None:
    assert unchanged.matrix_of(["build"]) == "matrix.yaml"
    assert unchanged.matrix_of(["build", "--matrix", "m.yaml", "--only", "x"]) == "m.yaml"
    assert unchanged.matrix_of(["build", "-m", "m.yaml"]) == "m.yaml"
    assert unchanged.matrix_of(["build", "--matrix=m.yaml"]) == "m.yaml"
    assert unchanged.matrix_of(["build", "-mm.yaml"]) == "m.yaml"  # click's reading: before, given up on
    assert unchanged.matrix_of(["build", "--only", "-m", "--matrix", "m.yaml"]) == "m.yaml"
    assert unchanged.matrix_of(["build", "--matrix"]) is None


def _edit_named(setup: Setup, where: str) -> Path:
    """``where``'s directory (one the matrix names, or imagekit's own templates) and a file in it
    edited, as a person edits a template: new bytes, a new mtime."""
    top = setup.own_templates if where == "own templates" else setup.inputs / where
    edited = next(p for p in sorted(top.rglob("*")) if p.is_file())
    stat = edited.stat()
    edited.write_text(edited.read_text() + "# edited\n")
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    return top


@pytest.mark.parametrize("where", ["tpl", "ctx", "wheels", "own templates"])
def test_a_record_leaving_out_what_the_matrix_names_is_no_record(
    recorded: Setup, engine: FakeEngine, where: str
) -> None:
    """Issue 45: a record (version 2) edited to drop the template directory from both of its lists
    answered "nothing changed" after a template-only edit. What must be covered is read from the
    matrix (its templates, its bases' contexts, its wheelhouses) and imagekit's own templates,
    never from the record: each left out of both lists, and a file in it edited, is the full run."""
    top = recorded.own_templates if where == "own templates" else recorded.inputs / where
    listed = {k[0] for k in _record(recorded)["inputs"]}
    assert {str(top), *map(str, top.rglob("*"))} <= listed  # the full run's record covers it whole

    def inside(path: str) -> bool:
        return path == str(top) or path.startswith(f"{top}{os.sep}")

    _edit_record(
        recorded,
        lambda d: d.update(
            inputs=[k for k in d["inputs"] if not inside(k[0])], plan=[p for p in d["plan"] if not inside(p)]
        ),
    )
    _edit_named(recorded, where)
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None
    assert engine.calls == []  # decided before the engine is asked


@pytest.mark.parametrize("where", ["tpl", "ctx", "wheels", "own templates"])
def test_an_edit_below_what_the_matrix_names_is_the_full_run(
    recorded: Setup, engine: FakeEngine, where: str
) -> None:
    """The record as written: a file of a named directory that the run never opened (a template
    beside the one it read, a context file known by its stat) edited: the full run too."""
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is not None
    _edit_named(recorded, where)
    assert unchanged.answer(recorded.state, KEY, DAY, recorded.matrix) is None


@pytest.mark.parametrize(
    "spelling",
    [
        ["-m", "{m}"],
        ["--matrix", "{m}"],
        ["--matrix={m}"],
        ["-m{m}"],  # before: given up on, the whole way through typer
        ["-j1", "-m{m}"],
        ["--only", "-m", "-m", "{m}"],  # --only's value is "-m"
    ],
    ids=" ".join,
)
def test_every_spelling_of_the_matrix_is_answered_before_typer(
    recorded: Setup,
    engine: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spelling: list[str],
) -> None:
    """The record of a run started as ``imagekit build <spelling>`` answers the same command line
    before it is parsed, whichever way click takes ``--matrix``/``-m``."""
    argv = ["build", *(word.format(m=recorded.matrix) for word in spelling)]
    _edit_record(recorded, lambda d: d.update(keys=[argv_key(argv)]))
    monkeypatch.setattr(unchanged, "DEFAULT_STATE_DIR", recorded.state)
    monkeypatch.setattr(unchanged, "today", lambda: DAY)
    assert unchanged.answer_command_line(argv) is True
    assert "nothing changed since the run of" in capsys.readouterr().err
