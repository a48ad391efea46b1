"""tests/unit/k8s/test_prepull.py's slow tests: checkov (as tests/unit/k8s/test_manifests_policy.py runs
it) on the pre-pull DaemonSets of every shipped matrix, ~10 s of CPU a scan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.core import naming
from imagekit.k8s.manifests import write_jobs
from imagekit.k8s.options import JobOptions, Toleration
from imagekit.k8s.prepull import render_prepull
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock
from tests.conftest import REPO
from tests.unit.k8s.test_manifests_policy import ACCEPTED, MATRICES, NAMESPACED, _findings
from tests.unit.report_samples import lock_entry

OPTIONS = {
    "defaults": JobOptions(),
    "a node pool": JobOptions(
        namespace="ml",
        node_selector=(("pool", "training"),),
        tolerations=(Toleration.parse("dedicated=ml:NoExecute"),),
        gpu_affinity=False,
    ),
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_prepull_daemonsets_pass_the_policy_scanner(options: JobOptions, tmp_path: Path) -> None:
    """Sized and restricted whatever the flags: no --cpu-limit finding to accept (UNSIZED)."""
    for number, matrix in enumerate(MATRICES):
        plan = load_plan(REPO / matrix)
        repository = naming.repository(plan.matrix.publish.registry, plan.matrix.publish.repository)
        entries = {
            c.id: replace(
                lock_entry(c.id, digest=f"sha256:{n:064x}"), repository=repository, platform=c.platform
            )
            for n, c in enumerate(plan.cells, start=1)
        }
        files = render_prepull(Lock(entries), options)
        assert set(files) == {"prepull-amd64.yaml", "prepull-arm64.yaml"}
        write_jobs(files, tmp_path / str(number))
    accepted = {**ACCEPTED, **(NAMESPACED if options.namespace is None else {})}
    findings = _findings(tmp_path)
    found = {f"{f['check_id']} {f['resource']}" for f in findings if f["check_id"] not in accepted}
    assert not found, "\n".join(sorted(found))
    assert {f["check_id"] for f in findings} <= set(accepted) and findings  # the scanner saw them
