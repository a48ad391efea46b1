"""An engine that answers a call with an error status, or with what is not JSON (issue 45): the
command ends in one line, exit 3, never a traceback; a build's stream of such lines fails its cell.

The engine is a stub on a unix socket (tests/unit/engine_stub.py); the CLI runs in a process of its
own, as a user starts it. A runaway error line in a build's answer stays within the bound of a line."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from docker.errors import APIError, DockerException, StreamParseError

from imagekit.core.errors import EnvironmentProblem
from imagekit.core.text import LINE_CHARS
from imagekit.engine import client
from imagekit.engine.client import EngineAnswerError, engine_info, engine_problem, inspect_image
from testbed.imagekit_process import imagekit
from tests.conftest import REPO
from tests.unit.buildx_stub import stub_cli
from tests.unit.engine_stub import ONE_CELL_MATRIX as MATRIX
from tests.unit.engine_stub import EngineStub, engine_stub

SERVER_ERROR = (500, "application/json", b'{"message": "boom: containerd is gone"}')
NOT_JSON = (200, "text/html", b"<html>a proxy's login page</html>")
BASE = "sha256:" + "b" * 64


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EngineStub]:
    with engine_stub(tmp_path) as stub:
        stub.add(BASE, ["example/deb:dev"])
        yield stub


def run(engine: EngineStub, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    if not project.exists():
        (project / "templates").mkdir(parents=True)
        (project / "templates" / "Dockerfile.j2").write_text("FROM {{ cell.base_image }}\nLABEL x=y\n")
        (project / "matrix.yaml").write_text(MATRIX)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env.update(DOCKER_HOST=engine.address, IMAGEKIT_DOCKER_CLI=str(stub_cli(tmp_path)), PYTHONPATH=str(REPO))
    return imagekit(*args, cwd=project, env=env, timeout=120)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run's one error line (progress lines may come before it), and nothing but imagekit's lines."""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert all(line.startswith("imagekit: ") for line in lines), done.stderr[-3000:]
    (error,) = (line for line in lines if line.startswith("imagekit: error: "))
    assert len(error) <= 2_000
    return error


