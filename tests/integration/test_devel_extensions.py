"""A devel image for real: PyTorch's CPU wheel (the offline demo's wheelhouse, plus ninja) on the
demo's Debian base, built with the extension check's module compiled at image build time
(`check.py build-extensions`), then verified: the extension check loads and runs that module and
compiles nothing. One image build (a torch install and a C++ extension build, minutes on 2 CPUs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from imagekit.probe import compilation, prebuilt
from imagekit.report.verification import json_or_text
from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import REPO_ROOT, remove_built

OFFLINE = REPO_ROOT / "examples" / "offline"
CELL = "debian-local-torch2.13.0-cpu-py3.11-devel"

MATRIX = """\
version: 1
axes:
  torch: ["2.13.0"]
  cuda: [cpu]
  base: [debian-local]
  flavour: [devel]
defaults:
  torchvision: none
  torchaudio: none
  pip_packages: [numpy]
bases:
  debian-local:
    image: "imagekit-test/debian-python-devel-{run}:bookworm-{{arch}}"
    os: debian12
    python: "3.11"
    cuda: false
    build: {{context: base, args: {{BASE: "imagekit-local/debian-python:bookworm-{{arch}}"}}}}
sources:
  pip:
    no_index: true
    find_links: [wheelhouse]
    torch_index_url: null
publish:
  repository: imagekit-test/pytorch-devel-{run}
output: generated
"""


def _ninja_wheel(dest: Path) -> None:
    """cpp_extension builds with ninja, which a devel cell installs: the one wheel the offline
    demo's wheelhouse lacks, fetched the way examples/offline/setup.sh fetches the others."""
    command = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"]
    command += ["--python-version", "3.11", "--platform", "manylinux_2_17_x86_64", "--implementation", "cp"]
    done = subprocess.run(
        [*command, "--retries", "1", "--timeout", "15", "--no-deps", "ninja"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"pip download ninja failed:\n{done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def devel(
    api: docker.APIClient, debian_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    setup = subprocess.run(
        [str(OFFLINE / "setup.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "WITH_ARM64": "0"},  # this cell is amd64 only
        timeout=1800,
        check=False,
    )
    assert setup.returncode == 0, f"examples/offline/setup.sh failed:\n{setup.stderr[-3000:]}"
    root = tmp_path_factory.mktemp("devel")
    shutil.copytree(OFFLINE / "base", root / "base")
    wheelhouse = root / "wheelhouse"
    wheelhouse.mkdir()
    for wheel in (OFFLINE / "wheelhouse").iterdir():  # pip picks this cell's own from them
        try:
            os.link(wheel, wheelhouse / wheel.name)
        except OSError:
            shutil.copy(wheel, wheelhouse / wheel.name)
    _ninja_wheel(wheelhouse)
    (root / "matrix.yaml").write_text(MATRIX.format(run=RUN_ID))
    done = imagekit(
        "build", "--matrix", "matrix.yaml", "--label", f"{TEST_LABEL}={RUN_ID}", cwd=root, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    yield root
    remove_built(api, root)


def _cell(root: Path) -> dict[str, Any]:
    report = json.loads((root / ".imagekit" / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["id"] == CELL]
    return dict(cell)


def _read_in_image(api: docker.APIClient, image: str, path: str) -> str:
    container = api.create_container(image, command=["cat", path], labels={TEST_LABEL: RUN_ID})
    try:
        api.start(container)
        assert api.wait(container, timeout=120)["StatusCode"] == 0
        return bytes(api.logs(container, stdout=True, stderr=False)).decode()
    finally:
        api.remove_container(container, force=True)


def test_the_image_build_compiles_the_extension_and_verify_only_loads_it(
    devel: Path, api: docker.APIClient
) -> None:
    cell = _cell(devel)
    log = (devel / cell["log"]).read_text()  # relative to the project
    assert "check.py build-extensions: built cpu (" in log, log[-3000:]
    print(next(line for line in log.splitlines() if "check.py build-extensions: " in line))
    assert f"into {prebuilt.DIRECTORY}; no CUDA module: torch is a CPU build" in log
    manifest = json.loads(_read_in_image(api, cell["image_id"], f"{prebuilt.DIRECTORY}/manifest.json"))
    assert manifest["key"]["torch"] == "2.13.0+cpu" and manifest["key"]["python"] == "3.11"
    assert set(manifest["modules"]) == {"cpu"}

    done = imagekit("verify", "--matrix", "matrix.yaml", "--gpus", "none", "--json", cwd=devel, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])
    checks = {c["name"]: c for c in result["checks"]}
    extension = checks["extension"]
    assert extension["status"] == "pass", extension
    detail = json_or_text(extension["detail"])  # the report holds it as the probe's JSON text
    cpu = detail["parts"]["cpu"]
    # loaded from the read-only root as built, and run: nothing compiled at verify time
    assert cpu["how"] == compilation.PREBUILT_HOW and cpu["max_abs_error"] == 0, cpu
    assert cpu["module"] == f"{prebuilt.DIRECTORY}/imagekit_check_cpu.so" and "built" not in cpu
    assert cpu["build_s_saved"] == manifest["modules"]["cpu"]["build_s"]
    assert detail["prebuilt"]["loaded"] == ["cpu"] and detail["prebuilt"]["built_here"] == {}
    # no GPU asked for: the GPU part keeps its meaning, and a CPU torch has no CUDA module
    parts = detail["parts"]
    assert parts["cuda"] == {"status": "skip", "reason": "no GPU requested"}
    assert parts["cuda-no-gpu"]["status"] == "skip"
    assert result["verdict"] == "checked" and not result["gpu_visible"]
    print(
        json.dumps({"status": extension["status"], "duration_s": extension["duration_s"], "detail": detail})
    )
