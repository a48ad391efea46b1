"""The arm64 Debian base that scripts/base-images.sh debootstraps under QEMU user emulation (issue 21):
it runs its own Python. In the multiarch tier: the emulated debootstrap alone takes ~8 minutes."""

from __future__ import annotations

import docker

from tests.integration.test_arm64_emulation import run_arm64


def test_the_arm64_debian_base_runs_its_own_python(api: docker.APIClient, debian_python_arm64: str) -> None:
    image = api.inspect_image(debian_python_arm64)
    assert (image["Os"], image["Architecture"]) == ("linux", "arm64")
    assert image["Config"]["Labels"]["imagekit.base"] == "debian-python"
    out = run_arm64(
        api,
        debian_python_arm64,
        "uname -m; dpkg --print-architecture; python3 -c 'import sys; print(sys.version_info[:2])'",
    )
    assert out.split("\n")[:3] == ["aarch64", "arm64", "(3, 11)"]
