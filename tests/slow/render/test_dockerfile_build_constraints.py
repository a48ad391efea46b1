"""The constraints an image's ENV names reach pip's isolated builds: the real pip that every imagekit
venv installs (imagekit/data/advisories.yaml's venv_tools), run on a local project whose build
backend comes in two versions. No index, no network: a wheelhouse of two backend wheels.

pip 26.2 stopped applying PIP_CONSTRAINT to isolated build environments; an image that set only
PIP_CONSTRAINT would build an sdist that build-requires torch against the newest torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagekit.facts.advisories import load_advisories
from imagekit.plan.matrix import load_plan
from imagekit.render.contract import CONSTRAINTS_FILE
from imagekit.render.dockerfile import Renderer

REPO = Path(__file__).resolve().parents[3]
BACKEND = "ikbuildbackend"
# A PEP 517 backend that builds a wheel of project `built-by` whose version is the backend's own:
# the wheel's name says which backend version the isolated build environment received.
WHEEL_FILE = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
BACKEND_CODE = """
import zipfile
VERSION = "{version}"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"built_by-{{VERSION}}-py3-none-any.whl"
    info = f"built_by-{{VERSION}}.dist-info"
    metadata = f"Metadata-Version: 2.1\\nName: built-by\\nVersion: {{VERSION}}\\n"
    with zipfile.ZipFile(f"{{wheel_directory}}/{{name}}", "w") as archive:
        archive.writestr("built_by.py", "")
        archive.writestr(f"{{info}}/METADATA", metadata)
        archive.writestr(f"{{info}}/WHEEL", {wheel_file!r})
        archive.writestr(f"{{info}}/RECORD", "")
    return name
"""


def _backend_wheel(where: Path, version: str) -> None:
    info = f"{BACKEND}-{version}.dist-info"
    with zipfile.ZipFile(where / f"{BACKEND}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{BACKEND}.py", BACKEND_CODE.format(version=version, wheel_file=WHEEL_FILE))
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {BACKEND}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", WHEEL_FILE)
        archive.writestr(f"{info}/RECORD", "")


@pytest.fixture(scope="module")
def image_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pip wheel the images install, from the host's own index configuration; pip runs from it."""
    pin = next(r for r in load_advisories().venv_requirements() if r.startswith("pip=="))
    dest = tmp_path_factory.mktemp("pip")
    env = {k: v for k, v in os.environ.items() if not k.endswith("CONSTRAINT")}
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--dest", str(dest), pin],
        env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return next(dest.glob("pip-*.whl"))


def _image_constraint_env() -> dict[str, str]:
    """The ENV pairs of a rendered cell that name the constraints file."""
    plan = load_plan(REPO / "matrix.yaml")
    text = Renderer(plan).dockerfile(plan.cells[0])
    pairs = re.findall(
        r"(\w+)=(\S+)", "\n".join(line for line in text.splitlines() if CONSTRAINTS_FILE in line)
    )
    return {name: value for name, value in pairs if value == CONSTRAINTS_FILE}


def _built_version(pip: Path, tmp_path: Path, env: dict[str, str]) -> str:
    wheels = tmp_path / "wheels"
    wheels.mkdir(parents=True)
    for version in ("1.0", "2.0"):
        _backend_wheel(wheels, version)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["{BACKEND}"]\nbuild-backend = "{BACKEND}"\n', encoding="utf-8"
    )
    out = tmp_path / "out"
    # Nothing from the host's pip configuration (its find-links, indexes, constraints) takes part.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    done = subprocess.run(
        [sys.executable, str(pip / "pip"), "wheel", "--no-index", "--find-links", str(wheels),
         "--no-deps", "--wheel-dir", str(out), str(project)],
        env={**clean, "PIP_CONFIG_FILE": os.devnull, **env}, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("built_by-*.whl")
    return built.name.split("-")[1]


def test_the_images_constraints_reach_an_isolated_build(image_pip: Path, tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{BACKEND}==1.0\n", encoding="utf-8")
    env = {name: str(constraints) for name in _image_constraint_env()}
    assert "PIP_CONSTRAINT" in env
    assert _built_version(image_pip, tmp_path / "image", env) == "1.0"
    # What the image's pip does with PIP_CONSTRAINT alone: the build takes the newest backend.
    alone = {"PIP_CONSTRAINT": str(constraints)}
    assert _built_version(image_pip, tmp_path / "alone", alone) == "2.0"


def test_a_build_without_isolation_is_refused_with_the_build_constraint_unless_emptied(
    image_pip: Path, tmp_path: Path
) -> None:
    """What the README tells a user of `--no-build-isolation` (flash-attn's install) holds."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{BACKEND}==1.0\n", encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    base = [
        sys.executable,
        str(image_pip / "pip"),
        "install",
        "--no-index",
        "--dry-run",
        "--no-build-isolation",
    ]
    env = {**clean, "PIP_CONFIG_FILE": os.devnull, "PIP_BUILD_CONSTRAINT": str(constraints)}
    refused = subprocess.run(
        [*base, "pip"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert refused.returncode != 0
    assert "--build-constraint cannot be used with --no-build-isolation" in refused.stderr
    emptied = subprocess.run(
        [*base, "pip"],
        env={**env, "PIP_BUILD_CONSTRAINT": ""},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert emptied.returncode == 0, emptied.stderr
