"""The bake export for real (issue 35): a BuildKit matrix exported with `imagekit matrix --format
bake`, built and pushed by `docker buildx bake` (buildx 0.13.1, dockerd 26, containerd store) to
the registry on 127.0.0.1, recorded with `imagekit bake-import`, verified with `verify --pull`."""

from __future__ import annotations

import json
import subprocess

import docker
import pytest

from testbed.matrix_projects import BK_CHECK_TEMPLATE, REGISTRY, RUN_ID, TEST_LABEL, Project, write_cells

CELLS = ("busybox-torch2.1.2-cpu-py3.11-devel", "busybox-torch2.2.2-cpu-py3.11-devel")


@pytest.fixture
def baked(project: Project) -> Project:
    (project.root / "templates" / "Dockerfile.j2").write_text(BK_CHECK_TEMPLATE)
    write_cells(
        project,
        ["2.1", "2.2"],
        publish={"registry": REGISTRY},
        extra={"build": {"builder": "buildkit", "compression": "zstd"}},
    )
    return project


def test_a_bake_export_is_pushed_imported_and_verified(baked: Project, api: docker.APIClient) -> None:
    exported = baked.run("matrix", "--matrix", "matrix.yaml", "--format", "bake", "--context-dir", "bake")
    assert exported.returncode == 0, exported.stderr
    bake = json.loads(exported.stdout)
    for name in bake["group"]["default"]["targets"]:
        target = bake["target"][name]
        assert target["attest"] == ["type=provenance,disabled=true"]
        assert "compression=zstd" in target["output"][0] and "push=true" in target["output"][0]
        target["labels"][TEST_LABEL] = RUN_ID  # removed with the run's other images
    (baked.root / "bake.json").write_text(json.dumps(bake))

    done = subprocess.run(
        ["docker", "buildx", "bake", "-f", "bake.json", "--metadata-file", "meta.json", "--push"],
        cwd=baked.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = json.loads((baked.root / "meta.json").read_text())

    imported = baked.run("bake-import", "--metadata-file", "meta.json", "--matrix", "matrix.yaml", "--json")
    assert imported.returncode == 0, imported.stderr
    assert "warning" not in imported.stderr, imported.stderr
    report = baked.report()
    for cell in CELLS:
        digest = metadata[cell.replace(".", "_")]["containerimage.digest"]
        result = report[cell]
        assert result["status"] == "built"
        assert result["image_digest"] == digest
        assert result["image_id"] == digest  # the containerd store shows the manifest digest
        assert (
            api.inspect_image(digest)["Config"]["Labels"]["imagekit.input-digest"] == result["input_digest"]
        )
        staged = result["staged"]
        assert isinstance(staged, dict) and staged["digest"] == digest and staged["registry"] == REGISTRY

    verified = baked.run("verify", "--matrix", "matrix.yaml", "--pull", "--gpus", "none")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "2 checked without GPU" in verified.stdout + verified.stderr
    for cell in CELLS:
        verification = baked.report()[cell]["verification"]
        assert isinstance(verification, dict)
        assert verification["verdict"] == "checked"
        assert verification["image_digest"] == report[cell]["staged"]["digest"]  # type: ignore[index]
