"""Rendering: golden Dockerfiles, the drift check, the input digest, hadolint on every variant."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from imagekit.core.errors import InputError
from imagekit.facts.advisories import load_advisories
from imagekit.plan.matrix import load_plan
from imagekit.plan.source import SourceState
from imagekit.render.dockerfile import Renderer
from imagekit.render.drift import dockerfile_path
from imagekit.render.environment import sh, shjoin
from testbed.sample_projects import variants_plan
from testbed.waivers import WAIVE_OLD_TORCH
from tests.conftest import CUDA_BASE, REPO, run_cli

GOLDEN = REPO / "tests" / "golden"
DOCKERFILES = REPO / "dockerfiles" / "generated"


def golden_cases(tmp_path: Path) -> dict[str, str]:
    shipped = load_plan(REPO / "matrix.yaml")
    renderer = Renderer(shipped)
    wanted = {
        "cuda-ubuntu22.04-torch2.1.2-cuda12.1-py3.10-devel",
        "cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime",
        "cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-devel",
        "ngc-23.10-torch2.1.0a0-32f93b1-cuda12.2-py3.10-devel",
    }
    cases = {c.id: renderer.dockerfile(c) for c in shipped.cells if c.id in wanted}
    plan = variants_plan(tmp_path)
    variant_renderer = Renderer(plan)
    cases.update({f"variants-{c.id}": variant_renderer.dockerfile(c) for c in plan.cells})
    return cases


def test_golden_dockerfiles(tmp_path: Path) -> None:
    cases = golden_cases(tmp_path)
    assert len(cases) == 10
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        for name, text in cases.items():
            (GOLDEN / f"{name}.Dockerfile").write_text(text, encoding="utf-8")
    for name, text in cases.items():
        golden = GOLDEN / f"{name}.Dockerfile"
        assert golden.read_text(encoding="utf-8") == text, f"{golden} differs; UPDATE_GOLDEN=1 after review"


def test_the_probe_is_in_place_before_its_build_steps_run() -> None:
    """The build guard and the pins are the probe's build steps: each stage that runs them has
    copied the probe in first, and every image (the last stage) carries it. Read from the golden
    and the committed Dockerfiles, which the tests above hold equal to what renders."""
    copy = "COPY imagekit-check.py /opt/imagekit/check.py\n"
    files = [*GOLDEN.glob("*.Dockerfile"), *(REPO / "dockerfiles" / "generated").glob("*/Dockerfile")]
    checked = 0
    for path in files:
        stages = path.read_text(encoding="utf-8").split("\nFROM ")[1:]
        for stage in stages:
            if "check.py build-guard" in stage:
                assert stage.count(copy) == 1, path
                assert stage.index(copy) < stage.index("check.py build-guard"), path
                assert stage.index("check.py build-guard") < stage.index("check.py pins"), path
                checked += 1
        if "-jupyter" not in path.name and "-ssh" not in path.name:
            assert stages[-1].count(copy) == 1, path
    assert checked == len(files) - 2  # all but the two front ends


def test_devel_images_build_the_extension_modules_after_what_they_need() -> None:
    """A devel image's last stage builds the extension check's modules (check.py build-extensions)
    once the probe, the venv and TORCH_CUDA_ARCH_LIST are in place; runtime images and front ends
    (FROM a cell's image, which has them) never run it. Read from the golden and committed files."""
    step = "RUN python3 /opt/imagekit/check.py build-extensions\n"
    files = [*GOLDEN.glob("*.Dockerfile"), *(REPO / "dockerfiles" / "generated").glob("*/Dockerfile")]
    devel = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        last = text.split("\nFROM ")[-1]
        cell = path.parent.name if path.name == "Dockerfile" else path.stem
        if "-devel" not in cell or cell.endswith(("-jupyter", "-ssh")):
            assert "build-extensions" not in text, path
            continue
        devel += 1
        assert text.count(step) == 1 and step in last, path
        assert last.index("COPY imagekit-check.py /opt/imagekit/check.py") < last.index(step), path
        if "ENV TORCH_CUDA_ARCH_LIST=" in last:
            assert last.index("ENV TORCH_CUDA_ARCH_LIST=") < last.index(step), path
        if "/opt/venv" in last:
            assert last.index("PATH=/opt/venv/bin:$PATH") < last.index(step), path
        assert last.index(step) < last.index("LABEL "), path  # a label change keeps the built layer
    assert devel >= 10


def test_template_decisions(tmp_path: Path) -> None:
    cases = golden_cases(tmp_path)
    old = cases["cuda-ubuntu22.04-torch2.1.2-cuda12.1-py3.10-devel"]
    # torch's wheel brings cuDNN 8.9.2 itself: a plain devel base, never a second cuDNN
    assert "FROM nvidia/cuda:12.1.1-devel-ubuntu22.04\n" in old
    # PyTorch's index's 2.1.2+cu121 brings CUDA inside torch (a second copy above the CUDA layers):
    # torch comes from PyPI, whose 2.1.2 is the cu121 build that pins CUDA's wheels
    assert "--index-url https://download.pytorch.org/whl/cu121" not in old
    assert "RUN pip install --no-cache-dir --disable-pip-version-check \\\n      torch==2.1.2 " in old
    # torch <= 2.3 was compiled against NumPy 1.x: the cap is installed and stays pinned
    assert "torch==2.1.2 torchvision==0.16.2 torchaudio==2.1.2 'numpy<2'" in old
    assert "python3 /opt/imagekit/check.py pins --extra 'numpy<2' > /etc/imagekit/constraints.txt" in old
    # a constraints file the base names (newer NGC releases) is kept, nested in imagekit's
    assert 'echo "-c $file" >> /etc/imagekit/constraints.txt' in old
    assert "(2.1.2+cu121)" not in old  # no example version hard-coded into every Dockerfile
    # devel: torch.compile and cpp_extension need a compiler, Python.h and ninja
    assert "python3.10 python3.10-venv ca-certificates g++ python3.10-dev" in old
    assert "--constraint /etc/imagekit/constraints.txt \\\n      ninja" in old
    assert "RUN python3 /opt/imagekit/check.py build-guard --torch 2.1.2 --cuda 12.1 \\\n" in old
    assert "--no-cache-dir" in old
    # devel: CUDA extensions build with no GPU visible, for the wheel's own architectures (gpus.yaml)
    assert "ENV TORCH_CUDA_ARCH_LIST='5.0;6.0;7.0;7.5;8.0;8.6;9.0'\n" in old
    assert "rm -rf /var/lib/apt/lists/*" in old
    assert "RUN --mount" not in old and "# syntax" not in old
    assert "COPY imagekit-check.py /opt/imagekit/check.py" in old
    assert 'imagekit.cudnn="8"' in old and 'org.opencontainers.image.base.name="nvidia/cuda:' in old
    # nothing may override the base's NVIDIA environment
    assert "NVIDIA_" not in old.replace("nvidia/", "") and "LD_LIBRARY_PATH" not in old
    runtime = cases["cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime"]
    # the smallest nvidia/cuda image with the NVIDIA environment: the wheel brings the libraries
    assert "FROM nvidia/cuda:11.8.0-base-ubuntu22.04\n" in runtime
    # torch.compile is required in every flavour: a compiler and Python.h, but no ninja (extensions)
    assert "python3.10 python3.10-venv ca-certificates g++ python3.10-dev" in runtime
    assert "ninja" not in runtime and "nvcc" not in runtime and "TORCH_CUDA_ARCH_LIST" not in runtime
    current = cases["cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-devel"]
    # `nvcc: wheels`: the toolkit-less `base` image, the compiler from NVIDIA's wheels, and
    # CUDA_HOME set after the installs, so its steps up to the pins are its runtime twin's
    assert "FROM nvidia/cuda:13.2.1-base-ubuntu24.04\n" in current and "whl/cu132" in current
    generated = REPO / "dockerfiles" / "generated" / "cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-runtime"
    twin = (generated / "Dockerfile").read_text(encoding="utf-8")  # drift-checked below
    shared = current[
        current.index("FROM") : current.index(
            "RUN pip install --no-cache-dir --disable-pip-version-check --constraint"
        )
    ]
    assert shared.count("RUN ") == 19 and shared in twin  # apt, venv, 15 CUDA wheels, torch, guard
    assert "cuda-toolkit[nvcc,crt,nvvm,cccl]" in current and current.index("ENV CUDA_HOME=") > len(shared)
    # 2.15's companions are stable-ABI wheels paired by their own torch requirement
    assert "torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 \\\n" in current
    # CUDA's wheels first, in a step of their own, at the pins the table read from torch's metadata
    # (CUDA 13: cuda-toolkit and what its extras pin); torch's step names them again
    # (one step per wheel, from the index of everything else: the same step in every cell)
    cuda_step = "RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-compile"
    cuda_step += " cuda-toolkit==13.2.2\n"
    assert cuda_step in current
    assert " --no-deps --no-compile nvidia-cublas==13.4.1.3\n" in current
    assert current.index(cuda_step) < current.index("torch==2.15.0 torchvision")
    assert "torchaudio==2.11.1 \\\n      cuda-toolkit==13.2.2 nvidia-cublas==13.4.1.3 " in current
    # a new venv's pip and setuptools are replaced at once by the versions no advisory affects
    tools = " ".join(load_advisories().venv_requirements())
    step = "RUN python3.12 -m venv /opt/venv \\\n && pip install --no-cache-dir --disable-pip-version-check"
    step += f" {tools}\n"
    assert step in current and current.index(step) < current.index(cuda_step)
    assert "RUN python3.10 -m venv /opt/venv \\\n && pip install --no-cache-dir" in old
    assert old.index(tools) < old.index("torch==2.1.2 ")
    # cu118: one step per CUDA wheel, NCCL (a new version nearly every release) on top, then torch
    # from PyTorch's index
    steps = [line for line in runtime.splitlines() if "--no-deps --no-compile" in line]
    assert len(steps) == 11 and steps[0].endswith(" nvidia-cublas-cu11==11.11.3.6")
    assert steps[-2:] == [steps[-2][: steps[-2].rindex(" ")] + " nvidia-cudnn-cu11==9.1.0.70",
                          steps[-1][: steps[-1].rindex(" ")] + " nvidia-nccl-cu11==2.21.5"]  # fmt: skip
    assert "--index-url https://download.pytorch.org/whl/cu118 \\\n      torch==2.5.1" in runtime
    # a build the table does not know installs in one step, and says why
    unknown = (DOCKERFILES / "cuda-ubuntu22.04-torch2.7.1-cuda11.8-py3.10-runtime" / "Dockerfile").read_text()
    assert "cuda_wheels.yaml does not know\n# which CUDA wheels torch 2.7.1 cu118 on x86_64 pins" in unknown
    assert "--no-deps" not in unknown
    # one whose index wheel bundles CUDA says that instead
    bundled = (DOCKERFILES / "cuda-ubuntu22.04-torch2.1.2-cuda11.8-py3.10-devel" / "Dockerfile").read_text()
    assert "PyTorch's index's wheel of torch 2.1.2 cu118 on x86_64\n# brings them inside torch" in bundled
    assert "--no-deps" not in bundled
    assert "ENV TORCH_CUDA_ARCH_LIST='7.5;8.0;8.6;9.0;10.0;12.0'\n" in current  # CUDA 13: no Volta, no PTX
    ngc = cases["ngc-23.10-torch2.1.0a0-32f93b1-cuda12.2-py3.10-devel"]
    assert "RUN pip install" not in ngc and "&& pip install" not in ngc, "nothing may replace NVIDIA's torch"
    assert "pip==" not in ngc  # a stack's Python is the vendor's: imagekit makes no venv there
    assert "check.py build-guard --torch 2.1.0a0+32f93b1 --cuda 12.2 --exact" in ngc  # its own build
    assert "TORCH_CUDA_ARCH_LIST" not in ngc  # NGC sets its own
    wheel = cases["variants-cuda-torch2.4.1-cuda12.1-py3.10-devel"]
    assert wheel.count("FROM nvidia/cuda:12.1.1-devel-ubuntu22.04") == 2
    assert (
        "COPY wheelhouse/ /tmp/wheelhouse/" in wheel and "COPY --from=venv-build /opt/venv /opt/venv" in wheel
    )
    assert wheel.index("COPY --from=venv-build") > wheel.index("FROM nvidia/cuda:12.1.1-devel-ubuntu22.04\n")
    assert "'s|http://archive.ubuntu.com/ubuntu|https://mirror.example.org/ubuntu|g'" in wheel
    assert "--constraint /etc/imagekit/constraints.txt" in wheel and "'numpy<2'" in wheel
    assert "COPY --from=venv-build /etc/imagekit /etc/imagekit" in wheel
    # the wheelhouse stage's venv takes its tools from the wheelhouse, or else the index
    assert f"--find-links /tmp/wheelhouse --index-url https://mirror.example.org/pypi/simple {tools}" in wheel
    assert "ARG SITE" in wheel and "TORCH_CUDA_ARCH_LIST=8.0;9.0" in wheel
    assert wheel.count("TORCH_CUDA_ARCH_LIST") == 1  # the cell's own list wins over the wheel's
    plain = cases["variants-deb-torch2.5.1-cuda12.1-py3.11-runtime"]
    # a CUDA wheel on a plain base asks for the GPU itself: unset capabilities mean utility only
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in plain and "NVIDIA_VISIBLE_DEVICES=all" in plain
    # the major-version floor the runtime needs (minor-version compatibility), not the cell's minor
    assert "NVIDIA_REQUIRE_CUDA='cuda>=12.0'" in plain and "CUDA 12.1 (the wheel's)" in plain
    devel = cases["variants-deb-torch2.5.1-cpu-py3.11-devel"]
    # a base with its own Python: the toolchain from the base when it has one, else its archive
    assert "RUN python3 -c " in devel and "|| (apt-get update" in devel and "g++ python3-dev" in devel
    cpu = cases["variants-deb-torch2.5.1-cpu-py3.11-runtime"]
    assert "NVIDIA_" not in cpu
    # front ends: FROM the cell's own image, only adding (every installed version pinned)
    jupyter = cases["variants-deb-torch2.5.1-cpu-py3.11-runtime-jupyter"]
    assert jupyter.count("FROM imagekit/pytorch:2.5.1-cpu-runtime-debian12") == 2
    assert "--constraint /tmp/installed.txt" in jupyter and "jupyterlab==4.6.6" in jupyter
    assert "python3 /opt/imagekit/check.py freeze > /tmp/installed.txt" in jupyter  # the parent's probe
    assert (
        "COPY wheelhouse/ /tmp/wheelhouse/" in jupyter
        and "COPY --from=frontend-build /tmp/frontend-root/ /" in jupyter
    )
    assert "USER 10001:10001" in jupyter and "EXPOSE 8888" in jupyter and 'CMD ["start-jupyter"]' in jupyter
    assert "HEALTHCHECK" in jupyter and "JUPYTER_TOKEN" not in jupyter  # never a token in the image
    ssh = cases["variants-cuda-torch2.4.1-cuda12.1-py3.10-devel-ssh"]
    assert "rm -f /etc/ssh/ssh_host_*" in ssh and "jupyterlab" not in ssh and "EXPOSE 2222" in ssh
    assert "python3 -m venv" in cpu and "python3.11-venv" not in cpu
    assert "build-guard --torch 2.5.1 --cuda cpu \\\n" in cpu
    security = "'s|http://deb.debian.org/debian-security|https://mirror.example.org/ubuntu-security|g'"
    main = "'s|http://deb.debian.org/debian|https://mirror.example.org/ubuntu|g'"
    assert cpu.index(security) < cpu.index(main), "debian-security must be rewritten before its prefix"


def test_hadolint_test_can_fail(tmp_path: Path) -> None:
    """The lint above is only worth something if hadolint really flags a bad file."""
    hadolint = shutil.which("hadolint")
    assert hadolint
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM nvidia/cuda\nRUN pip install torch\n", encoding="utf-8")
    done = subprocess.run(
        [hadolint, "--config", str(REPO / ".hadolint.yaml"), str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "DL3006" in done.stdout


def test_committed_dockerfiles_are_up_to_date() -> None:
    """The drift check CI runs: `imagekit render --check` on the shipped matrix."""
    result = run_cli("render", "--matrix", str(REPO / "matrix.yaml"), "--check")
    assert result.exit_code == 0, result.stderr
    # the builds whose CUDA wheels the table lacks are named, once each (they install in one step)
    (note, bundled) = result.stderr.splitlines()
    assert note.startswith("imagekit: 5 torch builds install CUDA's wheels with torch, in one step")
    assert "torch 2.11.0 cu128 on x86_64;" in note  # the Blackwell-on-R570 row: PyPI's 2.11.0 is cu130
    assert "torch 2.14.1 cu126 on x86_64; torch 2.7.1 cu118 on x86_64)" in note
    assert "torch 2.1.2 cu121" not in note and "2.5.1" not in note  # in the table: layered
    # PyTorch's index's 2.1.2+cu118 bundles CUDA: one step, and the note says why
    assert bundled.startswith("imagekit: 1 torch builds install in one step with nothing to split")
    assert "(torch 2.1.2 cu118 on x86_64;" in bundled and "cu121" not in bundled


@pytest.mark.parametrize("value", ["", "plain", "two words", "it's", "$(id)", "a\nb", 3, None])
def test_the_quoting_filters_are_shlexs(value: object) -> None:
    """sh and shjoin remember quoted strings; what they give (or raise) is shlex's."""

    def outcome(function: Callable[[], str]) -> str:
        try:
            return function()
        except TypeError as exc:
            return f"TypeError: {exc}"

    assert outcome(lambda: sh(value)) == outcome(lambda: shlex.quote(value))  # type: ignore[arg-type]
    items = (value, "x y", value)
    assert outcome(lambda: shjoin(items)) == outcome(lambda: shlex.join(items))  # type: ignore[arg-type]


def test_a_mirror_or_pinned_base_keeps_the_cells_identity(tmp_path: Path) -> None:
    plan = load_plan(REPO / "matrix.yaml")
    renderer = Renderer(plan)
    cell = plan.cells[0]
    mirrored = renderer.render(
        cell, build_from="127.0.0.1:5000/mirror/nvidia-cuda:11.8.0-cudnn8-devel-ubuntu22.04"
    )
    assert "FROM 127.0.0.1:5000/mirror/nvidia-cuda:11.8.0-cudnn8-devel-ubuntu22.04" in mirrored.dockerfile
    assert mirrored.input_digest == renderer.render(cell).input_digest


def test_a_hostile_matrix_file_name_stays_out_of_the_dockerfile(tmp_path: Path) -> None:
    path = tmp_path / "m\nRUN echo pwned #.yaml"
    shutil.copy(REPO / "matrix.yaml", path)
    plan = load_plan(path)
    text = Renderer(plan).dockerfile(plan.cells[0])
    assert "RUN echo pwned" not in text and "from the matrix file and" in text


def test_local_base_context_is_part_of_the_digest(
    write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    base = tmp_path / "bases" / "deb"
    base.mkdir(parents=True)
    (base / "Dockerfile").write_text("FROM imagekit-local/debian-python:bookworm\n")
    path = write_matrix(
        'axes:\n  torch: ["2.13.0"]\n  cuda: [cpu]\nbases:\n  deb:\n    image: local/deb:1\n'
        '    os: debian12\n    python: "3.11"\n    build: {context: bases/deb}\n'
    )
    before = Renderer(load_plan(path)).render_all()[0].input_digest
    (base / "Dockerfile").write_text("FROM imagekit-local/debian-python:bookworm\nRUN true\n")
    assert Renderer(load_plan(path)).render_all()[0].input_digest != before


def test_context_symlink_outside_is_refused(write_matrix: Callable[[str], Path], tmp_path: Path) -> None:
    (tmp_path / "wheelhouse").mkdir()
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("key")
    (tmp_path / "wheelhouse" / "leak.whl").symlink_to(secret)
    path = write_matrix(
        'axes:\n  torch: ["2.13.0"]\n  cuda: [cpu]\nbases:\n  deb: {image: "debian:bookworm", os: debian12}\n'
        "sources:\n  pip: {find_links: [wheelhouse]}\n"
    )
    with pytest.raises(InputError, match="links outside"):
        Renderer(load_plan(path)).render_all()[0].input_digest  # noqa: B018 - the digest reads the files
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2 and "links outside" in result.stderr


def test_tags(tmp_path: Path) -> None:
    plan = load_plan(REPO / "matrix.yaml")
    rendered = Renderer(plan).render(plan.cells[1])
    tags = rendered.names(plan.matrix.publish, date(2026, 11, 29)).tags
    assert tags == (
        "2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04",
        "2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04-20261129",
        f"2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04-{rendered.input_digest[:12]}",
    )
    assert rendered.build_labels()["imagekit.input-digest"] == rendered.input_digest


def test_the_build_labels_name_the_checkout_and_the_bases_registry_digest_only() -> None:
    """One owner of the labels a build adds: created, revision and source from the checkout, the
    OCI base.digest only where the base came from a registry (a local base's image id is a config
    digest, no manifest anyone could pull); none of them changes the input digest."""
    plan = load_plan(REPO / "matrix.yaml")
    rendered = Renderer(plan).render(plan.cells[0])
    digest = "sha256:" + "ab" * 32
    source = SourceState(1_780_000_000, "c" * 40, "https://example.org/acme/images.git")
    labels = rendered.build_labels(source, f"nvidia/cuda@{digest}")
    assert labels["org.opencontainers.image.created"] == "2026-05-28T20:26:40Z"
    assert labels["org.opencontainers.image.revision"] == "c" * 40
    assert labels["org.opencontainers.image.source"] == "https://example.org/acme/images.git"
    assert labels["org.opencontainers.image.base.digest"] == digest
    assert labels["imagekit.base-digest"] == f"nvidia/cuda@{digest}"
    local = rendered.build_labels(SourceState(), digest)  # an image id
    assert "org.opencontainers.image.base.digest" not in local and local["imagekit.base-digest"] == digest
    assert not {k for k in local if k.endswith(("created", "revision", "source"))}
    assert rendered.input_digest == Renderer(plan).render(plan.cells[0]).input_digest


def test_template_typo_fails_loudly(write_matrix: Callable[[str], Path], tmp_path: Path) -> None:
    templates = tmp_path / "tpl"
    templates.mkdir()
    (templates / "Dockerfile.j2").write_text("FROM {{ cell.base_imagee }}\n")
    path = write_matrix(
        'templates: tpl\naxes:\n  torch: ["2.13.0"]\n  cuda: [cpu]\n'
        'bases:\n  deb: {image: "debian:bookworm", os: debian12}\n'
    )
    result = run_cli("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "base_imagee" in result.stderr
    assert not (tmp_path / "out").exists()


def test_plan_json_contract() -> None:
    result = run_cli("plan", "--matrix", str(REPO / "matrix.yaml"), "--json")
    assert result.exit_code == 0
    import json

    document = json.loads(result.stdout)
    assert set(document) == {"cells", "refused", "table"}
    assert document["table"]["checked_on"] and document["table"]["newest_torch"] == "2.15.0"
    cell = document["cells"][0]
    keys = ("id", "torch", "cuda", "cudnn", "python", "base_image", "flavour", "tags", "input_digest")
    for key in (*keys, "advisories"):
        assert key in cell
    assert len(document["cells"]) == 29 and document["refused"] == []
    assert dockerfile_path(
        REPO / "dockerfiles" / "generated", load_plan(REPO / "matrix.yaml").cells[0]
    ).is_file()


TWO_TORCHES = (
    """
version: 1
axes: {torch: ["2.1.0", "2.2.0"], cuda: [cpu], base: [deb]}
defaults: {torchvision: none, torchaudio: none}
include:
  - {torch: "2.2.0", pip_packages: [filelock]}
bases:
  deb: {image: "imagekit-local/debian-python:bookworm", os: debian12, python: "3.11", cuda: false}
sources:
  pip: {no_index: true, find_links: [wheelhouse], torch_index_url: null}
"""
    + WAIVE_OLD_TORCH
)


# -- a template the matrix names is someone's code: it runs in Jinja's sandbox -----------------------------

ESCAPES = {
    "class mro subclasses": "{{ cell.__class__.__mro__[1].__subclasses__() }}",
    "cycler globals popen": "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "lipsum globals system": "{{ lipsum.__globals__['os'].system('touch MARKER') }}",
    "string class": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "self init globals": "{{ self.__init__.__globals__ }}",
    "format attribute": "{{ '{0.__class__}'.format(cell) }}",
    "mutating a list": "{% set xs = [] %}{{ xs.append('x') }}",
    "namespace escape": "{{ namespace.__init__.__globals__ }}",
    # bombs: refused within seconds, in bounded memory
    "a range of a billion": "{{ range(10**9) | list | length }}",
    "ten billion characters": "{{ 'x' * 10**10 }}",
    "a huge power": "{{ 2 ** (10 ** 9) }}",
    "endless recursion": "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}",
    "division by zero": "{{ 1 / 0 }}",
}


def _refused_in_a_bounded_process(command: str, tmp_path: Path) -> str:
    """``imagekit <command>`` on tmp_path/matrix.yaml in a real process, within 60 s and 1 GiB of
    address space (what a bomb could take): it must be refused with one error line, returned."""
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", command, "--matrix", str(tmp_path / "matrix.yaml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("imagekit: error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_a_user_template_linked_outside_its_directory_is_not_read(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "Dockerfile.j2").write_text('FROM {{ cell.base_image }}\n{% include "part.j2" %}\n')
    (tmp_path / "elsewhere.j2").write_text("RUN echo read from elsewhere\n")
    (templates / "part.j2").symlink_to(tmp_path / "elsewhere.j2")
    (tmp_path / "matrix.yaml").write_text(
        'axes:\n  torch: ["2.14.1"]\n  cuda: ["12.6"]\ntemplates: templates\n'
        'bases:\n  cuda: {image: "nvidia/cuda:{cuda_full}-devel-ubuntu22.04", os: ubuntu22.04}\n'
    )
    result = run_cli("plan", "--matrix", str(tmp_path / "matrix.yaml"))
    assert result.exit_code == 2 and "part.j2 leads outside the template directory" in result.stderr


def _bad_part(kind: str, templates: Path, outside: Path) -> None:
    part = templates / "part.j2"
    if kind == "not UTF-8":
        part.write_bytes(b"RUN echo \xff\xfe\n")
    elif kind == "over the size limit":  # sparse: no disk used, but read whole it would be 4 GB
        with part.open("wb") as handle:
            handle.truncate(4 << 30)
    elif kind == "a link to a FIFO elsewhere":  # opened, it would wait for a writer forever
        os.mkfifo(outside / "fifo")
        part.symlink_to(outside / "fifo")
    elif kind == "a link to a device elsewhere":
        part.symlink_to("/dev/zero")
    elif kind == "a link loop":
        part.symlink_to(templates / "loop.j2")
        (templates / "loop.j2").symlink_to(part)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("not UTF-8", "part.j2: not UTF-8 text (byte 9); save it as UTF-8"),
        ("over the size limit", "part.j2: larger than 1000000 bytes; a Jinja template (a few kB)"),
        ("a link to a FIFO elsewhere", "template error: part.j2"),
        ("a link to a device elsewhere", "template error: part.j2"),
        ("a link loop", "template error: part.j2"),
    ],
)
def test_a_bad_template_file_is_one_line_never_read_whole(kind: str, expected: str, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "Dockerfile.j2").write_text('FROM {{ cell.base_image }}\n{% include "part.j2" %}\n')
    _bad_part(kind, templates, tmp_path)
    (tmp_path / "matrix.yaml").write_text(
        'axes:\n  torch: ["2.14.1"]\n  cuda: ["12.6"]\ntemplates: templates\n'
        'bases:\n  cuda: {image: "nvidia/cuda:{cuda_full}-devel-ubuntu22.04", os: ubuntu22.04}\n'
    )
    assert expected in _refused_in_a_bounded_process("plan", tmp_path)


def test_imagekits_own_templates_render_without_the_sandbox(tmp_path: Path) -> None:
    plan = variants_plan(tmp_path)
    assert type(Renderer(plan).template.environment) is jinja2.Environment
    user = tmp_path / "mine"
    shutil.copytree(REPO / "dockerfiles" / "templates", user)
    sandboxed = Renderer(plan, templates=user)
    assert isinstance(sandboxed.template.environment, ImmutableSandboxedEnvironment)
    # the same bytes either way: the sandbox only refuses, it never changes a rendered value
    assert [sandboxed.dockerfile(c) for c in plan.cells] == [Renderer(plan).dockerfile(c) for c in plan.cells]


def test_the_escape_payloads_do_run_outside_the_sandbox(tmp_path: Path) -> None:
    """So that the sandbox test above can fail: plain Jinja runs the same payload."""
    marker = tmp_path / "pwned"
    jinja2.Environment().from_string(ESCAPES["cycler globals popen"].replace("MARKER", str(marker))).render()
    assert marker.exists()


def test_the_pairs_filter_lays_out_name_value_lines_in_a_users_sandboxed_template(tmp_path: Path) -> None:
    """imagekit's own templates lay out ENV and LABEL lines with `pairs`; a copy of them in a
    user's directory renders in the sandbox the same way, and `pairs` formats nothing itself."""
    from imagekit.render.environment import UserTemplates, make_environment

    (tmp_path / "Dockerfile.j2").write_text(
        "ENV {{ env | pairs(' \\\\\\n    ') }}\n"
        "ENV {{ env | pairs(' ', shell=true) }}\n"
        "LABEL {{ labels | pairs(' ', quote='\"') }}\n"
    )
    environment = make_environment(tmp_path)
    assert isinstance(environment, UserTemplates)
    text = environment.get_template("Dockerfile.j2").render(
        env=[("A", "1"), ("B", "two words")], labels=[("x", "{0.__class__}")]
    )
    assert text == (
        "ENV A=1 \\\n    B=two words\n"
        "ENV A=1 B='two words'\n"
        'LABEL x="{0.__class__}"\n'  # a value is text, never a format string
    )


def test_the_input_digest_names_the_builder_but_not_the_index_logins(
    write_matrix: Callable[[str], Path],
) -> None:
    """BuildKit's Dockerfile and staged image differ from the classic builder's (and zstd's from
    gzip's): each has its own digest. The classic one is as before (no builder key). Index logins
    change neither the Dockerfile nor the image, only how an index is reached: not in the digest."""
    from imagekit.plan.schema import BuildSettings

    def digests(credential: str, build: BuildSettings | None) -> list[str]:
        path = write_matrix(
            'axes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda], frontend: [none, jupyter]}\n'
            "build: {builder: buildkit}\nsources:\n  pip:\n    credentials:\n"
            f"      - {credential}\n{CUDA_BASE}{WAIVE_OLD_TORCH}"
        )
        return [r.input_digest for r in Renderer(load_plan(path), build=build).render_all()]

    first = digests("{host: pypi.example.org, login: ci-reader, secret: pip-index}", None)
    other = digests("{host: other.example.org, login: someone, secret: other-secret}", None)
    assert first == other
    # the matrix names no compression: BuildKit's default, zstd (issue 49), and gzip is another image
    assert first == digests(
        "{host: pypi.example.org, login: a, secret: b}", BuildSettings(builder="buildkit", compression="zstd")
    )
    gzip = digests(
        "{host: pypi.example.org, login: a, secret: b}", BuildSettings(builder="buildkit", compression="gzip")
    )
    assert len(set(first + gzip)) == 4

    plain = write_matrix(
        'axes: {torch: ["2.1.2"], cuda: ["12.1"], base: [cuda]}\n' + CUDA_BASE + WAIVE_OLD_TORCH
    )
    plan = load_plan(plain)
    classic = Renderer(plan).render(plan.cells[0])
    buildkit = Renderer(plan, build=BuildSettings(builder="buildkit")).render(plan.cells[0])
    assert classic.input_digest != buildkit.input_digest
    # the classic digest is the one made before builders existed: the same document, no builder key
    document = {
        "dockerfile": hashlib.sha256(classic.dockerfile.encode()).hexdigest(),
        "files": [[name, classic.hasher.digest(path)] for name, path in classic.context_files],
        "build_args": list(classic.build_args),
        "base": classic.cell.base_image,
        "local_base": None,
    }
    assert classic.input_digest == hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def test_cells_that_share_a_cuda_wheel_have_the_same_step_for_it_whatever_else_they_pin() -> None:
    """torch 2.2.2 and 2.3.1 (cu121) differ only in NCCL, 2.4.1 from 2.3.1 only in cuDNN: every
    other CUDA wheel's step is the same line at the same place in each (the same cache key and
    layer), and the differing ones are on top."""

    def cuda_steps(cell: str) -> list[str]:
        text = (DOCKERFILES / cell / "Dockerfile").read_text(encoding="utf-8")
        return [
            line for line in text.splitlines() if line.startswith("RUN ") and "--no-deps --no-compile" in line
        ]

    first, second, third = (
        cuda_steps(f"cuda-ubuntu22.04-torch{torch}-cuda12.1-py3.10-devel")
        for torch in ("2.2.2", "2.3.1", "2.4.1")
    )
    cublas = "RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-compile"
    cublas += " nvidia-cublas-cu12==12.1.3.1"
    assert first[0] == second[0] == third[0] == cublas
    assert (
        first[:-1] == second[:-1]
        and first[-1] != second[-1]
        and first[-1].endswith("nvidia-nccl-cu12==2.19.3")
    )
    assert second[:-2] == third[:-2] and second[-1] == third[-1] and second[-2] != third[-2]
    # 2.1.2, from PyPI (its index wheel bundles CUDA), shares them too: one index for every CUDA step
    assert cuda_steps("cuda-ubuntu22.04-torch2.1.2-cuda12.1-py3.10-devel")[:-1] == first[:-1]
