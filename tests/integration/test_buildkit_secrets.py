"""The BuildKit builder's index credentials and pip cache for real (issue 35): an index that wants a
login (pypiserver with an htpasswd file, on the host), a cell that installs a package from it, and a
search for the password in everything imagekit, the engine and the registry keep of the build.

The cells use this test's own template, which installs only the cell's pip packages (no torch: a
minute, not ten) with the step options and pip arguments the renderer gives the shipped template's
`extra` step (`recipe.run.extra`, `recipe.extra_pip_args`): the network, the pip cache mount and the
netrc secret mount under test are the product's, not the test's.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

from testbed.matrix_projects import REGISTRY, RUN_ID, Project
from testbed.waivers import critical_waivers
from tests.integration.conftest import DEBIAN_PYTHON, REPO_ROOT

# Pinned: the index under test must behave the same in every run.
PYPISERVER = ("pypiserver==2.4.2", "passlib==1.7.4")
LOGIN = "ci-bot"
SECRET_ID = "pip-index"
SECRET_ENV = "IMAGEKIT_SECRET_PIP_INDEX"
PACKAGE = f"ikprobe-{RUN_ID}"  # this run's own: the engine's pip cache mount is shared by every build
MODULE = PACKAGE.replace("-", "_")
WHEEL = f"{MODULE}-1.0-py3-none-any.whl"
VENV = "/opt/venv"

# Installs the cell's pip packages the way the shipped template's `extra` step does; CELL_ARG (a
# build argument) changes the step's cache key and nothing else.
TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
{% for name in recipe.build_args %}
ARG {{ name }}
{% endfor %}
RUN {{ recipe.run.extra }}python3 -m venv {{ venv }} \\
 && {{ venv }}/bin/pip install {{ recipe.extra_pip_args | shjoin }} {{ recipe.extra_requirements | shjoin }}
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

""".replace("{{ venv }}", VENV)


