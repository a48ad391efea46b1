"""Issue 45: an index secret a build step prints reaches nothing imagekit prints or writes.

`imagekit build --builder buildkit` runs against a stand-in docker CLI (a real process, as buildx
is one) whose build step prints the netrc it is given as the BuildKit secret, the way `RUN cat
/root/.netrc` would: in rawjson progress, the password split across two chunks, then base64'd,
percent-encoded, as an HTTP Basic header and on a last line with no newline; failing, the step's
error and buildx's last line repeat it. The password, its encodings and each half of it are then
searched for in stdout, stderr, the cell's log, report.json and every other file of the state dir.
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from imagekit.core.naming import CONTEXT_DIGEST_LABEL
from imagekit.engine import client as engine
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.render.context import local_base_digest
from imagekit.render.dockerfile import Renderer
from imagekit.report.state import REPORT_NAME
from testbed.sample_projects import write_project
from tests.conftest import REPO, run_cli

LOGIN = "ci-bot"
# Long enough for each half to be a needle of its own; '/', '+', '!' and '"' have encodings.
PASSWORD = 'pwZq9/x+K!"t7mR2vLw8NcY4bTf3hJ6s'
BASIC = base64.b64encode(f"{LOGIN}:{PASSWORD}".encode()).decode()
NEEDLES = {
    "the password": PASSWORD,
    "its first half": PASSWORD[:16],
    "its second half": PASSWORD[16:],
    "its base64": base64.b64encode(PASSWORD.encode()).decode().rstrip("="),
    "HTTP Basic": BASIC,
    "percent-encoded": urllib.parse.quote(PASSWORD, safe=""),
    "JSON-escaped": json.dumps(PASSWORD)[1:-1],
    "hex": PASSWORD.encode().hex(),
}

# The stand-in `docker`: `buildx version`, and `buildx build` printing the netrc from its step.
DOCKER = """\
import base64, json, os, sys, urllib.parse

args = sys.argv[1:]
if args[:2] == ["buildx", "version"]:
    print("github.com/docker/buildx 0.13.1 deadbeef")
    sys.exit(0)
sys.stdin.buffer.read()  # the build context
netrc = open(next(a for a in args if a.startswith("id=imagekit-pip-netrc,src=")).split("src=")[1]).read()
password = netrc.split()[-1]
step = {"digest": "sha256:" + "1" * 64, "name": "[2/2] RUN cat /root/.netrc"}


def status(**fields):
    sys.stderr.write(json.dumps(fields, indent=2) + "\\n")
    sys.stderr.flush()


def printed(data):
    status(logs=[{"vertex": step["digest"], "stream": 1, "data": base64.b64encode(data).decode()}])


status(vertexes=[{**step, "started": "2026-01-01T00:00:00Z"}])
text = netrc.encode()
cut = text.index(password.encode()) + len(password) // 2
printed(text[:cut])  # the password split across two chunks of the step's output
printed(text[cut:])
printed(b"encoded " + base64.b64encode(b"A" + text) + b"\\n")  # the netrc base64'd, off alignment
printed(("quoted " + urllib.parse.quote(password, safe="") + "\\n").encode())
printed(("basic " + base64.b64encode(("ci-bot:" + password).encode()).decode() + "\\n").encode())
printed(("no newline " + password).encode())
if os.environ.get("STEP_FAILS"):
    status(vertexes=[{**step, "error": "process did not complete: token " + password + " refused"}])
    sys.stderr.write("ERROR: failed to solve: token " + password + " refused\\n")
    sys.exit(1)
status(vertexes=[{**step, "started": "2026-01-01T00:00:00Z", "completed": "2026-01-01T00:00:01Z"}])
# the image as BuildKit writes it (what imagekit checks before loading it: tests/unit/buildx_stub.py)
sys.path.insert(0, REPO)
from pathlib import Path
from tests.unit.buildx_stub import oci_archive

