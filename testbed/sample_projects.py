"""Small projects and files on disk for the tests: local bases built from their own contexts, the
variants matrix every template branch depends on (bench/render_snapshot.py snapshots it too), and wheels."""

from __future__ import annotations

import textwrap
import zipfile
from datetime import date
from pathlib import Path

from imagekit.facts.cuda_wheels import load_cuda_wheels
from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from testbed.waivers import WAIVE_OLD_TORCH

TODAY = date(2024, 5, 17)
CUDA_PINS_2_1_2 = load_cuda_wheels().pinned("2.1.2", "cu121", "x86_64") or ()


TEMPLATE = "FROM {{ cell.base_image }}\nRUN echo {{ cell.id }}\n"


def local_base(name: str, image: str) -> str:
    return textwrap.indent(
        f'{name}:\n  image: {image}\n  os: debian12\n  python: "3.11"\n  cuda: false\n'
        f"  build: {{context: {name}}}\n",
        "  ",
    )


def write_project(
    root: Path, dockerfiles: dict[str, str], axis: list[str], registry: str | None = None
) -> Plan:
    """A matrix in ``root`` whose bases are built from ``root/<name>/Dockerfile``."""
    (root / "templates").mkdir()
    (root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    for name, text in dockerfiles.items():
        (root / name).mkdir()
        (root / name / "Dockerfile").write_text(text)
        (root / name / "marker.txt").write_text(name)
    publish = "publish:\n  repository: example/it\n"
    if registry:
        publish += f"  registry: {registry}\n"
    publish += '  tags: {readable: "{base}-{torch}"}\n'
    bases = "".join(local_base(name, f"example/{name}:dev") for name in dockerfiles)
    text = (
        'version: "1"\ntemplates: templates\n'
        + publish
        + f'axes:\n  torch: ["2.1"]\n  base: [{", ".join(axis)}]\n'
        + "bases:\n"
        + bases
        + WAIVE_OLD_TORCH
    )
    (root / "matrix.yaml").write_text(text)
    return load_plan(root / "matrix.yaml")


# Everything a template branch depends on: wheelhouse stage, apt mirror, extras, env, build args,
# a base that brings its own Python, a CPU build.
VARIANTS = (
    """
axes:
  torch: ["2.4.1"]
  cuda: ["12.1"]
  base: [cuda]
include:
  - { base: deb, cuda: cpu, torch: "2.5.1", flavour: runtime }
  - { base: deb, cuda: "12.1", torch: "2.5.1", flavour: runtime }
  - { base: deb, cuda: cpu, torch: "2.5.1", flavour: devel }
  - { base: deb, cuda: cpu, torch: "2.5.1", flavour: runtime, frontend: jupyter }
  - { base: cuda, cuda: "12.1", torch: "2.4.1", frontend: ssh }
defaults:
  pip_packages: ["numpy<2", "pillow"]
  apt_packages: [git]
  env: { TORCH_CUDA_ARCH_LIST: "8.0;9.0", OMP_NUM_THREADS: "1" }
  build_args: { SITE: acme }
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{cudnn_tag}{flavour}-ubuntu22.04"
    os: ubuntu22.04
  deb:
    image: "imagekit-local/debian-python:bookworm"
    os: debian12
    python: "3.11"
sources:
  apt: { mirror: "https://mirror.example.org/ubuntu" }
  pip:
    torch_index_url: "https://mirror.example.org/pytorch/whl/{variant}"
    index_url: "https://mirror.example.org/pypi/simple"
    find_links: [wheelhouse]
    trusted_hosts: [mirror.example.org]
"""
    + WAIVE_OLD_TORCH
)


def variants_plan(tmp_path: Path) -> Plan:
    wheel = tmp_path / "wheelhouse" / "numpy-1.26.4-cp311-none-any.whl"
    if not wheel.exists():
        wheel.parent.mkdir(exist_ok=True)
        wheel.write_bytes(b"not really a wheel")
    path = tmp_path / "variants.yaml"
    path.write_text(VARIANTS, encoding="utf-8")
    return load_plan(path)


def wheel(
    where: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any"
) -> Path:
    path = where / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    python, abi, platform = tag.split("-")
    wheel_file = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {python}-{abi}-{platform}\n"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", wheel_file)
        archive.writestr(f"{info}/RECORD", "")
    return path


def cuda_index_matrix(index: Path) -> str:
    """A matrix of one torch 2.1.2 cu121 runtime cell whose indexes are ``cuda_index``'s at ``index``
    (its waivers for the old torch included)."""
    matrix = f"""\
version: 1
axes:
  torch: ["2.1.2"]
  cuda: ["12.1"]
  base: [cuda]
  flavour: [runtime]
bases:
  cuda:
    image: "nvidia/cuda:{{cuda_full}}-{{image_flavour}}-ubuntu22.04"
    os: ubuntu22.04
sources:
  pip:
    torch_index_url: "{index.as_uri()}/{{variant}}"
    # PyPI's stand-in: the CUDA steps and, PyTorch's index's 2.1.2 bundling CUDA, torch's
    index_url: "{index.as_uri()}/cu121"
"""
    return matrix + WAIVE_OLD_TORCH


def cuda_index(root: Path, cudnn_for_torch: str = "8.9.2.26") -> Path:
    """A PEP 503 index on disk (``root/cu121/<project>/index.html``) of stand-in wheels with the
    real projects' names and the Requires-Dist shape of torch 2.1.2's CUDA 12.1 build: its eleven
    exact nvidia-*-cu12 pins (those of imagekit/data/cuda_wheels.yaml), cuSOLVER asking for any
    nvjitlink, and another cuDNN beside the pinned one; ``cudnn_for_torch`` is the one torch pins."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    made = [wheel(files, "nvidia_nvjitlink_cu12", "12.9.86")]
    for pin in CUDA_PINS_2_1_2:
        name, _, version = pin.partition("==")
        requires = ("nvidia-nvjitlink-cu12",) if name == "nvidia-cusolver-cu12" else ()
        made.append(wheel(files, name.replace("-", "_"), version, requires))
    made.append(wheel(files, "nvidia_cudnn_cu12", "8.9.2.27"))  # another cuDNN the index also serves
    torch_requires = tuple(p for p in CUDA_PINS_2_1_2 if not p.startswith("nvidia-cudnn-cu12=="))
    made.append(wheel(files, "torch", "2.1.2", (*torch_requires, f"nvidia-cudnn-cu12=={cudnn_for_torch}")))
    made.append(wheel(files, "torchvision", "0.16.2", ("torch==2.1.2",)))
    made.append(wheel(files, "torchaudio", "2.1.2", ("torch==2.1.2",)))
    made.append(wheel(files, "numpy", "1.26.4"))
    by_project: dict[str, list[Path]] = {}
    for path in made:
        by_project.setdefault(path.name.split("-")[0].replace("_", "-").lower(), []).append(path)
    for project, paths in by_project.items():
        page = root / "cu121" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{p.name}">{p.name}</a>\n' for p in paths)
        (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n", encoding="utf-8")
    return root
