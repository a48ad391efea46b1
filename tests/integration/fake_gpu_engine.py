"""A second, test-only dockerd whose GPU request path is real but whose GPU is not.

dockerd registers its NVIDIA device driver at start only when ``nvidia-container-runtime-hook``
is on its PATH, and then calls that hook as an OCI prestart hook with the container state on
stdin. Putting a fake hook there exercises everything imagekit does for ``--gpus``: the device
request is accepted, the engine sets ``NVIDIA_VISIBLE_DEVICES`` and calls the hook, and the
container starts with no driver, so the checks that need one must fail with the right diagnosis.

Never shipped: this file lives under tests/ only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

HOOK = """#!/bin/sh
# Test-only stand-in for nvidia-container-runtime-hook: record the call, let the container start.
cat > "{state}"
echo "$*" >> "{calls}"
exit 0
"""


@dataclass(frozen=True)
class FakeGpuEngine:
    host: str  # DOCKER_HOST for this engine
    calls: Path  # one line per prestart-hook call
    root: Path

    def client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.host, version="auto")

    def hook_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@contextlib.contextmanager
def fake_gpu_engine(root: Path, images: tuple[str, ...]) -> Iterator[FakeGpuEngine]:
    """Start the engine under ``root`` (a short path: unix sockets are limited to 108 bytes),
    copy ``images`` into it from the main engine, and stop and delete it all afterwards."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    hook = bin_dir / "nvidia-container-runtime-hook"
    hook.write_text(HOOK.format(state=root / "hook-state.json", calls=root / "hook-calls.log"))
    hook.chmod(0o755)
    socket_path = root / "docker.sock"
    log = (root / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [
            "dockerd",
            f"--data-root={root / 'data'}",
            f"--exec-root={root / 'exec'}",
            f"--pidfile={root / 'dockerd.pid'}",
            f"--host=unix://{socket_path}",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
        ],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    engine = FakeGpuEngine(host=f"unix://{socket_path}", calls=root / "hook-calls.log", root=root)
    try:
        _wait_until_up(engine, daemon, root / "dockerd.log")
        for image in images:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            subprocess.run(
                ["docker", "-H", engine.host, "load", "-q"],
                stdin=save.stdout,
                check=True,
                capture_output=True,
            )
            if save.wait() != 0:
                raise RuntimeError(f"docker save {image} failed")
        yield engine
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        # overlay mounts and containerd state go with the daemon; then the files can go too
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _wait_until_up(engine: FakeGpuEngine, daemon: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"test dockerd exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(Exception):
            client = engine.client()
            client.ping()
            client.close()
            return
        time.sleep(0.3)
    raise RuntimeError(f"test dockerd did not answer in 60 s: {log.read_text()[-2000:]}")
