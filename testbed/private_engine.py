"""A second, test-only dockerd on a private socket and data root, that a test may kill outright.

The shared engine at /var/run/docker.sock is never touched. This engine runs in its own session
(dockerd, its containerd and every shim in one process group), so ``kill()`` takes the whole
engine down at once, as a crash or an OOM kill would; ``start()`` brings it back on the same data
root, with the images it had. ``close()`` stops it and deletes everything it wrote.

Never shipped: testbed/ is not in the wheel (pyproject.toml's wheel packages).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker

# The engine of record as scripts/engine.sh unpacks it (Debian 13's dockerd 26, its containerd and
# shims); the dockerd on PATH where it is not there (a user's own engine).
ENGINE_PREFIX = Path("/opt/imagekit-engine")


class PrivateEngine:
    def __init__(
        self, root: Path, extra_path: Path | None = None, config: Mapping[str, Any] | None = None
    ) -> None:
        self.root = root  # a short path: unix sockets are limited to 108 bytes
        self.extra_path = extra_path  # put first on dockerd's PATH (a fake NVIDIA hook, say)
        self.config = dict(config or {})  # more daemon.json settings (CDI on, its spec dirs)
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log_path = root / "dockerd.log"
        self.daemon: subprocess.Popen[bytes] | None = None

    def client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.host, version="auto", timeout=60)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # The shared engine's image store, so an image keeps its id (the manifest digest) here;
        # its own file, so the host's /etc/docker/daemon.json is never read.
        config = self.root / "daemon.json"
        features = {"containerd-snapshotter": True, **self.config.get("features", {})}
        config.write_text(json.dumps({**self.config, "features": features}) + "\n")
        dockerd = ENGINE_PREFIX / "usr" / "sbin" / "dockerd"
        with self.log_path.open("a") as log:
            self.daemon = subprocess.Popen(
                [
                    str(dockerd) if dockerd.exists() else "dockerd",
                    f"--config-file={config}",
                    f"--data-root={self.root / 'data'}",
                    f"--exec-root={self.root / 'exec'}",
                    f"--pidfile={self.root / 'dockerd.pid'}",
                    f"--host={self.host}",
                    "--bridge=none",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--ip-forward=false",
                    "--ip-masq=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._environment(),
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"test dockerd exited: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(Exception):
                client = self.client()
                client.ping()
                client.close()
                return
            time.sleep(0.3)
        raise RuntimeError(f"test dockerd did not answer in 60 s: {self.log_path.read_text()[-2000:]}")

    def _environment(self) -> dict[str, str]:
        path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        if ENGINE_PREFIX.exists():  # its containerd, shims and docker-init
            path = f"{ENGINE_PREFIX / 'usr' / 'bin'}:{ENGINE_PREFIX / 'usr' / 'sbin'}:{path}"
        if self.extra_path is not None:
            path = f"{self.extra_path}:{path}"
        return {**os.environ, "PATH": path}

    def kill(self) -> None:
        """SIGKILL the engine's whole process group: dockerd, containerd, shims, build steps."""
        assert self.daemon is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.daemon.pid, signal.SIGKILL)
        self.daemon.wait(timeout=30)
        self.daemon = None
        self.socket.unlink(missing_ok=True)
        (self.root / "dockerd.pid").unlink(missing_ok=True)
        # The killed containerd may linger as a zombie (a container's pid 1 need not reap), and
        # a restarting dockerd would wait on it: its pidfile goes, so a fresh one is started.
        (self.root / "exec" / "containerd" / "containerd.pid").unlink(missing_ok=True)

    def load(self, image: str) -> None:
        """Copy ``image`` from the shared engine into this one."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, check=True, capture_output=True
        )
        if save.wait() != 0:
            raise RuntimeError(f"docker save {image} failed")

    def close(self) -> None:
        daemon = self.daemon
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
            # Whatever of its group outlived it (containerd, shims) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True, check=False)
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_engine(
    root: Path,
    images: tuple[str, ...],
    extra_path: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> Iterator[PrivateEngine]:
    engine = PrivateEngine(root, extra_path, config)
    try:
        engine.start()
        for image in images:
            engine.load(image)
        yield engine
    finally:
        engine.close()
