"""The CUDA layer of an index-installed cell for real (issue 36, "Share", the shipped matrix's layout):
two cells of torch 2.1.2 (cu121) on two different bases, built with BuildKit from a package index
served on 127.0.0.1, get the very same CUDA layers (one per wheel, one diff_id each) although the
layers below differ.

The index holds stand-in wheels with the real projects' names and torch 2.1.2's pins
(testbed/sample_projects.cuda_index), so the build takes seconds. The cells use this test's own template,
which holds the shipped template's install steps for this case verbatim (cut from
dockerfiles/templates/_pip.j2) and nothing of its build guard (it would import the stand-in torch).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import docker
import pytest
import yaml

from testbed.matrix_projects import RUN_ID, Project
from testbed.quiet_http import QuietServer, serve
from testbed.sample_projects import CUDA_PINS_2_1_2, cuda_index
from testbed.waivers import critical_waivers
from tests.integration.conftest import DEBIAN_PYTHON, install_steps_template, pip_freeze, venv_tool_wheels

TEMPLATE = install_steps_template("elif recipe.cuda_wheels")
OTHER_BASE = f"imagekit-test/other-base:{RUN_ID}"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        """Requests are the test's to assert, not stderr's to print."""


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    root = cuda_index(tmp_path / "index")
    # the index for everything else (PyPI's stand-in) serves what PyTorch's does, as PyPI serves
    # NVIDIA's wheels and torch 2.1.2's CUDA 12.1 build: the CUDA steps and, since PyTorch's index's
    # 2.1.2 bundles CUDA (cuda_wheels.yaml's `bundled`), torch come from it
    shutil.copytree(root / "cu121", root / "pypi")
    # every venv's own pip and setuptools (the real ones) come from the index for everything else
    for wheel in venv_tool_wheels(root / "files"):
        page = root / "pypi" / wheel.name.split("-")[0]
        page.mkdir(parents=True)
        link = f'<a href="../../files/{wheel.name}">{wheel.name}</a>'
        (page / "index.html").write_text(f"<html><body>\n{link}\n</body></html>\n", encoding="utf-8")
    server = QuietServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    serve(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def two_bases(project: Project, debian_python: str, index: str, api: docker.APIClient) -> Iterator[Project]:
    (project.root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    other = project.root / "other"
    other.mkdir()
    (other / "Dockerfile").write_text(f"FROM {DEBIAN_PYTHON}\nRUN echo other > /etc/imagekit-test-other\n")
    base = {"os": "debian12", "python": "3.11", "cuda": False}
    document = {
        "version": 1,
        "templates": "templates",
        "build": {"builder": "buildkit"},
        "publish": {"repository": project.repository, "tags": {"readable": "{base}-{torch}"}},
        "defaults": {"torchvision": "none", "torchaudio": "none"},
        "axes": {"torch": ["2.1.2"], "cuda": ["12.1"], "base": ["debian", "other"], "flavour": ["runtime"]},
        "bases": {
            "debian": {"image": DEBIAN_PYTHON, **base},
            "other": {"image": OTHER_BASE, **base, "build": {"context": "other"}},
        },
        "sources": {"pip": {"torch_index_url": index + "/{variant}", "index_url": index + "/pypi"}},
        "advisories": critical_waivers(["2.1.2"]),
    }
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        yield project
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            api.remove_image(OTHER_BASE, force=True)


def test_cells_on_two_bases_share_the_cuda_layer(two_bases: Project, api: docker.APIClient) -> None:
    assert len(CUDA_PINS_2_1_2) == 11
    done = two_bases.build("--builder", "buildkit")
    assert done.returncode == 0, done.stderr
    cells = {cell: r for cell, r in two_bases.report().items() if "torch2.1.2" in cell}
    assert len(cells) == 2, cells
    tops: dict[str, list[str]] = {}
    for cell, result in sorted(cells.items()):
        image = str(result["image_id"])
        listed = {line.lower().replace("_", "-") for line in pip_freeze(image)}  # the stand-ins' names
        wanted = {*CUDA_PINS_2_1_2, "torch==2.1.2", "nvidia-nvjitlink-cu12==12.9.86"}
        assert wanted <= listed, sorted(listed)
        layers = api.inspect_image(image)["RootFS"]["Layers"]
        # the venv (its pip, setuptools), one layer per CUDA wheel, torch: nothing else
        tops[cell] = layers[-13:]
    (debian_cell, debian), (other_cell, other) = sorted(tops.items())
    assert "debian" in debian_cell and "other" in other_cell
    below = len(api.inspect_image(DEBIAN_PYTHON)["RootFS"]["Layers"])
    assert len(api.inspect_image(str(cells[other_cell]["image_id"]))["RootFS"]["Layers"]) == below + 14
    # the bases differ (one more layer under `other`), the CUDA layers' bytes do not: one blob each
    assert debian[1:12] == other[1:12] and len(set(debian[1:12])) == 11
    assert debian[0] == other[0]  # the venv is the same too
