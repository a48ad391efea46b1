"""examples/multiarch for real: one cell for linux/amd64 and linux/arm64 (PyPI's torch 2.11.0, the
CUDA 13.0 build on both machines), built (arm64 under QEMU on an x86 host), staged, verified
without GPU from the registry, and published as ONE OCI image index whose two entries are the
verified per-platform digests, read back through the registry API.

Its own tier (`multiarch`, tests/conftest.py): 2 x 2.6 GB of wheels (cached) and an emulated
arm64 install make it ~30 minutes on the 2-CPU test machine, more than CI's budget allows beside
the rest; `IMAGEKIT_MULTIARCH=1 bash scripts/test.sh` runs it (BENCHMARKS.md: multi-arch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import docker
import pytest

from testbed.imagekit_process import imagekit
from testbed.matrix_projects import REGISTRY, RUN_ID, TEST_LABEL
from tests.integration.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "multiarch"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFESTS = f"{INDEX}, application/vnd.docker.distribution.manifest.v2+json"


def registry_get(path: str, accept: str = MANIFESTS) -> Any:
    request = urllib.request.Request(f"http://{REGISTRY}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as answer:  # the test registry
        return json.loads(answer.read(1 << 20))


@pytest.fixture(scope="module")
def multiarch(api: docker.APIClient, emulation: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example under the test's own repository name, its wheelhouse linked in."""
    setup = subprocess.run(
        ["bash", str(EXAMPLE / "setup.sh")], capture_output=True, text=True, timeout=3600, check=False
    )
    assert setup.returncode == 0, f"examples/multiarch/setup.sh failed:\n{setup.stderr[-3000:]}"
    root = tmp_path_factory.mktemp("multiarch")
    (root / "wheelhouse").mkdir()
    for wheel in (EXAMPLE / "wheelhouse").iterdir():
        try:
            os.link(wheel, root / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy(wheel, root / "wheelhouse" / wheel.name)
    text = (EXAMPLE / "matrix.yaml").read_text()
    name = "imagekit-examples/pytorch-multiarch"
    assert name in text
    (root / "matrix.yaml").write_text(text.replace(name, f"imagekit-test/multiarch-{RUN_ID}"))
    return root


def test_one_cell_for_two_platforms_publishes_one_index_of_its_verified_digests(multiarch: Path) -> None:
    label = f"{TEST_LABEL}={RUN_ID}"
    built = imagekit(
        "build", "--matrix", "matrix.yaml", "--push", "--label", label, cwd=multiarch, timeout=5400
    )
    assert built.returncode == 0, built.stderr[-3000:]
    verified = imagekit(
        "verify", "--matrix", "matrix.yaml", "--gpus", "none", "--pull", cwd=multiarch, timeout=1800
    )
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]

    report = json.loads((multiarch / ".imagekit" / "report.json").read_text())
    by_platform = {}
    for cell in report["cells"]:
        verification = cell["verification"]
        checks = {c["name"]: c for c in verification["checks"]}
        # read from each image: torch's CUDA 13.0 build, cuDNN 9, libcudart 13, on its own machine
        assert verification["verdict"] == "checked"
        assert checks["torch_cuda"]["actual"] == "13.0" and checks["libcudart"]["actual"] == "13.0"
        assert checks["cudnn"]["actual"].startswith("9.")
        machine = verification["platform"]["machine"]
        assert verification["platform"]["emulated"] == (machine != verification["platform"]["host_machine"])
        by_platform[machine] = verification["image_digest"]
    assert set(by_platform) == {"x86_64", "aarch64"}

    published = imagekit("publish", "--matrix", "matrix.yaml", cwd=multiarch, timeout=600)
    assert published.returncode == 0, published.stderr[-3000:]
    lock = json.loads((multiarch / "images.lock.json").read_text())
    (index,) = lock["indexes"].values()
    repository = f"imagekit-test/multiarch-{RUN_ID}"
    document = registry_get(f"{repository}/manifests/{index['digest']}", INDEX)
    entries = {m["platform"]["architecture"]: m["digest"] for m in document["manifests"]}
    assert entries == {"amd64": by_platform["x86_64"], "arm64": by_platform["aarch64"]}
    assert {p: e["digest"] for p, e in index["platforms"].items()} == {
        "linux/amd64": by_platform["x86_64"],
        "linux/arm64": by_platform["aarch64"],
    }
    # the readable tag names the index, not either image
    tag = index["tags"][0]
    tagged = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFESTS}, method="HEAD"
    )
    with urllib.request.urlopen(tagged, timeout=30) as answer:
        assert answer.headers["Docker-Content-Digest"] == index["digest"]
