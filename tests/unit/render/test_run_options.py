"""The BuildKit builder's RUN options: each step's network, its cache and secret mounts; the classic
builder's Dockerfiles untouched."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import BuildSettings
from imagekit.render.contract import PIP_NETRC_SECRET
from imagekit.render.dockerfile import Renderer
from imagekit.render.run_options import (
    APT_CLEAN_CONFIG,
    PIP_CACHE_MOUNT,
    PIP_NETRC_MOUNT,
    WHEELHOUSE_MOUNT,
    apt_cache_mounts,
)
from testbed.sample_projects import variants_plan
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE, REPO

BUILDKIT = BuildSettings(builder="buildkit")
SHIPPED = (REPO / "matrix.yaml", *sorted((REPO / "examples").glob("*/matrix.yaml")))


def runs(dockerfile: str) -> list[str]:
    """Each RUN instruction of a Dockerfile, its continuation lines joined."""
    found: list[str] = []
    current: list[str] | None = None
    for line in dockerfile.splitlines():
        if current is None and line.startswith("RUN "):
            current = []
        if current is not None:
            current.append(line)
            if not line.endswith("\\"):
                found.append("\n".join(current))
                current = None
    assert current is None, "a RUN ends in a continuation"
    return found


def network(run: str) -> str:
    match = re.match(r"RUN --network=(none|host)[ \\]", run)
    assert match, run
    return match.group(1)


def reaches_out(run: str) -> bool:
    """Whether a step fetches: apt-get update, or a pip install that may use an index."""
    return "apt-get update" in run or ("pip install" in run and "--no-index" not in run)


def all_dockerfiles(plan: Plan, build: BuildSettings | None) -> dict[str, str]:
    renderer = Renderer(plan, build=build)
    return {cell.id: renderer.dockerfile(cell) for cell in plan.cells}


def shipped_and_variants(tmp_path: Path) -> list[Plan]:
    return [*(load_plan(path) for path in SHIPPED), variants_plan(tmp_path)]


def test_every_buildkit_run_names_exactly_one_network_and_fetches_only_on_the_host(tmp_path: Path) -> None:
    steps = 0
    for plan in shipped_and_variants(tmp_path):
        for cell_id, text in all_dockerfiles(plan, BUILDKIT).items():
            assert "# syntax=" not in text, cell_id  # the engine's own frontend: nothing to pull
            assert "--no-cache-dir" not in text, cell_id  # pip's cache is a mount
            assert "rm -rf /var/lib/apt/lists" not in text, cell_id  # the lists are a mount
            for run in runs(text):
                steps += 1
                assert run.count("--network=") == 1, (cell_id, run)
                if reaches_out(run) and "python3 -c" not in run and "command -v sshd" not in run:
                    assert network(run) == "host", (cell_id, run)
                if "pip install" in run:
                    assert PIP_CACHE_MOUNT in run, (cell_id, run)
                if "apt-get update" in run:
                    for mount in apt_cache_mounts(plan.cell(cell_id).os):
                        assert mount in run, (cell_id, run)
                    assert f"rm -f {APT_CLEAN_CONFIG} && apt-get update" in run, (cell_id, run)
                if "pip install" not in run and "apt-get" not in run:
                    assert network(run) == "none", (cell_id, run)
    assert steps > 100


def test_offline_wheelhouse_cells_build_with_every_step_offline() -> None:
    plan = load_plan(REPO / "examples" / "offline" / "matrix.yaml")
    texts = all_dockerfiles(plan, BUILDKIT)
    assert len(texts) == len(plan.cells) >= 4  # the images and their jupyter and ssh front ends
    for cell_id, text in texts.items():
        assert {network(run) for run in runs(text)} == {"none"}, cell_id
        assert PIP_NETRC_SECRET not in text


WHEEL_MOUNT = re.compile(r"--mount=type=bind,source=wheelhouse(?:-cuda|-deps|-venv)?,target=/tmp/wheelhouse")


def test_buildkit_binds_the_wheelhouse_to_each_pip_step_and_needs_no_build_stage() -> None:
    plan = load_plan(REPO / "examples" / "offline" / "matrix.yaml")
    classic, buildkit = all_dockerfiles(plan, None), all_dockerfiles(plan, BUILDKIT)
    for cell_id, text in buildkit.items():
        # the wheel files reach no layer: bound, never copied, so no stage to keep them out of
        assert "COPY wheelhouse/" not in text and " AS venv-build" not in text, cell_id
        # each pip step binds its own wheel directory: the whole wheelhouse, or a slice of the
        # cell's closure (wheelhouse-cuda-<project>/, wheelhouse-deps/:
        # tests/unit/render/test_layers.py)
        pip_steps = [run for run in runs(text) if "pip install" in run]
        assert pip_steps and all(len(WHEEL_MOUNT.findall(run)) == 1 for run in pip_steps), cell_id
        assert any(WHEELHOUSE_MOUNT in run for run in pip_steps), cell_id
        assert all(not WHEEL_MOUNT.search(run) for run in runs(text) if "pip install" not in run), cell_id
        # the classic builder keeps its build stage
        assert "COPY wheelhouse/ /tmp/wheelhouse/" in classic[cell_id] and "--mount=" not in classic[cell_id]
    image = next(text for cell_id, text in buildkit.items() if cell_id.endswith("-runtime"))
    assert image.count("FROM ") == 1 and "COPY --from=" not in image
    assert image.count("COPY imagekit-check.py /opt/imagekit/check.py") == 1


def test_classic_dockerfiles_carry_no_buildkit_option(tmp_path: Path) -> None:
    for plan in shipped_and_variants(tmp_path):
        default = all_dockerfiles(plan, None)
        assert all_dockerfiles(plan, BuildSettings()) == default
        for cell_id, text in default.items():
            assert "--network=" not in text and "--mount=" not in text, cell_id
            for run in runs(text):
                if "pip install" in run:
                    assert "--no-cache-dir" in run, (cell_id, run)


def test_the_matrix_build_setting_chooses_the_builder(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(
        'axes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\nbuild: {builder: buildkit}\n'
        + CUDA_BASE
        + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    assert Renderer(plan).build == BUILDKIT
    assert all(network(run) for run in runs(Renderer(plan).dockerfile(plan.cells[0])))
    classic = Renderer(plan, build=BuildSettings()).dockerfile(plan.cells[0])
    assert "--network=" not in classic


CREDENTIALS = """
  pip:
    index_url: https://pypi.example.org/simple
    credentials:
      - {host: pypi.example.org, login: ci-reader, secret: pip-index}
