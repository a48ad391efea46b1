"""Special files where imagekit expects a file: every reader refuses a FIFO, a character device and a
directory at once, in one line with its exit code (``imagekit.core.paths.open_regular_file``).

Each reader runs in a forked child with its memory capped and a deadline: a reader that waits on a
FIFO is killed and reported as hanging, one that reads ``/dev/zero`` whole ends in the cap's
MemoryError and is reported as such, never taking the test run (or the machine) with it.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagekit.attest.statements import load_public_key
from imagekit.builds import no_change
from imagekit.builds.backends.buildkit import Credential, pip_netrc
from imagekit.builds.bases import local_base_froms
from imagekit.core.yamlsource import read_yaml_file
from imagekit.engine.client import connect
from imagekit.export.bake_import import read_metadata
from imagekit.plan.cells import LocalBase
from imagekit.refresh import compat as refresh_compat
from imagekit.refresh import cuda_wheels as refresh_cuda_wheels
from imagekit.refresh.compat_sources import read_json
from imagekit.registry.credentials import find_credentials
from imagekit.render.context import FileHasher, make_tar
from imagekit.render.drift import check_drift
from imagekit.render.probe_bundle import _write_once
from imagekit.report.lockfile import read_lock
from imagekit.report.store import ReportStore, read_previous

REPO = Path(__file__).resolve().parents[2]
RECORDED_REPORTS = REPO / "tests" / "fixtures" / "cuda_wheels"

DEADLINE_S = 15.0  # the slowest reader here plans the shipped matrix first: about 2 s
MEMORY_CAP = 1 << 30  # past what the child has mapped already: /dev/zero read whole stops here

Bad = Callable[[Path], Path]  # puts the special file at a path, and returns the path


def _special(kind: str) -> Bad:
    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "FIFO":
            os.mkfifo(path)  # no writer: a blocking open or read of it never returns
        elif kind == "/dev/zero":
            path.symlink_to("/dev/zero")  # a character device that never ends
        else:
            path.mkdir()
        return path

    return make


def _script(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    """A script's exit status and what it wrote to stderr (its stdout, a diff, is left out)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, stderr.getvalue()


# -- the readers: each puts the special file where it reads one, and reads ---------------------------


def secret_file(tmp: Path, bad: Bad) -> object:
    token = bad(tmp / "token")
    credential = Credential("pypi.example.com", "__token__", "pip-index")
    with pip_netrc((credential,), {"pip-index": token}, tmp / "state", {}):
        return "a netrc was written"


def base_dockerfile(tmp: Path, bad: Bad) -> object:
    bad(tmp / "ctx" / "Dockerfile")
    return local_base_froms(LocalBase("b", "example/b:dev", tmp / "ctx", "Dockerfile", ()))


def docker_py_config(tmp: Path, bad: Bad) -> object:
    bad(tmp / "docker" / "config.json")
    os.environ["DOCKER_CONFIG"] = str(tmp / "docker")  # the forked child's own environment
    os.environ["DOCKER_HOST"] = f"unix://{tmp}/no-engine.sock"  # never reached
    return connect()


def context_file_hash(tmp: Path, bad: Bad) -> object:
    return FileHasher().digest(bad(tmp / "wheelhouse" / "x-1-py3-none-any.whl"))


def context_file_tar(tmp: Path, bad: Bad) -> object:
    return make_tar(None, [("x.whl", bad(tmp / "wheelhouse" / "x.whl"))])


def report_echo(tmp: Path, bad: Bad) -> object:
    bad(tmp / "state" / "report.json")
    return ReportStore(tmp / "state", None).text()


def cuda_wheel_table(tmp: Path, bad: Bad) -> object:
    data = bad(tmp / "cuda_wheels.yaml")
    return _script(refresh_cuda_wheels.main, ["--data", str(data), "--from-reports", str(tmp / "none")])


def cuda_wheel_report(tmp: Path, bad: Bad) -> object:
    reports = tmp / "reports"
    reports.mkdir()
    for recorded in RECORDED_REPORTS.glob("*.json"):
        (reports / recorded.name).symlink_to(recorded)
    victim = reports / "torch-2.1.2-cu118-x86_64.json"
    victim.unlink()
    bad(victim)
    table = tmp / "cuda_wheels.yaml"
    table.write_text('checked_on: ""\nwheels: {}\n', encoding="utf-8")
    argv = ["--from-reports", str(reports), "--data", str(table), "--index-url", "https://pypi.org/simple"]
    return _script(refresh_cuda_wheels.main, argv)


def compat_table(tmp: Path, bad: Bad) -> object:
    return refresh_compat.load_table(bad(tmp / "compat.yaml"))


def compat_recording(tmp: Path, bad: Bad) -> object:
    return read_json(bad(tmp / "torch-2.5.1-cu121.json"))


# readers that went through the owner already: kept here so that none of them drifts away from it


def matrix(tmp: Path, bad: Bad) -> object:
    return read_yaml_file(bad(tmp / "matrix.yaml"))


def report(tmp: Path, bad: Bad) -> object:
    bad(tmp / "state" / "report.json")
    return read_previous(tmp / "state")


def lock(tmp: Path, bad: Bad) -> object:
    return read_lock(bad(tmp / "images.lock.json"))


def bake_metadata(tmp: Path, bad: Bad) -> object:
    return read_metadata(bad(tmp / "metadata.json"))


def public_key(tmp: Path, bad: Bad) -> object:
    return load_public_key(bad(tmp / "cosign.pub"))


def registry_logins(tmp: Path, bad: Bad) -> object:
    bad(tmp / "docker" / "config.json")
    os.environ["DOCKER_CONFIG"] = str(tmp / "docker")
    return find_credentials("registry.example.com", {})


