"""A private test engine whose GPU request path is real but whose GPU is not.

dockerd registers its NVIDIA device driver at start only when ``nvidia-container-runtime-hook``
is on its PATH, and then calls that hook as an OCI prestart hook with the container state on
stdin. Putting a fake hook there exercises everything imagekit does for ``--gpus``: the device
request is accepted, the engine sets ``NVIDIA_VISIBLE_DEVICES`` and calls the hook, and the
container starts with no driver, so the checks that need one must fail with the right diagnosis.

Never shipped: testbed/ is not in the wheel (pyproject.toml's wheel packages).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from testbed.private_engine import private_engine

HOOK = """#!/bin/sh
# Test-only stand-in for nvidia-container-runtime-hook: record the call and the devices the engine
# gave the container (the NVIDIA_VISIBLE_DEVICES its driver put in the OCI spec), let it start.
# Containers start concurrently (verify --jobs), so each call writes files of its own, in a
# directory of its own, and never appends to a log another call appends to: lines of two calls
# appended to one file interleaved once (two JSON records on one line).
call=$(mktemp -d "{calls}/call.XXXXXX")
echo "$*" > "$call/args"
cat > "$call/state.json"
"{python}" - "$call" <<'EOF'
import json, os, sys
call = sys.argv[1]
with open(os.path.join(call, "state.json")) as state:
    bundle = json.load(state)["bundle"]
with open(os.path.join(bundle, "config.json")) as spec:
    process = json.load(spec)["process"]
given = [e.split("=", 1)[1] for e in process["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
part = os.path.join(call, "container.json.part")
with open(part, "w") as out:
    json.dump({{"visible": given[-1] if given else None, "args": process["args"]}}, out)
os.replace(part, os.path.join(call, "container.json"))  # whole or absent, never half
EOF
exit 0
"""


@dataclass(frozen=True)
class FakeGpuEngine:
    host: str  # DOCKER_HOST for this engine
    calls: Path  # one directory per prestart-hook call: its arguments and the container it saw

    def client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.host, version="auto")

    def _calls(self) -> list[Path]:
        return sorted(path for path in self.calls.iterdir() if path.is_dir())

    def hook_calls(self) -> list[str]:
        """The arguments of each prestart-hook call, in no particular order (calls run concurrently)."""
        return [(call / "args").read_text().rstrip("\n") for call in self._calls()]

    def containers_seen(self) -> dict[str, dict[str, Any]]:
        """Each GPU container the engine started, by its hook call's name: {"visible": its
        devices, "args": its command}. Compare the names before and after a run for its own."""
        found = {call.name: call / "container.json" for call in self._calls()}
        return {name: json.loads(path.read_text()) for name, path in found.items() if path.exists()}


@contextlib.contextmanager
def fake_gpu_engine(root: Path, images: tuple[str, ...]) -> Iterator[FakeGpuEngine]:
    """Start the engine under ``root`` with the fake hook on its PATH, copy ``images`` into it,
    and stop and delete it all afterwards."""
    hooks = root.parent / f"{root.name}-hooks"
    hooks.mkdir(parents=True)
    calls = hooks / "calls"
    calls.mkdir()
    hook = hooks / "nvidia-container-runtime-hook"
    hook.write_text(HOOK.format(calls=calls, python=sys.executable))
    hook.chmod(0o755)
    try:
        with private_engine(root, images, extra_path=hooks) as engine:
            yield FakeGpuEngine(host=engine.host, calls=calls)
    finally:
        shutil.rmtree(hooks)
