"""Every object `imagekit k8s` writes into a namespace carries ``app.kubernetes.io/name: imagekit``,
so one ``kubectl delete ... -l app.kubernetes.io/name=imagekit`` (README, "Cleaning up") removes
what outlives a Job: the DRA claim templates, ComputeDomains, Services, DaemonSets and front ends,
whichever flags wrote them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagekit.report.lockfile import merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_dra import entries_of

LABEL = ("app.kubernetes.io/name", "imagekit")
# the kinds README's cleanup line names: each kind a flag set below writes must be among them
CLEANUP_KINDS = {
    "Job",
    "Deployment",
    "Service",
    "DaemonSet",
    "ResourceClaimTemplate",
    "ComputeDomain",
}
FLAG_SETS = {
    "jobs and front ends": (),
    "dra": ("--gpu-request", "dra"),
    "prepull": ("--prepull",),
    "compute domain": ("--compute-domain", "2", "--gpus", "4"),
    "compute domain, dra": ("--compute-domain", "2", "--gpus", "4", "--gpu-request", "dra"),
    "compute domain, dra, queued": (
        *("--compute-domain", "2", "--gpus", "4", "--gpu-request", "dra", "--queue", "team-a"),
    ),
    "validate-on": ("--validate-on", "NVIDIA-H100-80GB-HBM3"),
    "validate-on, dra": ("--validate-on", "NVIDIA H100 80GB HBM3", "--gpu-request", "dra"),
    "validate-on a rack": ("--validate-on", "NVIDIA-GB200", "--compute-domain", "2", "--gpus", "4"),
}


@pytest.fixture(scope="module")
def lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lock") / "images.lock.json"
    merge_lock(path, entries_of("matrix.yaml"))
    return path


@pytest.mark.parametrize("flags", FLAG_SETS.values(), ids=list(FLAG_SETS))
def test_every_object_written_carries_the_common_label(
    flags: tuple[str, ...], lock: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = run_cli("k8s", "-m", str(REPO / "matrix.yaml"), "--lock", str(lock), "--out", str(out), *flags)
    assert done.exit_code == 0, done.stderr
    documents = [
        d for p in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d
    ]
    assert documents
    for document in documents:
        labels = document["metadata"].get("labels", {})
        assert labels.get(LABEL[0]) == LABEL[1], (document["kind"], document["metadata"]["name"])
        assert document["kind"] in CLEANUP_KINDS, document["kind"]


def test_readme_says_how_to_clean_up_by_the_label() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    line = next(
        line for line in text.splitlines() if line.startswith("kubectl -n ml delete") and "-l" in line
    )
    kinds = line.split()[4].split(",")
    assert f"-l {LABEL[0]}={LABEL[1]}" in line
    assert {k.lower() for k in CLEANUP_KINDS} <= {k.lower() for k in kinds}, kinds
