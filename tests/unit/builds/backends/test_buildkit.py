"""imagekit.builds.backends.buildkit without an engine: the index credentials' netrc, the store check, and a
build through stand-ins of buildx and the engine that check what buildx says it built."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from imagekit.builds.backends import buildkit
from imagekit.builds.backends.buildkit import Credential, pip_netrc
from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.safetypes import secret_env_name
from imagekit.core.text import LINE_CHARS, redact
from testbed.imagekit_process import imagekit
from tests.conftest import REPO
from tests.unit.buildx_stub import HELD, MODE, stub_cli
from tests.unit.engine_stub import ONE_CELL_MATRIX as MATRIX
from tests.unit.engine_stub import EngineStub, engine_stub

INDEX = Credential("artifactory.example.com", "ci-bot", "pip-index")
VALUE = "tok3n-Zq9!x"


def test_the_netrc_lives_only_while_the_run_does(tmp_path: Path) -> None:
    env = {secret_env_name("pip-index"): VALUE}
    with pip_netrc((INDEX,), {}, tmp_path, env) as netrc:
        assert netrc is not None
        assert netrc.read_text() == f"machine artifactory.example.com login ci-bot password {VALUE}\n"
        assert stat.S_IMODE(netrc.stat().st_mode) == 0o600
        assert stat.S_IMODE(netrc.parent.stat().st_mode) == 0o700
    assert not netrc.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), pip_netrc((INDEX,), {}, tmp_path, env):
        raise RuntimeError("a build failed")
    assert list(tmp_path.iterdir()) == []


def test_the_netrc_names_the_host_without_its_port(tmp_path: Path) -> None:
    # pip (requests) looks a URL's host name up in the netrc, never host:port
    on_a_port = Credential("127.0.0.1:8080", "ci-bot", "pip-index")
    with pip_netrc((on_a_port,), {}, tmp_path, {secret_env_name("pip-index"): VALUE}) as netrc:
        assert netrc is not None
        assert netrc.read_text() == f"machine 127.0.0.1 login ci-bot password {VALUE}\n"


def test_a_file_given_with_secret_wins_over_the_environment(tmp_path: Path) -> None:
    given = tmp_path / "token"
    given.write_text("from-file\n")
    with pip_netrc(
        (INDEX,), {"pip-index": given}, tmp_path / "state", {"IMAGEKIT_SECRET_PIP_INDEX": "env"}
    ) as n:
        assert n is not None and n.read_text().endswith("password from-file\n")


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, {}, "secret pip-index .* is not given: set IMAGEKIT_SECRET_PIP_INDEX or pass --secret"),
        ({"IMAGEKIT_SECRET_PIP_INDEX": "  "}, {}, "is not given"),
        (
            {"IMAGEKIT_SECRET_PIP_INDEX": "two words"},
            {},
            r"from \$IMAGEKIT_SECRET_PIP_INDEX holds white space",
        ),
        ({}, {"pip-index": Path("/nonexistent/token")}, "--secret pip-index=/nonexistent/token: cannot read"),
        (
            {"IMAGEKIT_SECRET_PIP_INDEX": "two7chr"},
            {},
            r"from \$IMAGEKIT_SECRET_PIP_INDEX is 7 characters long: imagekit masks it .* at least 8",
        ),
    ],
)
def test_a_missing_or_unusable_secret_stops_the_run_first(
    tmp_path: Path, env: dict[str, str], files: dict[str, Path], message: str
) -> None:
    with pytest.raises(InputError, match=message) as raised, pip_netrc((INDEX,), files, tmp_path, env):
        pytest.fail("no build may start")
    assert "two" not in raised.value.message and list(tmp_path.iterdir()) == []


def test_a_value_read_is_masked_in_everything_printed_from_then_on(tmp_path: Path) -> None:
    """Issue 45: a step that prints the netrc, pip, an error: the value shows as *** in each."""
    printed = f"password {VALUE} basic {base64.b64encode(f'ci-bot:{VALUE}'.encode()).decode()}"
    assert redact(printed) == printed
    with pip_netrc((INDEX,), {}, tmp_path, {secret_env_name("pip-index"): VALUE}):
        pass
    assert redact(printed) == "password *** basic ***"


def test_no_credentials_no_file(tmp_path: Path) -> None:
    with pip_netrc((), {}, tmp_path, {}) as netrc:
        assert netrc is None
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


class Engine:
    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    def info(self) -> dict[str, Any]:
        return self._info


def test_only_the_containerd_store_takes_what_buildx_writes() -> None:
    containerd = Engine({"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]})
    buildkit.engine_holds_oci(containerd)  # type: ignore[arg-type]
    overlay2 = Engine({"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]})
    with pytest.raises(EnvironmentProblem, match=r"containerd image store .* with overlay2: set"):
        buildkit.engine_holds_oci(overlay2)  # type: ignore[arg-type]


# -- what buildx says it built, against what it wrote (issue 45) ---------------------------------------

BASE_ID, EARLIER = "sha256:" + "b" * 64, "example/earlier:1"


def build_through_buildx(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], EngineStub]:
    """`imagekit build --builder buildkit` of one cell in a process of its own, on an engine stub
    that holds the base and HELD (another image), with the buildx stub lying as ``mode`` says."""
    project = tmp_path / "project"
    (project / "templates").mkdir(parents=True)
    (project / "templates" / "Dockerfile.j2").write_text("FROM {{ cell.base_image }}\nLABEL built=yes\n")
    (project / "matrix.yaml").write_text(MATRIX)
    cli = stub_cli(tmp_path)
    with engine_stub(tmp_path) as engine:
        engine.add(BASE_ID, ["example/deb:dev"])
        engine.add(HELD, [EARLIER])
        done = imagekit(
            "build",
            "--builder",
            "buildkit",
            "--state-dir",
            str(tmp_path / "state"),
            cwd=project,
            env={
                "DOCKER_HOST": engine.address,
                "IMAGEKIT_DOCKER_CLI": str(cli),
                MODE: mode,
                "PYTHONPATH": str(REPO),
            },
            timeout=120,
        )
    return done, engine


def test_the_image_buildx_wrote_is_loaded_and_tagged(tmp_path: Path) -> None:
    done, engine = build_through_buildx(tmp_path, "honest")
    assert done.returncode == 0, done.stderr
    (built,) = (i for i in engine.images.values() if i["Id"] not in (BASE_ID, HELD))
    assert "example/it:deb-2.1.2" in built["RepoTags"]
    assert engine.images[HELD]["RepoTags"] == [EARLIER]


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("held", f"buildx's metadata file says it built {HELD}, but the OCI tar it wrote holds 'sha256:"),
        ("other-image", "does not carry this build's label imagekit.input-digest="),
        ("renamed", "the OCI tar buildx wrote names its image 'docker.io/example/someone-else:latest'"),
    ],
)
def test_what_buildx_says_it_built_is_checked_before_any_tag_moves(
    tmp_path: Path, mode: str, says: str
) -> None:
    """Before, the metadata's digest was tagged as it was: naming an image the engine already held
    moved the cell's tags onto it, and a tar of another image was loaded; the build exited 0."""
    done, engine = build_through_buildx(tmp_path, mode)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (failed,) = (line for line in done.stderr.splitlines() if line.startswith("imagekit: failed: "))
    assert says in failed and failed.count("nothing was loaded or tagged") == 1
    assert not any(call.startswith(("POST /images/load", "POST /images/sha256")) for call in engine.calls)
    assert engine.images[HELD]["RepoTags"] == [EARLIER] and set(engine.images) == {BASE_ID, HELD}
    assert list((tmp_path / "state" / "buildx").iterdir()) == []  # no tar, no metadata file left