def _tiny_wheel(directory: Path) -> Path:
    """A pure-Python wheel of one module, written by hand (a wheel is a zip with three metadata files)."""
    info = f"{MODULE}-1.0.dist-info"
    files = {
        f"{MODULE}.py": "GREETING = 'installed from the authenticated index'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: imagekit-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = directory / WHEEL
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(name, text)
    return path


@dataclass(frozen=True)
class Index:
    url: str  # its simple index
    port: int
    password: str
    access_log: Path

    def wheel_downloads(self) -> int:
        """How many times the index served the wheel (its access log's GETs that sent it)."""
        lines = self.access_log.read_text(errors="replace").splitlines()
        return sum(1 for line in lines if f'"GET /packages/{WHEEL} HTTP/1.1" 200' in line)


@pytest.fixture(scope="session")
def pypiserver_venv() -> Path:
    """A venv with pypiserver, made on first use (from PyPI, about 2 minutes here) and kept for
    later runs beside the project's own .venv, like the base images; ``ready`` marks it whole."""
    venv = REPO_ROOT / ".venv" / "-".join(p.replace("==", "") for p in PYPISERVER)
    if not (venv / "ready").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                *PYPISERVER,
            ],
            check=True,
            timeout=600,
        )
        (venv / "ready").touch()
    return venv


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, pypiserver_venv: Path) -> Iterator[Index]:
    """pypiserver on 127.0.0.1, every action behind an htpasswd login, serving one tiny wheel.

    A host process, not a container: the build's pip reaches it over the host network like any
    index on the runner's network. testcontainers (the project's way to start a server) starts
    containers, so readiness here is a plain poll of the server's health endpoint."""
    root = tmp_path_factory.mktemp("index")
    python = str(pypiserver_venv / "bin" / "python")
    packages = root / "packages"
    packages.mkdir()
    _tiny_wheel(packages)
    # Letters first: a value of hex digits only could, in principle, sit inside some digest.
    password = "pw" + secrets.token_urlsafe(24)
    htpasswd = root / "htpasswd"  # holds the password's hash only; the value goes in on stdin
    subprocess.run(
        [
            python,
            "-c",
            "import sys; from passlib.apache import HtpasswdFile as H; h = H(sys.argv[1], new=True);"
            " h.set_password(sys.argv[2], sys.stdin.read()); h.save()",
            str(htpasswd),
            LOGIN,
        ],
        input=password,
        text=True,
        check=True,
        timeout=60,
    )
    with socket.socket() as probe:  # a free port (the server takes it a moment later)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = root / "access.log"
    # --disable-fallback: a package it lacks is a 404, never a redirect to PyPI. --cache-control:
    # files a year, as PyPI sends them; pip's HTTP cache keeps only what the index lets it (without
    # the header, pypiserver's default, pip downloads the wheel again even with the cache mounted).
    command = (
        f"run --host 127.0.0.1 --port {port} --authenticate download,list,update --disable-fallback"
        " --cache-control 31536000 -v"
    )
    server = subprocess.Popen(
        [
            str(pypiserver_venv / "bin" / "pypi-server"),
            *command.split(),
            *("--passwords", str(htpasswd), "--log-file", str(log), "--log-stream", "none", str(packages)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"pypiserver exited ({server.returncode}); its log: {log}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "pypiserver did not answer within 60 s"
                time.sleep(0.3)
        with pytest.raises(urllib.error.HTTPError, match="401"):  # the login is wanted
            urllib.request.urlopen(f"http://127.0.0.1:{port}/simple/", timeout=5)
        yield Index(f"http://127.0.0.1:{port}/simple/", port, password, log)
    finally:
        server.terminate()
        server.wait(timeout=30)


def write_matrix(project: Project, index: Index, cell_arg: str, run: str) -> None:
    document = {
        "version": 1,
        "templates": "templates",
        "build": {"builder": "buildkit", "compression": "zstd"},
        "publish": {
            "repository": project.repository,
            "registry": REGISTRY,
            "tags": {"readable": "{base}-{torch}"},
        },
        "defaults": {"env": {"RUN_ID": run}, "pip_packages": [PACKAGE], "build_args": {"CELL_ARG": cell_arg}},
        "axes": {"torch": ["2.1"], "flavour": ["runtime"]},
        "advisories": critical_waivers(["2.1"]),
        "bases": {"debian": {"image": DEBIAN_PYTHON, "os": "debian12", "python": "3.11", "cuda": False}},
        "sources": {
            "pip": {
                "index_url": index.url,
                # pip caches nothing from a plain-http index unless the host is trusted
                "trusted_hosts": [f"127.0.0.1:{index.port}"],
                # the host as in the index URL, port included (what a user copies)
                "credentials": [{"host": f"127.0.0.1:{index.port}", "login": LOGIN, "secret": SECRET_ID}],
            }
        },
    }
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


CELL = "debian-torch2.1.2-cpu-py3.11-runtime"


@pytest.fixture
def secret_project(tmp_path: Path, debian_python: str, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.delenv(SECRET_ENV, raising=False)  # given only where a test gives it
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    return Project(tmp_path, f"imagekit-test/it-{RUN_ID}-{uuid.uuid4().hex[:6]}")


# -- where a value could hide -------------------------------------------------------------------------

_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


def _expanded(data: bytes) -> bytes:
    """``data``, decompressed when it is a gzip or zstd blob (a layer), else as it is."""
    if data.startswith(_GZIP):
        return gzip.decompress(data)
    if data.startswith(_ZSTD):
        return subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=True).stdout
    return data


@dataclass
class Search:
    """Looks for the password (and the basic-auth header it would make) in everything it is shown."""

    needles: tuple[bytes, ...]
    looked: dict[str, int]  # where -> how many pieces searched
    found: list[str]

    @classmethod
    def of(cls, password: str) -> Search:
        header = base64.b64encode(f"{LOGIN}:{password}".encode())
        return cls((password.encode(), header), {}, [])

    def bytes(self, where: str, data: bytes, kind: str) -> None:
        self.looked[kind] = self.looked.get(kind, 0) + 1
        if any(needle in data for needle in self.needles):
            self.found.append(where)


def _layer_files(search: Search, name: str, layer: bytes) -> list[str]:
    """The regular files with content under /root/.cache/pip and /root/.netrc of one layer tar."""
    kept = []
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        for member in tar:
            path = member.name.lstrip("./")
            if (path.startswith("root/.cache/pip/") or path == "root/.netrc") and member.size > 0:
                kept.append(f"{name}:{path}")
    return kept


def _saved_image(api: docker.APIClient, image: str, search: Search) -> list[str]:
    """Search `docker save` of ``image``, every layer decompressed; the pip cache files it holds."""
    saved = b"".join(api.get_image(image))
    search.bytes("docker save", saved, "docker save tar")
    cache_files: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(saved)) as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            raw = handle.read()
            data = _expanded(raw)
            search.bytes(f"docker save: {member.name}", data, "docker save members (decompressed)")
            if data[257:262] == b"ustar":  # a layer
                cache_files += _layer_files(search, member.name, data)
    return cache_files


def _registry_blobs(repositories: list[str], search: Search) -> None:
    """Every blob the registry holds for ``repositories`` (image, staging, BuildKit cache),
    manifests followed down to their layers and configs, layers decompressed."""

    def get(url: str, accept: str = "") -> bytes:
        request = urllib.request.Request(f"http://{REGISTRY}/v2/{url}", headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.read()  # type: ignore[no-any-return]

    accept = ",".join(
        f"application/vnd.{kind}"
        for kind in (
            "oci.image.index.v1+json",
            "oci.image.manifest.v1+json",
            "docker.distribution.manifest.v2+json",
            "docker.distribution.manifest.list.v2+json",
        )
    )
    for repository in repositories:
        tags = json.loads(get(f"{repository}/tags/list"))["tags"] or []
        pending = [json.loads(get(f"{repository}/manifests/{tag}", accept)) for tag in tags]
        seen: set[str] = set()
        while pending:
            document = pending.pop()
            text = json.dumps(document).encode()
            search.bytes(f"registry {repository} manifest", text, "registry manifests")
            children = [*document.get("manifests", []), *document.get("layers", [])]
            children += [document["config"]] if "config" in document else []
            for child in children:
                if child["digest"] in seen:
                    continue
                seen.add(child["digest"])
                data = _expanded(get(f"{repository}/blobs/{child['digest']}"))
                search.bytes(f"registry {repository} {child['digest']}", data, "registry blobs")
                if child.get("mediaType", "").endswith(("manifest.v1+json", "index.v1+json", "v2+json")):
                    pending.append(json.loads(data))


def _our_repositories(project: Project) -> list[str]:
    """The registry's repositories of ``project`` (its catalog, a page at a time)."""
    ours: list[str] = []
    last = ""
    while True:
        url = f"http://{REGISTRY}/v2/_catalog?n=1000&last={last}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            page: list[str] = json.loads(answer.read())["repositories"] or []
        ours += [name for name in page if name.startswith(project.repository)]
        if len(page) < 1000:
            return ours
        last = page[-1]


# -- the tests ------------------------------------------------------------------------------------------


def test_an_authenticated_index_its_secret_and_the_pip_cache_mount(
    secret_project: Project, index: Index, api: docker.APIClient
) -> None:
    """One cell through its life (one test: each build of the 613 MB base costs a minute here):
    refused without its secret, built and staged with it, rebuilt after a build-argument change
    from pip's cache mount, refused again once its pip step is cached; then the password is
    searched for everywhere the runs left something."""
    project = secret_project
    run = uuid.uuid4().hex[:8]
    write_matrix(project, index, "one", run)

    def asked() -> int:
        """Requests for this run's package (the log also holds the fixture's readiness polls)."""
        return sum(PACKAGE in line or MODULE in line for line in index.access_log.read_text().splitlines())

    requests = asked()

    def refused(*flags: str) -> None:
        missing = project.build(*flags)
        assert missing.returncode == 2, missing.stderr
        assert missing.stderr.strip().splitlines() == [
            f"imagekit: error: secret {SECRET_ID} (index credentials for 127.0.0.1:{index.port})"
            f" is not given: set {SECRET_ENV} or pass --secret {SECRET_ID}=FILE; nothing was built"
        ], missing.stderr
        assert asked() == requests  # pip never ran

    refused()
    assert not api.images(name=project.repository)
    assert not (project.root / ".imagekit" / "report.json").exists()

    env = {SECRET_ENV: index.password}
    outputs = [project.build("--push", env=env)]
    assert outputs[0].returncode == 0, outputs[0].stderr
    result = project.report()[CELL]
    assert result["status"] == "built" and index.wheel_downloads() == 1
    # BuildKit pushed it straight to the registry (issue 46): run what was staged
    staged = result["staged"]
    assert isinstance(staged, dict) and staged["digest"] == result["image_id"]
    api.pull(f"{staged['registry']}/{staged['repository']}@{staged['digest']}")
    command = [f"{VENV}/bin/python", "-c", f"import {MODULE}; print({MODULE}.GREETING)"]
    installed = api.create_container(str(result["image_id"]), command, network_disabled=True)
    try:
        api.start(installed)
        assert api.wait(installed, timeout=60)["StatusCode"] == 0
        assert api.logs(installed).decode().strip() == "installed from the authenticated index"
    finally:
        api.remove_container(installed, force=True)

    # A build argument of the pip step changed: the step runs again and finds the wheel in the
    # cache mount (the index serves its page, not the wheel).
    write_matrix(project, index, "two", run)
    outputs.append(project.build(env=env))
    assert outputs[-1].returncode == 0, outputs[-1].stderr
    rebuilt = project.report()[CELL]
    assert rebuilt["status"] == "built"
    log = Path(project.root, str(rebuilt["log"])).read_text()
    step = [line for line in log.splitlines() if f"{VENV}/bin/pip install" in line]
    assert step and not step[-1].endswith(": CACHED"), log  # pip ran, and found the wheel cached
    assert index.wheel_downloads() == 1, index.access_log.read_text()

    # The pip step is now in BuildKit's cache, which does not key on secrets: BuildKit would
    # answer it without one. imagekit refuses, and tags nothing new.
    requests = asked()
    report = (project.root / ".imagekit" / "report.json").read_bytes()
    images = api.images(name=project.repository)
    os.environ.pop(SECRET_ENV, None)
    refused()
    refused("--force")
    assert api.images(name=project.repository) == images
    assert (project.root / ".imagekit" / "report.json").read_bytes() == report

    # the commands a user runs next, which print what the image and the run recorded
    outputs += [project.run("report"), project.run("plan", "--matrix", "matrix.yaml", "--json")]
    search = Search.of(index.password)
    for number, output in enumerate(outputs):
        search.bytes(f"output {number}", (output.stdout + output.stderr).encode(), "imagekit output")
    state = project.root / ".imagekit"
    written = [path for path in sorted(project.root.rglob("*")) if path.is_file()]
    assert state / "report.json" in written and any(p.parent.name == "logs" for p in written)
    for path in written:  # the report, the build logs, the rendered files, every state file
        search.bytes(str(path), _expanded(path.read_bytes()), "files in the project and state dir")
    assert not list(state.rglob(".secrets-*")), "the run's netrc outlived it"
    image = str(rebuilt["image_id"])
    search.bytes("inspect", json.dumps(api.inspect_image(image)).encode(), "image inspect + labels")
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--format", "{{json .}}", image],
        capture_output=True,
        check=True,
    ).stdout
    assert b"pip install" in history  # the step is recorded, its secret mount is not
    search.bytes("docker history", history, "docker history --no-trunc")
    # the rebuilt image's layers from `docker save`; the staged one's from the registry
    cache_files = _saved_image(api, image, search)
    repositories = _our_repositories(project)
    assert any(name.endswith("/buildcache") for name in repositories), repositories
    _registry_blobs(repositories, search)

    print("searched:", json.dumps(search.looked, indent=1))
    assert search.found == []
    # the netrc and pip's cache were mounts: nothing of them is in any layer
    assert cache_files == []


# A step that prints the netrc it is given (issue 45): as it is, base64'd, percent-encoded, as an
# HTTP Basic header and on a last line with no newline; with FAIL set in the cell's env it fails
# after printing. The base64 is unwrapped: a form split across lines is not masked (README).
PRINTS_THE_NETRC = (
    "FROM {{ cell.base_image }}\n"
    "{% for name, value in cell.env %}ENV {{ name }}={{ value }}\n{% endfor %}"
    "{% for name in recipe.build_args %}ARG {{ name }}\n{% endfor %}"
    "RUN {{ recipe.run.extra }}cat /root/.netrc && python3 -c '"
    'import base64, sys, urllib.parse; n = open("/root/.netrc").read(); p = n.split()[-1];'
    ' print("netrc", base64.b64encode(n.encode()).decode());'
    ' print("quoted", urllib.parse.quote(p));'
    ' print("basic", base64.b64encode(("ci-bot:" + p).encode()).decode());'
    ' sys.stdout.write("tail " + p)'
    '\' && test -z "${FAIL:-}"\n'
    'LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}" {% endfor %}\n'
)


def test_a_step_that_prints_the_netrc_leaks_it_into_nothing_imagekit_prints_or_writes(
    secret_project: Project, index: Index, api: docker.APIClient
) -> None:
    """The netrc reaches a step, which prints it (as `RUN cat /root/.netrc` would): built, then
    failing; the password, its encodings and each half of it are in no output, log or report."""
    project = secret_project
    (project.root / "templates" / "Dockerfile.j2").write_text(PRINTS_THE_NETRC)
    write_matrix(project, index, "cat", uuid.uuid4().hex[:8])
    env = {SECRET_ENV: index.password}
    outputs = [project.build("--json", env=env)]
    assert outputs[0].returncode == 0, outputs[0].stderr
    log = Path(project.root, str(project.report()[CELL]["log"])).read_text()
    assert f"machine 127.0.0.1 login {LOGIN} password ***" in log, log  # the step printed it
    assert "quoted ***" in log and "basic ***" in log and "tail ***" in log, log

    matrix = yaml.safe_load((project.root / "matrix.yaml").read_text())
    matrix["defaults"]["env"]["FAIL"] = "1"
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    outputs.append(project.build(env=env))
    assert outputs[-1].returncode == 1, outputs[-1].stderr
    failed = project.report()[CELL]
    assert failed["status"] == "failed" and "tail ***" in failed["error_tail"], failed
    outputs += [project.run(*command) for command in (["report"], ["report", "--markdown"])]

    password = index.password
    half = len(password) // 2
    search = Search.of(password)
    search.needles += tuple(
        text.encode()
        for text in (password[:half], password[half:], base64.b64encode(password.encode()).decode())
    )
    for number, output in enumerate(outputs):
        search.bytes(f"output {number}", (output.stdout + output.stderr).encode(), "imagekit output")
    for path in sorted(project.root.rglob("*")):  # the report, the build logs, every state file
        if path.is_file():
            search.bytes(str(path), path.read_bytes(), "files in the project and state dir")
    assert search.looked and search.found == []
