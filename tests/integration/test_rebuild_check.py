"""`imagekit rebuild-check REF@DIGEST` for real (issue 36, part 4): a tiny BuildKit cell staged with
`imagekit build --builder buildkit --push` is rebuilt from its matrix and matches its digest; the
same digest against a matrix whose template writes one file otherwise is refused as "inputs
changed" (nothing built), and with --anyway names the layer, its step and the file that differ.
Neither check leaves an image, a tag or a temporary directory behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import docker

from testbed.matrix_projects import REGISTRY, Project, write_cells
from tests.integration.test_buildkit import BK_TEMPLATE, CELL


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("imagekit-rebuild-check-*")}


def test_a_staged_cell_rebuilds_to_its_digest_and_a_changed_file_is_named(
    project: Project, api: docker.APIClient
) -> None:
    (project.root / "templates" / "Dockerfile.j2").write_text(BK_TEMPLATE)
    write_cells(project, ["2.1"], publish={"registry": REGISTRY})
    pushed = project.build("--builder", "buildkit", "--push")
    assert pushed.returncode == 0, pushed.stderr
    digest = project.report()[CELL]["staged"]["digest"]  # type: ignore[index]
    reference = f"{REGISTRY}/{project.repository}@{digest}"
    images, temporary = {i["Id"] for i in api.images(all=True)}, _leftovers()

    same = project.run("rebuild-check", reference, "--matrix", "matrix.yaml")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout == f"matches {digest}\n"

    # One file of the cell written otherwise: its inputs moved, so nothing is built ...
    template = project.root / "templates" / "Dockerfile.j2"
    template.write_text(BK_TEMPLATE.replace('echo "building', 'echo "tampered'))
    changed = project.run("rebuild-check", reference, "--matrix", "matrix.yaml")
    assert changed.returncode == 5, changed.stderr
    assert "its inputs changed" in changed.stderr and "nothing was built" in changed.stderr
    assert changed.stdout == ""

    # ... unless asked: the layer of that step differs, and its file is named.
    anyway = project.run("rebuild-check", reference, "--matrix", "matrix.yaml", "--anyway", "--json")
    assert anyway.returncode == 4, anyway.stderr
    verdict = json.loads(anyway.stdout)
    difference = verdict["difference"]
    assert verdict["verdict"] == "differs" and difference["kind"] == "content", verdict
    assert difference["layer"] == 1 and 'echo "building' in difference["step"], difference  # the image's step
    first = [e for e in difference["entries"] if e["name"] == "first"]
    assert first and first[0]["published"]["sha256"] != first[0]["rebuilt"]["sha256"], difference

    # a check moves no tag and leaves no image nor temporary directory
    assert {i["Id"] for i in api.images(all=True)} == images
    assert _leftovers() == temporary