"""


def credentials_plan(write_matrix: Callable[[str], Path], sources: str, builder: str = "buildkit") -> Plan:
    axes = 'axes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda], frontend: [none, jupyter, ssh]}\n'
    text = f"{axes}build: {{builder: {builder}}}\nsources:{sources}{CUDA_BASE}{WAIVE_OLD_TORCH}"
    return load_plan(write_matrix(text))


def test_index_credentials_mount_on_every_pip_step_that_reaches_an_index(
    write_matrix: Callable[[str], Path],
) -> None:
    plan = credentials_plan(write_matrix, CREDENTIALS)
    pip_steps = 0
    for cell_id, text in all_dockerfiles(plan, None).items():
        for run in runs(text):
            pip_steps += "pip install" in run
            assert (PIP_NETRC_MOUNT in run) == ("pip install" in run), (cell_id, run)
            assert ("type=secret" in run) <= (network(run) == "host")
        # the Dockerfile names the secret's mount, never the matrix's secret, login or host
        assert "pip-index" not in text and "ci-reader" not in text, cell_id
    assert pip_steps >= 4  # torch, extras, and each front end's install


def test_no_secret_mount_without_credentials_or_where_pip_stays_offline(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    plain = credentials_plan(write_matrix, "\n  pip: {index_url: https://pypi.example.org/simple}\n")
    assert not any(PIP_NETRC_SECRET in text for text in all_dockerfiles(plain, None).values())
    (tmp_path / "wheelhouse").mkdir()
    offline = credentials_plan(
        write_matrix, CREDENTIALS + "    no_index: true\n    find_links: [wheelhouse]\n"
    )
    for text in all_dockerfiles(offline, None).values():
        assert PIP_NETRC_SECRET not in text
        assert all(network(run) == "none" for run in runs(text) if "pip install" in run)


def test_a_user_template_without_a_network_is_refused_for_buildkit(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "Dockerfile.j2").write_text(
        "FROM {{ cell.base_image }}\nRUN {{ recipe.run.guard }}true\nRUN echo {{ cell.id }}\n"
    )
    path = write_matrix(
        'templates: templates\naxes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n'
        + CUDA_BASE
        + WAIVE_OLD_TORCH
    )
    plan = load_plan(path)
    Renderer(plan).dockerfile(plan.cells[0])  # the classic builder needs none
    with pytest.raises(
        InputError, match=r"a RUN names no --network=; the BuildKit builder needs one"
    ) as caught:
        Renderer(plan, build=BUILDKIT).dockerfile(plan.cells[0])
    assert "\n" not in caught.value.message
