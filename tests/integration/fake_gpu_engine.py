"""A private test engine whose GPU request path is real but whose GPU is not.

dockerd registers its NVIDIA device driver at start only when ``nvidia-container-runtime-hook``
is on its PATH, and then calls that hook as an OCI prestart hook with the container state on
stdin. Putting a fake hook there exercises everything imagekit does for ``--gpus``: the device
request is accepted, the engine sets ``NVIDIA_VISIBLE_DEVICES`` and calls the hook, and the
container starts with no driver, so the checks that need one must fail with the right diagnosis.

Never shipped: this file lives under tests/ only.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from tests.integration.private_engine import private_engine

HOOK = """#!/bin/sh
# Test-only stand-in for nvidia-container-runtime-hook: record the call and the devices the engine
# gave the container (the NVIDIA_VISIBLE_DEVICES its driver put in the OCI spec), let it start.
state=$(mktemp "{state}.XXXXXX")  # one file per call: containers start concurrently
cat > "$state"
echo "$*" >> "{calls}"
"{python}" - "$state" >> "{devices}" <<'EOF'
import json, sys
state = json.load(open(sys.argv[1]))
with open(state["bundle"] + "/config.json") as spec:
    process = json.load(spec)["process"]
given = [e.split("=", 1)[1] for e in process["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
print(json.dumps({{"visible": given[-1] if given else None, "args": process["args"]}}))
EOF
rm -f "$state"
exit 0
"""


@dataclass(frozen=True)
class FakeGpuEngine:
    host: str  # DOCKER_HOST for this engine
    calls: Path  # one line per prestart-hook call
    devices: Path  # one JSON line per call: the container's NVIDIA_VISIBLE_DEVICES and its command

    def client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.host, version="auto")

    def hook_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def containers_seen(self) -> list[dict[str, Any]]:
        """Each GPU container the engine started: {"visible": its devices, "args": its command}."""
        lines = self.devices.read_text().splitlines() if self.devices.exists() else []
        return [json.loads(line) for line in lines]


@contextlib.contextmanager
def fake_gpu_engine(root: Path, images: tuple[str, ...]) -> Iterator[FakeGpuEngine]:
    """Start the engine under ``root`` with the fake hook on its PATH, copy ``images`` into it,
    and stop and delete it all afterwards."""
    hooks = root.parent / f"{root.name}-hooks"
    hooks.mkdir(parents=True)
    calls = hooks / "hook-calls.log"
    devices = hooks / "hook-devices.log"
    hook = hooks / "nvidia-container-runtime-hook"
    hook.write_text(
        HOOK.format(state=hooks / "hook-state.json", calls=calls, devices=devices, python=sys.executable)
    )
    hook.chmod(0o755)
    try:
        with private_engine(root, images, extra_path=hooks) as engine:
            yield FakeGpuEngine(host=engine.host, calls=calls, devices=devices)
    finally:
        for path in hooks.iterdir():
            path.unlink()
        hooks.rmdir()