@pytest.mark.parametrize(
    ("path", "answer", "says"),
    [
        ("/info", SERVER_ERROR, "answered GET /v1.43/info with 500 Internal Server Error: boom: containerd"),
        ("/info", NOT_JSON, "GET /v1.43/info: the engine's answer (text/html) is not JSON"),
        ("/version", SERVER_ERROR, "Error while fetching server API version: 500 Server Error"),
        ("/images/.+/json", SERVER_ERROR, "answered GET /v1.43/images/example/deb:dev/json with 500"),
        ("/images/.+/json", NOT_JSON, "GET /v1.43/images/example/deb:dev/json: the engine's answer"),
    ],
)
def test_a_buildkit_build_on_an_engine_that_fails_a_call_is_exit_3(
    engine: EngineStub, tmp_path: Path, path: str, answer: tuple[int, str, bytes], says: str
) -> None:
    """Before: /info's 500 (engine_holds_oci) and a non-JSON answer ended in a traceback, exit 1."""
    engine.failing[path] = answer
    done = run(engine, tmp_path, "build", "--builder", "buildkit", "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 3, done.stderr[-3000:]
    assert says in one_error_line(done)


@pytest.mark.parametrize("answer", [SERVER_ERROR, NOT_JSON], ids=["500", "not JSON"])
def test_verify_on_an_engine_that_fails_an_image_inspect_is_exit_3(
    engine: EngineStub, tmp_path: Path, answer: tuple[int, str, bytes]
) -> None:
    """Before: a 500 failed the image's verification ("the engine refused the check container",
    exit 1), and a body that is not JSON ended in requests' JSONDecodeError's traceback."""
    engine.failing["/images/.+/json"] = answer
    done = run(engine, tmp_path, "verify", "busybox:latest", "--gpus", "none")
    assert done.returncode == 3, done.stderr[-3000:] + done.stdout[-3000:]
    assert "GET /v1.43/images/busybox:latest/json" in one_error_line(done)


def test_a_classic_build_answered_with_lines_that_are_not_json_fails_its_cell(
    engine: EngineStub, tmp_path: Path
) -> None:
    """Before: docker-py's StreamParseError, which nothing caught, ended the worker: a traceback."""
    engine.failing["/build"] = NOT_JSON
    done = run(engine, tmp_path, "build", "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (failed,) = (line for line in done.stderr.splitlines() if line.startswith("imagekit: failed: "))
    assert "POST /v1.43/build: a line of the engine's answer is not JSON" in failed


# -- the client's own calls, in this process -------------------------------------------------------------


def test_a_body_that_is_not_json_names_its_call(engine: EngineStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.address)
    api = client.connect()
    engine.failing["/info"] = NOT_JSON
    with pytest.raises(
        EngineAnswerError, match=r"GET /v1\.43/info: the engine's answer \(text/html\) is not"
    ):
        api.info()
    with pytest.raises(
        EnvironmentProblem, match=r"answer \(text/html\) is not JSON; is DOCKER_HOST a Docker"
    ):
        engine_info(api)
    engine.failing["/info"] = (200, "application/json", b"[1, 2]")  # JSON, but no object
    with pytest.raises(EnvironmentProblem, match="answered GET /info with no object"):
        engine_info(api)
    engine.failing["/images/.+/json"] = (503, "application/json", b'{"message": "later"}')
    with pytest.raises(EnvironmentProblem, match="with 503 Service Unavailable: later"):
        inspect_image(api, "example/deb:dev")
    engine.failing["/images/.+/json"] = (400, "application/json", b'{"message": "invalid reference"}')
    with pytest.raises(APIError):  # a refusal of what was asked stays the caller's to handle
        inspect_image(api, "example/deb:dev")


def test_engine_problem_knows_every_failed_call_and_nothing_else() -> None:
    response = requests.Response()
    response.status_code, response.reason = 409, "Conflict"
    response.request = requests.Request("POST", "http+docker://localhost/v1.43/images/x/tag?repo=a").prepare()
    refused = engine_problem(APIError("409", response=response, explanation="in use"))
    assert refused is not None and refused.exit_code == 3
    assert refused.message.endswith("answered POST /v1.43/images/x/tag with 409 Conflict: in use")
    for failed in (
        DockerException("Error while fetching server API version"),
        StreamParseError(ValueError("Expecting value")),  # type: ignore[arg-type]
        requests.ConnectionError("reset"),
        requests.exceptions.JSONDecodeError("Expecting value", "<html>", 0),
        client.EngineFailure("socket closed"),
    ):
        found = engine_problem(failed)
        assert found is not None and found.exit_code == 3 and "\n" not in found.message
    assert engine_problem(KeyError("a bug")) is None and engine_problem(ValueError("a bug")) is None


def test_a_runaway_error_line_from_a_classic_build_makes_no_line_longer_than_the_bound(
    engine: EngineStub, tmp_path: Path
) -> None:
    """Before: the engine's error line went whole into the report, the log and onto stderr."""
    runaway = json.dumps({"stream": "Step 1/2 : FROM example/deb:dev\n"}) + json.dumps(
        {"error": "The command '/bin/sh -c make' returned: " + "x" * 100_000}
    )
    engine.failing["/build"] = (200, "application/json", runaway.encode())
    done = run(engine, tmp_path, "build", "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert max(map(len, done.stderr.splitlines())) <= LINE_CHARS
    (cell,) = json.loads((tmp_path / "s" / "report.json").read_text())["cells"]
    assert cell["error"].startswith("The command '/bin/sh -c make' returned: xxx")
    assert len(cell["error"]) <= LINE_CHARS
    assert max(map(len, Path(cell["log"]).read_text().splitlines())) <= LINE_CHARS
