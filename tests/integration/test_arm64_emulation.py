"""linux/arm64 on this x86 engine (issue 21): QEMU user emulation registered by scripts/engine.sh
(the arm64 Debian base debootstrapped under it is the multiarch tier's, multiarch/test_arm64_base.py)."""

from __future__ import annotations

import os
import platform
import subprocess

import docker
import pytest

from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import REPO_ROOT


def run_arm64(api: docker.APIClient, image: str, command: str) -> str:
    container = api.create_container(
        image,
        ["sh", "-c", command],
        platform="linux/arm64",
        network_disabled=True,
        labels={TEST_LABEL: RUN_ID},
    )
    try:
        api.start(container)
        assert api.wait(container, timeout=300)["StatusCode"] == 0, api.logs(container).decode()
        return str(api.logs(container, stderr=False).decode())
    finally:
        api.remove_container(container, force=True)


@pytest.mark.skipif(
    platform.machine() != "x86_64" or os.geteuid() != 0, reason="registers QEMU on an x86 host, as root"
)
def test_engine_sh_emulation_is_idempotent_and_proves_itself(api: docker.APIClient) -> None:
    for _ in range(2):
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "engine.sh"), "emulation"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "aarch64\n"  # what uname(2) says inside the linux/arm64 container
    assert "qemu-aarch64 already registered" in done.stderr
    probe = api.inspect_image("imagekit-test/uname-m:arm64")
    assert (probe["Os"], probe["Architecture"]) == ("linux", "arm64")
