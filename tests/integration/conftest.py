"""Integration fixtures: a real Docker engine, small local base images, and cleanup by label.

Every image the tests build carries ``imagekit-test.run=<uuid>`` (through ``imagekit build
--label``); the session removes exactly those at the end, and the untagged images that appeared
while it ran, plus the registry tags it pushed. Each module removes the untagged images it left
(and a module with multi-GB images its own, ``remove_built``) when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest
from docker.errors import APIError, ImageNotFound

from imagekit.facts.advisories import load_advisories
from testbed.imagekit_process import imagekit
from testbed.matrix_projects import BUSYBOX, RUN_ID, TEMPLATE, TEST_LABEL, Project

REPO_ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = "imagekit-local/debian-python:bookworm"
# The same base debootstrapped for arm64 (its second stage under QEMU): the per-platform tag.
DEBIAN_PYTHON_ARM64 = "imagekit-local/debian-python:bookworm-arm64"


def _require_docker() -> bool:
    return os.environ.get("IMAGEKIT_REQUIRE_DOCKER") == "1"


def _connect() -> docker.APIClient:
    """The engine DOCKER_HOST names (else the default socket), answering a ping."""
    client = docker.APIClient(version="auto", **docker.utils.kwargs_from_env())
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    return client


@pytest.fixture(scope="session")
def api() -> Iterator[docker.APIClient]:
    try:
        client = _connect()
    except Exception as exc:  # any failure to reach the engine decides skip-or-fail
        reason = f"no Docker engine at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}: {exc}"
        if _require_docker():
            pytest.fail(f"IMAGEKIT_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(f"{reason} (start one with scripts/engine.sh docker)")
    dangling_before = _dangling(client)
    yield client
    _cleanup(client, dangling_before)
    client.close()


def _dangling(client: docker.APIClient) -> set[str]:
    """Untagged images: the classic builder keeps each step of a build as one (they carry the base's
    labels, not the run's), and they are left untagged once the build's own image is removed."""
    return {i["Id"] for i in client.images(filters={"dangling": True})}


def _remove_images(client: docker.APIClient, images: Iterable[str]) -> None:
    """Remove ``images`` (ids or names, tags and all), eight at a time: on the containerd image
    store each removal waits for a garbage collection of the whole content store (~0.9 s for a tiny
    image here), and removals at once overlap (6 tiny images: 5.3 s one by one, 1.9 s eight at a
    time). One gone with another already, or still a parent: suppressed, as the callers take what
    is left in a later pass or at the session's end."""

    def remove(image: str) -> None:
        with contextlib.suppress(ImageNotFound, APIError):
            client.remove_image(image, force=True)

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="remove-image") as pool:
        list(pool.map(remove, images))


def _prune_ours(client: docker.APIClient, *, tagged_too: bool) -> None:
    """Prune the run's images (untagged only, or ``tagged_too``) in one engine call. Removing an
    image one by one is not enough on the containerd store: the classic builder keeps each step
    as an image hidden behind its child, and removing the child only uncovers the next (CI's run
    left 44 of them after three passes); a prune takes the whole chain with one collection (15
    images in 2.2 s here, against ~0.9 s an image one by one)."""
    with contextlib.suppress(APIError):
        client.prune_images(filters={"label": f"{TEST_LABEL}={RUN_ID}", "dangling": not tagged_too})


def _cleanup(client: docker.APIClient, dangling_before: set[str]) -> None:
    for container in client.containers(all=True, filters={"label": f"{TEST_LABEL}={RUN_ID}"}):
        client.remove_container(container["Id"], force=True)
    _prune_ours(client, tagged_too=True)
    for _ in range(5):  # untagged images without the run's label; a parent goes in a later pass
        ours = {i["Id"] for i in client.images(filters={"label": f"{TEST_LABEL}={RUN_ID}"})}
        ours |= _dangling(client) - dangling_before
        if not ours:
            return
        _remove_images(client, ours)


@pytest.fixture(scope="module", autouse=True)
def _module_dangling_images() -> Iterator[None]:
    """After each module, the untagged images it left: the classic builder keeps every step as an
    image, which the containerd image store holds as its own compressed blob and snapshot (a
    multi-GB torch step costs twice its size until removed); a tag built over again leaves its old
    image untagged too. A CI machine's disk is finite: left for the session's end, one run's modules
    together filled it. Images untagged before the module are left alone."""
    try:
        client = _connect()
    except Exception:  # no engine: the module's tests skip or fail on their own
        yield
        return
    before = _dangling(client)
    yield
    _prune_ours(client, tagged_too=False)
    _remove_images(client, _dangling(client) - before)  # a child's parent left: the session's sweep
    client.close()