def test_a_runaway_line_from_buildx_makes_no_line_longer_than_the_bound(tmp_path: Path) -> None:
    """Before: the failed step's error went into the report and onto stderr whole (100,000
    characters), and buildx's last line (cut at 2,000) came back with a prefix past the bound."""
    done, _ = build_through_buildx(tmp_path, "runaway")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("\n") == len(done.stderr.splitlines())  # every line whole
    assert max(map(len, done.stderr.splitlines())) <= LINE_CHARS
    (cell,) = json.loads((tmp_path / "state" / "report.json").read_text())["cells"]
    assert cell["error"].startswith("step [2/2] RUN --network=none xxx") and len(cell["error"]) <= LINE_CHARS
    log = Path(cell["log"]).read_text().splitlines()
    assert log[-1].startswith("FAILED: step [2/2]") and len(log[-1]) <= LINE_CHARS


# -- BuildKit's own push (issue 46) ---------------------------------------------------------------------


def settings_with(tmp_path: Path, version: str) -> buildkit.BuildkitSettings:
    from imagekit.engine.buildx import Buildx

    return buildkit.BuildkitSettings(Buildx(str(tmp_path / "docker"), version), "zstd", tmp_path / "work")


def test_a_push_run_says_once_why_buildkit_does_not_push_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IMAGEKIT_REGISTRY_USER", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no Docker config: no login
    said: list[str] = []
    assert buildkit.pushing(settings_with(tmp_path, "0.29.1"), "reg:5000", said.append).pushes
    assert said == []
    old = buildkit.pushing(settings_with(tmp_path, "0.13.1"), "reg:5000", said.append)
    assert not old.pushes and len(said) == 1 and said[0].startswith("buildx 0.13.1 is older than 0.29.0")
    # half a pair is no login: the Docker config's (which buildx reads) is the one used
    monkeypatch.setenv("IMAGEKIT_REGISTRY_USER", "ci-bot")
    (tmp_path / "config.json").write_text('{"auths": {"reg:5000": {"auth": "Ym90OnB3"}}}')
    assert buildkit.pushing(settings_with(tmp_path, "0.29.1"), "reg:5000", said.append).pushes
    assert len(said) == 1  # only the old buildx's line: nothing said of this one
    # a login from the environment is one buildx never sees: imagekit pushes through the engine
    monkeypatch.setenv("IMAGEKIT_REGISTRY_PASSWORD", "s3cret-Passw0rd")
    said.clear()
    assert not buildkit.pushing(settings_with(tmp_path, "0.29.1"), "reg:5000", said.append).pushes
    assert len(said) == 1 and "$IMAGEKIT_REGISTRY_USER, which buildx does not read" in said[0]