def no_change_record(tmp: Path, bad: Bad) -> object:
    bad(tmp / "state" / no_change.RECORD_NAME)
    return no_change.answer(tmp / "state", "key", datetime.date(2026, 12, 3), tmp / "matrix.yaml")


# exit status of the one-line error (or how the reader goes on without the file)
READERS: dict[str, tuple[Callable[[Path, Bad], object], int]] = {
    "--secret file": (secret_file, 2),
    "a local base's Dockerfile": (base_dockerfile, 2),
    "the Docker config docker-py reads": (docker_py_config, 3),
    "a build context file, hashed": (context_file_hash, 2),
    "a build context file, packed": (context_file_tar, 2),
    "report.json for --json": (report_echo, 2),
    "refresh-cuda-wheels --data": (cuda_wheel_table, 2),
    "refresh-cuda-wheels --from-reports": (cuda_wheel_report, 0),  # that report is not read; kept
    "refresh-compat's table": (compat_table, 2),
    "refresh-compat's recordings": (compat_recording, 2),
    "--matrix": (matrix, 2),
    "report.json": (report, 2),
    "images.lock.json": (lock, 2),
    "bake metadata": (bake_metadata, 2),
    "a public key": (public_key, 2),
    "the Docker config's logins": (registry_logins, 3),
    "the no-change record": (no_change_record, 0),  # no record: the run goes on in full
}


def _in_child(reader: Callable[[Path, Bad], object], tmp: Path, bad: Bad) -> dict[str, Any]:
    """What ``reader`` did, as the forked child reports it (a plain dict, JSON on a pipe)."""
    try:
        value = reader(tmp, bad)
    except Exception as exc:
        code = getattr(exc, "exit_code", None)
        kind = "error" if code is not None else type(exc).__name__
        return {"kind": kind, "message": str(exc)[:2000], "exit": int(code) if code is not None else None}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
        return {"kind": "script", "exit": value[0], "message": value[1][:4000]}
    return {"kind": "returned", "message": repr(value)[:2000]}


def _mapped_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def guarded(reader: Callable[[Path, Bad], object], tmp: Path, bad: Bad) -> dict[str, Any]:
    """``reader`` in a forked child, its memory capped, killed at the deadline: a hang or a
    runaway read is an outcome to assert on, not a stuck test run."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            cap = _mapped_bytes() + MEMORY_CAP
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            outcome = _in_child(reader, tmp, bad)
            os.write(write_end, json.dumps(outcome).encode()[:60_000])  # under a pipe's buffer
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return {"kind": "hung", "message": f"still reading after {DEADLINE_S:g}s"}
        time.sleep(0.02)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    return json.loads(raw) if raw else {"kind": "died", "message": "the child reported nothing"}


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "directory"])
@pytest.mark.parametrize("name", list(READERS))
def test_a_special_file_is_refused_in_one_line_at_once(name: str, kind: str, tmp_path: Path) -> None:
    reader, status = READERS[name]
    start = time.monotonic()
    outcome = guarded(reader, tmp_path, _special(kind))
    assert time.monotonic() - start < DEADLINE_S, outcome
    message = outcome["message"]
    assert "\n" not in message.rstrip("\n") or outcome["kind"] == "script", outcome
    if name == "refresh-cuda-wheels --from-reports":
        # one "not read" line for that build, which keeps its entry; the others are read
        assert outcome["kind"] == "script" and outcome["exit"] == status, outcome
        victim = tmp_path / "reports" / "torch-2.1.2-cu118-x86_64.json"
        lines = [line for line in message.splitlines() if str(victim) in line]
        assert len(lines) == 1 and lines[0].startswith(f"not read: {victim.stem}: {victim}: is "), message
    elif name == "the no-change record":
        assert outcome == {"kind": "returned", "message": "None"}  # no answer: a full run
    elif outcome["kind"] == "script":
        assert outcome["exit"] == status and message.count("\n") == 1, outcome
        assert message.startswith("refresh-cuda-wheels: error: ") and str(tmp_path) in message, outcome
    else:
        assert outcome["kind"] == "error" and outcome["exit"] == status, outcome
        assert str(tmp_path) in message and ", not a regular file" in message, outcome


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "directory"])
def test_a_generated_dockerfile_that_is_no_file_differs_unread(kind: str, tmp_path: Path) -> None:
    """The drift check compares, never reads, what is not a regular file: it differs, and a render
    replaces it."""

    def reader(tmp: Path, bad: Bad) -> object:
        path = bad(tmp / "out" / "cell" / "Dockerfile")
        return check_drift({path: "FROM scratch\n"}, tmp / "out").changed

    outcome = guarded(reader, tmp_path, _special(kind))
    assert outcome == {"kind": "returned", "message": repr((tmp_path / "out" / "cell" / "Dockerfile",))}


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "directory", "a larger file"])
def test_the_cached_probe_is_replaced_when_it_is_not_the_probe(kind: str, tmp_path: Path) -> None:
    def reader(tmp: Path, bad: Bad) -> object:
        if kind == "a larger file":
            (tmp / "check.py").write_bytes(b"probe" * 1000)  # never read past the probe's size
        else:
            bad(tmp / "check.py")
        return _write_once(tmp, "check.py", b"probe")

    outcome = guarded(reader, tmp_path, _special(kind))
    if kind == "directory":  # not replaced by a rename: the caller then writes elsewhere
        assert outcome["kind"] == "IsADirectoryError", outcome
    else:
        assert outcome == {"kind": "returned", "message": repr(tmp_path / "check.py")}, outcome
        assert (tmp_path / "check.py").read_bytes() == b"probe"