output = dict(part.split("=", 1) for part in args[args.index("--output") + 1].split(",")[1:])
labels = dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "--label")
manifest, config = oci_archive(Path(output["dest"]), output["name"], labels)
said = {"containerimage.digest": manifest, "containerimage.config.digest": config}
open(args[args.index("--metadata-file") + 1], "w").write(json.dumps(said))
"""


class Loaded:
    """The engine's answer to loading the OCI tar."""

    status_code = 200

    def iter_content(self, chunk_size: Any = None, decode_unicode: bool = False) -> list[str]:
        return ['{"stream": "Loaded image"}\n']

    def close(self) -> None:
        pass


class Engine:
    """What `imagekit build --builder buildkit` asks of the engine (containerd store, load, tag);
    the cell's local base is there already, built from its context as it is."""

    base_url = "http+docker://localhost"
    api_version = "1.45"

    def __init__(self, plan: Plan) -> None:
        base = plan.local_bases[0]
        labels = {CONTEXT_DIGEST_LABEL: local_base_digest(base, Renderer(plan).hasher)}
        self.bases = {base.image: {"Id": "sha256:" + "b" * 64, "Size": 1, "Config": {"Labels": labels}}}

    def info(self) -> dict[str, Any]:
        return {"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}

    def images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        return []

    def inspect_image(self, ref: str) -> dict[str, Any]:
        if ref in self.bases:
            return self.bases[ref]
        raise ImageNotFound(ref)

    def post(self, url: str, **kwargs: Any) -> Loaded:
        assert url.endswith("/images/load")
        return Loaded()

    def tag(self, image: str, repository: str, tag: str | None, force: bool = False) -> bool:
        return True


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_project(root, {"deb": "FROM busybox:latest\n"}, ["deb"])
    (root / "templates" / "Dockerfile.j2").write_text(
        "FROM {{ cell.base_image }}\nRUN {{ recipe.run.extra }}cat /root/.netrc\n"
    )
    with (root / "matrix.yaml").open("a") as matrix:
        matrix.write(
            "build: {builder: buildkit}\n"
            "sources:\n  pip:\n    index_url: https://index.example.org/simple\n"
            f"    credentials: [{{host: index.example.org, login: {LOGIN}, secret: pip-index}}]\n"
        )
    plan = load_plan(root / "matrix.yaml")
    docker = tmp_path / "docker"
    docker.write_text(f"#!{sys.executable}\nREPO = {str(REPO)!r}\n{DOCKER}")
    docker.chmod(0o755)
    monkeypatch.setenv("IMAGEKIT_DOCKER_CLI", str(docker))
    monkeypatch.setenv("IMAGEKIT_SECRET_PIP_INDEX", PASSWORD)
    monkeypatch.delenv("STEP_FAILS", raising=False)
    monkeypatch.setattr(engine, "connect", lambda **_: Engine(plan))
    return root


def leaks(where: str, text: str) -> list[str]:
    return [f"{name} in {where}" for name, needle in NEEDLES.items() if needle in text]


@pytest.mark.parametrize("fails", [False, True], ids=["built", "step failed"])
def test_a_step_printing_the_netrc_leaks_the_password_nowhere(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    if fails:
        monkeypatch.setenv("STEP_FAILS", "1")
    state = tmp_path / "state"
    done = run_cli("build", "--matrix", str(project / "matrix.yaml"), "--state-dir", str(state), "--json")
    assert (state / REPORT_NAME).exists(), done.stderr
    report = json.loads((state / REPORT_NAME).read_text())
    (cell,) = report["cells"]
    assert (done.exit_code, cell["status"]) == ((1, "failed") if fails else (0, "built")), done.stderr
    log = Path(cell["log"]).read_text()
    # what was printed is there, masked: the step's lines whole, in order
    assert "machine index.example.org login ci-bot password ***\n" in log
    assert "quoted ***\n" in log and "basic ***\n" in log and "no newline ***\n" in log
    if fails:
        assert cell["error"] == "step [2/2] RUN cat /root/.netrc: process did not complete: token *** refused"
        assert "no newline ***" in cell["error_tail"]
        assert "token *** refused" in done.stderr
    found = leaks("stdout", done.stdout) + leaks("stderr", done.stderr)
    for path in sorted(state.rglob("*")):  # report.json, the logs, the no-change record, caches
        if path.is_file():
            found += leaks(str(path.relative_to(state)), path.read_text(errors="replace"))
    assert found == []