# A buildx that builds nothing and writes the metadata file given (METADATA: its JSON text).
METADATA_BUILDX = """#!/bin/sh
while [ $# -gt 0 ]; do
  if [ "$1" = --metadata-file ]; then printf '%s' "$METADATA" > "$2"; fi
  shift
done
cat > /dev/null
"""


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ("{}", "the buildx metadata has no containerimage.digest digest"),
        (
            json.dumps({"containerimage.digest": "sha256:" + "a" * 64}),
            "the buildx metadata has no containerimage.config.digest digest",
        ),
        (json.dumps({"containerimage.digest": "sha256:../../x"}), "no containerimage.digest digest"),
        ("[not json", "buildx wrote no readable metadata file"),
    ],
    ids=["empty", "no-config", "not-a-digest", "not-json"],
)
def test_a_push_whose_metadata_names_no_digest_is_one_line_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata: str, says: str
) -> None:
    from imagekit.builds.jobs import JobFailed
    from imagekit.core.errors import ImagekitError
    from imagekit.engine.client import BuildRequest

    cli = tmp_path / "docker"
    cli.write_text(METADATA_BUILDX)
    cli.chmod(0o755)
    monkeypatch.setenv("METADATA", metadata)
    context = tmp_path / "context.tar"
    with tarfile.open(context, "w") as tar:
        data = b"FROM scratch\n"
        member = tarfile.TarInfo("Dockerfile")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    request = BuildRequest(
        dockerfile="Dockerfile", labels=(), build_args=(), cache_from=(), network_mode=None
    )
    lines: list[str] = []
    with context.open("rb") as tar, pytest.raises(ImagekitError) as raised:
        buildkit.push_image(
            settings_with(tmp_path, "0.29.1"),
            request,
            tar,
            "reg:5000/r/x:staging-abc",
            (None, None),
            lines.append,
            lambda _run: contextlib.nullcontext(),
        )
    assert not isinstance(raised.value, JobFailed)
    assert says in raised.value.message and "\n" not in raised.value.message
    assert not any("BuildKit pushed" in line for line in lines)
    assert list((tmp_path / "work").iterdir()) == []  # the metadata file is not left behind


# -- the backend: what it builds with and where its image goes (issue 47) ------------------------------

