"""Small projects on disk for the builder's unit tests: local bases built from their own contexts."""

from __future__ import annotations

import textwrap
from datetime import date
from pathlib import Path

from imagekit.cells import Plan
from imagekit.matrix import load_plan

TODAY = date(2024, 5, 17)


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
    )
    (root / "matrix.yaml").write_text(text)
    return load_plan(root / "matrix.yaml")