def remove_built(api: docker.APIClient, root: Path) -> None:
    """Remove, tags and all, the images a module's own ``imagekit build`` in ``root`` made (the
    ones its report names): a module's multi-GB images are removed when it ends, not the session."""
    report = root / ".imagekit" / "report.json"
    if not report.exists():
        return
    cells = json.loads(report.read_text())["cells"]
    _remove_images(api, {cell["image_id"] for cell in cells if cell.get("image_id")})


def example_project(example: Path, root: Path, image: str, repository: str) -> Path:
    """``root`` made a copy of the wheel example ``example``: its setup.sh run (idempotent, cached
    downloads), its wheelhouse hard-linked (copied across file systems) and its matrix naming the
    test's own ``repository`` instead of ``image``, so a user's image keeps its tags."""
    setup = subprocess.run(
        [str(example / "setup.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    assert setup.returncode == 0, f"{example.name}/setup.sh failed:\n{setup.stderr[-3000:]}"
    (root / "wheelhouse").mkdir()
    for wheel in (example / "wheelhouse").iterdir():
        try:
            os.link(wheel, root / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy(wheel, root / "wheelhouse" / wheel.name)
    text = (example / "matrix.yaml").read_text()
    assert image in text
    (root / "matrix.yaml").write_text(text.replace(image, repository))
    return root


def install_steps_template(branch: str) -> str:
    """A test template holding the shipped template's install steps of one branch verbatim (cut from
    dockerfiles/templates/_pip.j2 from ``{% <branch> %}`` to the next ``{% elif``/``{% else``) and nothing
    of its build guard (it would import a stand-in torch): the steps under test are the product's."""
    shipped = (REPO_ROOT / "dockerfiles" / "templates" / "_pip.j2").read_text()
    steps = re.search(r"\{% " + re.escape(branch) + r" %\}\n(.*?)\{% el(?:if|se)\b", shipped, re.DOTALL)
    assert steps is not None, f"dockerfiles/templates/_pip.j2 has no {{% {branch} %}} branch any more"
    labels = '{% for name, value in recipe.labels %}{{ name }}="{{ value }}" {% endfor %}'
    return (
        "FROM {{ cell.base_image }}\nARG SOURCE_DATE_EPOCH\n"
        "ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH\n"
        f"{steps.group(1)}LABEL {labels}\n"
    )


def venv_tool_wheels(dest: Path) -> list[Path]:
    """The real pip and setuptools wheels every imagekit venv installs right after it is made
    (imagekit/data/advisories.yaml's venv_tools), downloaded once per test run and linked into
    ``dest``: a wheelhouse or an index of stand-ins must serve the real ones (a stand-in pip would
    replace the venv's own and break every later install)."""
    cache = Path(os.environ["IMAGEKIT_CACHE_DIR"]) / "venv-tools"
    requirements = load_advisories().venv_requirements()
    names = [f"{r.replace('==', '-')}-py3-none-any.whl" for r in requirements]
    if not all((cache / name).is_file() for name in names):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--dest", str(cache), *requirements],
            env={**os.environ, "PIP_CONSTRAINT": ""}, check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (dest / name).exists():
            try:
                os.link(cache / name, dest / name)
            except OSError:
                shutil.copy(cache / name, dest / name)
    return [dest / name for name in names]


def pip_freeze(image: str) -> list[str]:
    """``pip list --format=freeze`` in a container of ``image`` (no network)."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network=none", image, "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()


def _local_base(api: docker.APIClient, image: str, which: str) -> str:
    """``image`` from scripts/base-images.sh (``which``), built on first use, kept for later runs."""
    try:
        api.inspect_image(image)
    except ImageNotFound:
        subprocess.run(["bash", str(REPO_ROOT / "scripts" / "base-images.sh"), which], check=True)
    return image


@pytest.fixture(scope="session")
def busybox(api: docker.APIClient) -> str:
    return _local_base(api, BUSYBOX, "busybox")


@pytest.fixture(scope="session")
def debian_python(api: docker.APIClient) -> str:
    """The debootstrap'd bookworm with Python 3.11 (the offline demo's base)."""
    return _local_base(api, DEBIAN_PYTHON, "debian-python")


@pytest.fixture(scope="session")
def emulation(api: docker.APIClient) -> None:
    """linux/arm64 containers run here: natively on an aarch64 host, else under QEMU, registered
    by scripts/engine.sh emulation (idempotent, about a second once registered)."""
    if platform.machine() == "aarch64":
        return
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "engine.sh"), "emulation"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "aarch64\n", f"engine.sh emulation: {done.stderr}"


@pytest.fixture(scope="session")
def debian_python_arm64(api: docker.APIClient, emulation: None) -> str:
    """The same bookworm for arm64: a foreign debootstrap, its second stage under QEMU on an x86
    host (about 9 minutes the first time, kept for later runs)."""
    return _local_base(api, DEBIAN_PYTHON_ARM64, "debian-python-arm64")


@pytest.fixture
def project(tmp_path: Path, busybox: str) -> Iterator[Project]:
    name = f"imagekit-test/it-{RUN_ID}-{uuid.uuid4().hex[:6]}"
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    yield Project(tmp_path, name)


class SocketProxy:
    """A unix-socket relay to the engine that a test can cut: an engine dying mid-run,
    seen from imagekit, without stopping the shared dockerd."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path = path
        self.target = target
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self.lock:
                self.connections += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def kill(self) -> None:
        self.server.close()
        self.path.unlink(missing_ok=True)
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                connection.close()


# The offline demo's cell; its front ends are this id with -jupyter and -ssh.
DEMO_CELL = "debian-local-torch2.13.0-cpu-py3.11-runtime"


@pytest.fixture(scope="session")
def demo(api: docker.APIClient, debian_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline demo matrix built for real: PyTorch's CPU wheel from a local wheelhouse."""
    setup = subprocess.run(
        [str(REPO_ROOT / "examples" / "offline" / "setup.sh")],
        capture_output=True,
        text=True,
        # Without the arm64 base (the demo's arm64 cell is left out below; debootstrapping it under
        # QEMU costs ~8 minutes here and is the multiarch tier's to prove). scripts/test.sh ran it
        # before the slow tier, so here it finds its base and wheels.
        env={**os.environ, "ARM64_BASE": "0"},
        timeout=1800,
        check=False,
    )
    assert setup.returncode == 0, f"examples/offline/setup.sh failed (rc={setup.returncode}):\n{setup.stderr}"
    root = tmp_path_factory.mktemp("demo")
    # what a user's runs left in the example (report, rendered files) stays out of the test's copy
    ignored = shutil.ignore_patterns(".imagekit", "generated")
    shutil.copytree(REPO_ROOT / "examples" / "offline", root, dirs_exist_ok=True, ignore=ignored)
    # The test's own image names: a user's demo images (same matrix) must keep their tags.
    matrix = root / "matrix.yaml"
    text = matrix.read_text()
    for name in ("imagekit-demo/pytorch", "imagekit-local/debian-python-demo"):
        assert name in text
        text = text.replace(name, f"imagekit-test/{name.split('/')[1]}-{RUN_ID}")
    # The demo's Grace cell is built under QEMU (about 11 minutes on 2 CPUs) and read by no test of
    # this fixture: its emulated build is the multiarch tier's proof, and the arm64 base's own tests
    # (multiarch/test_arm64_base.py) run there too. The x86 cell, its front ends and their checks stay.
    arm64_cell = re.compile(r"^include:\n(?:  - .*platform: linux/arm64.*\n)+", re.MULTILINE)
    text, dropped = arm64_cell.subn("", text)
    assert dropped == 1, "the offline demo matrix no longer has its arm64 include: update this fixture"
    matrix.write_text(text)
    # The classic builder on the containerd image store compresses each step's layer as it commits
    # it: the torch step takes longer than on overlay2 (~6 min here on 2 busy CPUs).
    done = imagekit(
        "build", "--matrix", "matrix.yaml", "--label", f"{TEST_LABEL}={RUN_ID}", cwd=root, timeout=1800
    )
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture(scope="module")
def tiny_bases(api: docker.APIClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A base per platform whose only file is a text file: ``imagekit-test/tiny-<run>:{arch}``.
    The classic builder's cache does not key on the platform: each is built with no cache."""
    context = tmp_path_factory.mktemp("tiny")
    (context / "hello.txt").write_text("one platform's base\n")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello.txt /hello.txt\n")
    name = f"imagekit-test/tiny-{RUN_ID}"
    for arch in ("amd64", "arm64"):
        for _ in api.build(
            path=str(context),
            tag=f"{name}:{arch}",
            platform=f"linux/{arch}",
            nocache=True,
            rm=True,
            labels={TEST_LABEL: RUN_ID},
            decode=True,
        ):
            pass
        assert api.inspect_image(f"{name}:{arch}")["Architecture"] == arch
    return name + ":{arch}"