CONTAINERD = {"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}


class Registry:
    """What the backend asks of ``BuildRegistry``, recorded: nothing it asks pulls."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def build_cache(self, rendered: object) -> str:
        self.asked.append("build_cache")
        return "reg:5000/r/staging:cache-x"

    def staged_unpulled(self, rendered: object, labels: object, write: object) -> str:
        self.asked.append("staged_unpulled")
        return "staged"


def opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, push: str | None = None
) -> buildkit.BuildkitBackend:
    from imagekit.builds.backends.base import Setup
    from imagekit.engine.buildx import Buildx

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no login from the environment
    monkeypatch.delenv("IMAGEKIT_REGISTRY_USER", raising=False)
    found: list[str | None] = []
    monkeypatch.setattr(
        buildkit.buildx, "find", lambda selection: found.append(selection) or Buildx("docker", "0.29.1")
    )
    setup = Setup(Engine(CONTAINERD), "zstd", "remote-bk", push, tmp_path, print)  # type: ignore[arg-type]
    backend = buildkit.BuildkitBackend(setup)
    assert found == ["remote-bk"]
    return backend


def test_the_backend_refuses_an_engine_that_cannot_load_what_buildx_writes(tmp_path: Path) -> None:
    from imagekit.builds.backends.base import Setup

    setup = Setup(Engine({"Driver": "overlay2"}), "gzip", None, None, tmp_path, print)  # type: ignore[arg-type]
    with pytest.raises(EnvironmentProblem, match="containerd image store"):
        buildkit.BuildkitBackend(setup)


def test_its_cache_is_the_registry_cache_and_nothing_is_pulled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.builds.backends.base import BuildCache

    backend = opened(tmp_path, monkeypatch)
    assert backend.render.builder == "buildkit" and backend.render.compression == "zstd"
    source, target = Registry(), Registry()
    cache = backend.cache(object(), source, target, print)  # type: ignore[arg-type]
    assert cache == BuildCache(
        registry_from="reg:5000/r/staging:cache-x", registry_to="reg:5000/r/staging:cache-x"
    )
    assert backend.cache(object(), None, None, print) == BuildCache()  # type: ignore[arg-type]
    found = backend.registry_reuse(object(), source, (), print)  # type: ignore[arg-type]
    assert (found.staged, found.image) == ("staged", None)
    assert source.asked == ["build_cache", "staged_unpulled"] and target.asked == ["build_cache"]


@pytest.mark.parametrize(
    ("push", "push_to", "called"),
    [
        ("reg:5000", "reg:5000/r/staging:staging-abc", "push_image"),
        ("reg:5000", None, "build_image"),  # a job is built FROM it: the engine must hold it
        (None, "reg:5000/r/staging:staging-abc", "build_image"),  # no --push: BuildKit pushes nothing
    ],
    ids=["pushed-by-buildkit", "built-from", "no-push"],
)
def test_a_cell_goes_straight_to_the_registry_only_when_buildkit_pushes_and_no_job_needs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, push: str | None, push_to: str | None, called: str
) -> None:
    from imagekit.builds.backends.base import BuildCache
    from imagekit.engine.client import BuildRequest

    backend = opened(tmp_path, monkeypatch, push)
    calls: list[tuple[str, str, object]] = []
    digest = "sha256:" + "d" * 64

    def push_image(
        settings: object, request: object, tar: object, reference: str, cache: object, *_: object
    ) -> str:
        calls.append(("push_image", reference, cache))
        return digest

    def build_image(
        api: object, settings: object, request: object, tar: object, name: str, cache: object, *_: object
    ) -> str:
        calls.append(("build_image", name, cache))
        return digest

    monkeypatch.setattr(buildkit, "push_image", push_image)
    monkeypatch.setattr(buildkit, "build_image", build_image)
    request = BuildRequest("Dockerfile", (), (), (), None)
    cache = BuildCache(registry_from="from", registry_to="to")
    built = backend.build(request, io.BytesIO, "r/x:1", push_to, cache, print, print)  # type: ignore[arg-type]
    (call,) = calls
    assert call == (called, push_to if called == "push_image" else "r/x:1", ("from", "to"))
    assert built.image_id == digest and built.pushed == (push_to if called == "push_image" else None)
