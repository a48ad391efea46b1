"""First runs, from empty, as on a machine that has never run the README's commands: the engine of
record unpacked into an empty prefix from an empty cache (scripts/engine.sh), the base images built
with none present (scripts/base-images.sh), and the offline example's setup with an empty wheelhouse
and pip cache (examples/offline/setup.sh, which builds its base too).

CI's machine keeps /opt/imagekit-engine between runs, so `install_engine` returned at its first line
there and a SIGPIPE race in it (apt-cache | awk's exit, under pipefail) failed 2 fresh machines in 3
unseen. Here it runs from empty, several times (a race needs repeats), into prefixes of the test's
own: the engine the suite runs on is not touched. The first run downloads every package (about
90 MB); the later ones reuse its .debs and lists but parse apt's answers again, where the race was.
tests/unit/test_shell_scripts.py refuses the whole class of pipeline statically.

What is not run from empty here, and why: examples/cuda-wheels (2.6 GB of CUDA wheels) and
examples/nvcc-wheels (~4 GB) would add their whole download to every CI run (their cache is
~/.cache/imagekit, kept between runs; tests/integration/test_cuda_wheels.py and the opt-in cuda13 tier
build them from it); the arm64 base (a debootstrap under QEMU, ~8 minutes) runs in the opt-in
multiarch tier, from none when its tag is absent.

Needs: root, Debian's archive and the Python index (the registries this machine reaches), a running
engine for the images; about 2 minutes a download, ~4 for the debootstrap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import ImageNotFound

from testbed.matrix_projects import RUN_ID
from tests.integration.conftest import REPO_ROOT

ENGINE_SH = REPO_ROOT / "scripts" / "engine.sh"
REPEATS = 3


def install(prefix: Path, cache: Path, suites: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IMAGEKIT_ENGINE_PREFIX": str(prefix), "IMAGEKIT_ENGINE_CACHE": str(cache)}
    if suites is None:
        env.pop("IMAGEKIT_ENGINE_SUITE", None)
    else:
        env["IMAGEKIT_ENGINE_SUITE"] = suites
    return subprocess.run(
        ["bash", str(ENGINE_SH), "install-engine"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def versions(prefix: Path) -> dict[str, str]:
    def first_line(*argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.splitlines()[0]

    return {
        "dockerd": first_line(str(prefix / "usr/sbin/dockerd"), "--version"),
        "containerd": first_line(str(prefix / "usr/bin/containerd"), "--version"),
        "docker": first_line(str(prefix / "usr/bin/docker"), "--version"),
        "buildx": first_line(str(prefix / "usr/libexec/docker/cli-plugins/docker-buildx"), "version"),
    }


@pytest.fixture()
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = Path(tmp_path_factory.mktemp("engine-install", numbered=True))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_engine_installs_from_empty_again_and_again(scratch: Path) -> None:
    cache = scratch / "cache"
    seen: set[str] = set()
    for attempt in range(REPEATS):
        prefix = scratch / f"prefix-{attempt}"
        damaged = None
        if attempt == 1:
            # a cached .deb cut short (a disk that filled up): checked against the archive's
            # SHA256 and downloaded again, never unpacked
            damaged = min(cache.glob("*/debs/*.deb"), key=lambda deb: deb.stat().st_size)
            damaged.write_bytes(damaged.read_bytes()[:1000])
        done = install(prefix, cache)
        assert done.returncode == 0, f"attempt {attempt + 1}: rc {done.returncode}\n{done.stderr[-3000:]}"
        if damaged is not None:
            assert (
                f"cached {damaged} is not the archive's (SHA256 differs): downloading it again" in done.stderr
            )
            assert damaged.stat().st_size > 1000
        assert not (scratch / f"prefix-{attempt}.new").exists(), "the staging directory was left behind"
        complete = (prefix / ".complete").read_text().splitlines()
        # what was wanted, then what was got (the suite and the versions, also printed)
        assert complete[0].startswith("suites=sid trixie packages="), complete
        assert complete[1].startswith(("suite=sid ", "suite=trixie ")), complete
        assert complete[1].split(" ", 1)[1] in done.stderr
        found = versions(prefix)
        assert found["dockerd"].startswith("Docker version "), found
        assert found["buildx"].startswith("github.com/docker/buildx "), found
        # docker-init: the suite's static tini (sid's tini-static package, trixie's tini's)
        assert (prefix / "usr/bin/docker-init").readlink() == Path("tini-static")
        assert "not a dynamic executable" in ldd(prefix / "usr/bin/tini-static")
        seen.add(complete[1])
        # a second run over a complete prefix does nothing
        again = install(prefix, cache)
        assert again.returncode == 0 and "resolving" not in again.stderr, again.stderr
        shutil.rmtree(prefix)
    assert len(seen) == 1, seen  # the same engine every time


def test_a_suite_that_cannot_be_had_falls_back_to_the_next(scratch: Path) -> None:
    # What happens when sid's binaries need a newer glibc than the host's, or sid is unreachable:
    # the next suite in the list is installed, and the log says why the first was not.
    prefix = scratch / "prefix"
    done = install(prefix, scratch / "cache", suites="imagekit-no-such-suite trixie")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "apt-get update of imagekit-no-such-suite failed" in done.stderr
    assert "not using imagekit-no-such-suite's engine; trying the next suite" in done.stderr
    complete = (prefix / ".complete").read_text().splitlines()
    assert complete[1].startswith("suite=trixie dockerd 26.1."), complete
    assert versions(prefix)["dockerd"].startswith("Docker version 26.1."), complete


def test_no_suite_that_runs_is_one_line_and_nothing_installed(scratch: Path) -> None:
    # binaries that do not run (truncated, another machine's, a missing library) are
    # tests/unit/test_engine_sh.py's: no download makes them
    prefix = scratch / "prefix"
    done = install(prefix, scratch / "cache", suites="imagekit-no-such-suite")
    assert done.returncode == 3  # engine.sh's EXIT_NO_ENGINE
    assert done.stderr.splitlines()[-1] == (
        "[engine] ERROR: no engine of imagekit-no-such-suite installs and runs here"
        " (apt-get update of imagekit-no-such-suite failed);"
        f" nothing was installed into {prefix}: set IMAGEKIT_ENGINE_SUITE to a suite whose engine runs here"
    )
    assert not prefix.exists() and not (scratch / "prefix.new").exists()


def ldd(binary: Path) -> str:
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr


def engine_sh(command: str, name: str, prefix: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IMAGEKIT_ENGINE_PREFIX": str(prefix), "IMAGEKIT_ENGINE_CACHE": str(cache)}
    env.pop("IMAGEKIT_ENGINE_SUITE", None)
    return subprocess.run(
        ["bash", str(ENGINE_SH), command, name],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_the_engine_from_empty_runs_a_container_with_init(scratch: Path) -> None:
    # `engine.sh second` with a prefix of the test's own: that engine installed from empty and
    # started on its own socket, data and containerd; the engine at /var/run/docker.sock, and the
    # buildx every docker CLI uses, are not touched.
    name = f"init{RUN_ID[:8]}"
    prefix, cache = scratch / "prefix", scratch / "cache"
    plugin = Path("/usr/local/lib/docker/cli-plugins/docker-buildx")
    buildx_before = os.path.realpath(plugin)
    try:
        started = engine_sh("second", name, prefix, cache)
        assert started.returncode == 0, started.stderr[-3000:]
        assert os.path.realpath(plugin) == buildx_before
        docker_cli = [str(prefix / "usr/bin/docker"), "-H", f"unix:///run/imagekit-engine-{name}/docker.sock"]
        # an image of the static busybox alone (engine.sh installs busybox-static): nothing pulled
        rootfs = scratch / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(scratch / "rootfs.tar"), "."], check=True)
        image = f"imagekit-test/first-run-init-{RUN_ID}:latest"
        subprocess.run(
            [*docker_cli, "import", str(scratch / "rootfs.tar"), image], check=True, capture_output=True
        )
        ran = subprocess.run(
            [
                *docker_cli,
                "run",
                "--rm",
                "--init",
                "--network",
                "none",
                image,
                "/bin/busybox",
                "cat",
                "/proc/1/cmdline",
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr.decode(errors="replace")
        # pid 1 is docker-init (tini), the command its child
        assert ran.stdout.split(b"\0")[:3] == [b"/sbin/docker-init", b"--", b"/bin/busybox"], ran.stdout
    finally:
        stopped = engine_sh("stop-second", name, prefix, cache)
        assert stopped.returncode == 0, stopped.stderr[-3000:]


def remove_image(api: docker.APIClient, image: str) -> None:
    with contextlib.suppress(ImageNotFound):
        api.remove_image(image, force=True)


def test_the_busybox_base_builds_with_none_present(api: docker.APIClient) -> None:
    image = f"imagekit-test/first-run-busybox-{RUN_ID}:latest"
    env = {**os.environ, "IMAGEKIT_BUSYBOX_IMAGE": image}
    try:
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "base-images.sh"), "busybox"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert api.inspect_image(image)["Config"]["Labels"]["imagekit.test"] == "true"
        ran = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", image, "busybox", "echo", "ok"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.stdout == "ok\n", ran.stderr
    finally:
        remove_image(api, image)


def test_the_offline_example_sets_up_from_nothing(api: docker.APIClient, scratch: Path) -> None:
    # Its own base tag (so the debootstrap runs: none is present), wheelhouse and pip cache.
    image = f"imagekit-test/first-run-python-{RUN_ID}:bookworm"
    wheelhouse = scratch / "wheelhouse"
    env = {
        **os.environ,
        "IMAGEKIT_PYTHON_IMAGE": image,
        "WHEELHOUSE": str(wheelhouse),
        "PIP_CACHE_DIR": str(scratch / "pip-cache"),
        "WITH_ARM64": "0",
        "PYTHON": sys.executable,
    }
    try:
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "examples" / "offline" / "setup.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "debootstrap bookworm" in done.stderr, "the base was not built from none"
        wheels = sorted(p.name for p in wheelhouse.glob("*.whl"))
        assert any(w.startswith("torch-2.13.0+cpu-") for w in wheels), wheels
        assert any(w.startswith("jupyterlab-") for w in wheels), wheels
        ran = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                image,
                "python3",
                "-c",
                "import venv, ssl; print('ok')",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.stdout == "ok\n", ran.stderr
    finally:
        for tag in (image, image.replace(":bookworm", ":bookworm-amd64")):
            remove_image(api, tag)
