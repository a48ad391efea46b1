"""`imagekit k8s --prepull`: one DaemonSet per architecture that pulls every selected digest onto
that architecture's GPU nodes, strictly valid, restricted like the Jobs; bad input refused whole."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_PREPULL_IMAGES
from imagekit.k8s.options import JobOptions, Toleration
from imagekit.k8s.prepull import render_prepull
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock, merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_manifests import NODES, RESTRICTED_CONTAINER
from tests.unit.k8s.test_validate_on import shipped_lock
from tests.unit.report.test_lockfile import INDEX_DIGEST, index_lock
from tests.unit.report_samples import lock_entry


def daemonsets(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    """file name -> the DaemonSet, each checked against Kubernetes' strict schema."""
    out = {}
    for name, text in files.items():
        manifest = yaml.safe_load(text)
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        out[name] = manifest
    return out


def pod_of(manifest: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def runs_on(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the scheduler places the pod on a node with ``labels`` (its nodeSelector, and its
    required node affinity's operators used here)."""
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    affinity = pod.get("affinity")
    if affinity is None:
        return True
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    operators = {"Exists": lambda e: e["key"] in labels, "In": lambda e: labels.get(e["key"]) in e["values"]}
    return any(all(operators[e["operator"]](e) for e in t["matchExpressions"]) for t in terms)


def test_one_daemonset_per_architecture_pulls_each_of_its_digests() -> None:
    published = shipped_lock()
    found = daemonsets(render_prepull(published, JobOptions(namespace="ml")))
    assert set(found) == {"prepull-amd64.yaml", "prepull-arm64.yaml"}
    for arch, manifest in ((a, found[f"prepull-{a}.yaml"]) for a in ("amd64", "arm64")):
        assert manifest["kind"] == "DaemonSet" and manifest["apiVersion"] == "apps/v1"
        assert manifest["metadata"] == {
            "name": f"imagekit-prepull-{arch}",
            "labels": {
                "app.kubernetes.io/name": "imagekit",
                "app.kubernetes.io/component": "prepull",
                "job": f"imagekit-prepull-{arch}",
            },
            "namespace": "ml",
        }
        assert manifest["spec"]["updateStrategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "20%"},
        }
        pod = pod_of(manifest)
        expected = sorted(e.reference for e in published.images.values() if e.platform == f"linux/{arch}")
        pulls = pod["initContainers"]
        assert sorted(c["image"] for c in pulls) == expected and len(expected) > 1
        (main,) = pod["containers"]
        assert main["image"] == pulls[-1]["image"]  # already on the node: no other image needed
        for container in [*pulls, main]:
            assert "@sha256:" in container["image"] and container["imagePullPolicy"] == "IfNotPresent"
            assert container["command"][:4] == ["python3", "-I", "-S", "-c"]  # never a shell
            assert container["securityContext"] == RESTRICTED_CONTAINER
            # no GPU even where the NVIDIA runtime is the default and the image asks for them all
            assert container["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
            resources = container["resources"]
            assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}  # no GPU
        assert main["command"][-1].endswith("signal.pause()") and "SIGTERM" in main["command"][-1]
        assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"]
        assert "runtimeClassName" not in pod
        assert pod["nodeSelector"] == {"kubernetes.io/arch": arch}
        assert pod["tolerations"] == [Toleration.parse("gpu").as_json()]
        # every GPU node feature discovery labelled, of this architecture only; no node without a GPU
        for node, labels in NODES.items():
            assert runs_on(pod, {**labels, "kubernetes.io/arch": arch}), node
            other = "amd64" if arch == "arm64" else "arm64"
            assert not runs_on(pod, {**labels, "kubernetes.io/arch": other}), node
        assert not runs_on(pod, {"kubernetes.io/arch": arch})


def test_a_cell_in_an_index_is_pulled_by_the_index_on_its_own_architecture() -> None:
    lock = index_lock()
    lock = Lock({**lock.images, "solo": lock_entry("solo", digest="sha256:" + "5" * 64)}, lock.indexes)
    found = daemonsets(render_prepull(lock, JobOptions()))
    amd64 = [c["image"] for c in pod_of(found["prepull-amd64.yaml"])["initContainers"]]
    arm64 = [c["image"] for c in pod_of(found["prepull-arm64.yaml"])["initContainers"]]
    index = f"ghcr.io/acme/pytorch@{INDEX_DIGEST}"
    assert amd64 == [index, "ghcr.io/acme/pytorch@sha256:" + "5" * 64]
    assert arm64 == [index]
    # --only one platform of the index: the other architecture's nodes pull nothing
    assert list(render_prepull(lock.only(["c"]), JobOptions())) == ["prepull-amd64.yaml"]


def test_the_same_digest_is_pulled_once() -> None:
    same = {c: lock_entry(c) for c in ("a", "b", "c")}
    (manifest,) = daemonsets(render_prepull(Lock(same), JobOptions())).values()
    (pull,) = pod_of(manifest)["initContainers"]
    assert pull["name"] == "pull-a"


def test_the_jobs_node_options_apply() -> None:
    options = JobOptions(
        node_selector=(("pool", "training"),),
        tolerations=(Toleration.parse("dedicated=ml:NoExecute"), Toleration.parse("gpu")),
        gpu_affinity=False,
        runtime_class="nvidia",
    )
    (manifest,) = daemonsets(render_prepull(Lock({"c": lock_entry("c")}), options)).values()
    pod = pod_of(manifest)
    assert pod["nodeSelector"] == {"pool": "training", "kubernetes.io/arch": "amd64"}
    # the GPU taint once, after the user's
    assert pod["tolerations"] == [t.as_json() for t in options.tolerations]
    assert "affinity" not in pod and "runtimeClassName" not in pod and "namespace" not in manifest["metadata"]


def _many(count: int) -> Lock:
    return Lock({f"c{n}": lock_entry(f"c{n}", digest=f"sha256:{n:064x}") for n in range(count)})


@pytest.mark.parametrize(
    ("lock", "options", "message"),
    [
        (
            Lock({"c": lock_entry("c", digest="latest")}),
            JobOptions(),
            "c: the lock file names its image by 'latest',",
        ),
        (
            Lock(
                index_lock().images,
                {"g": replace(index_lock().indexes["2.11.0-cuda13.0"], digest="sha256:x")},
            ),
            JobOptions(),
            "c: the lock file names its index by 'sha256:x', not a sha256 digest",
        ),
        (
            Lock({"c": replace(lock_entry("c"), repository="ghcr.io/Acme/$(id)")}),
            JobOptions(),
            "is not an image reference",
        ),
        (
            _many(MAX_PREPULL_IMAGES + 1),
            JobOptions(),
            f"--prepull: {MAX_PREPULL_IMAGES + 1} images for amd64 nodes, more than {MAX_PREPULL_IMAGES}",
        ),
        (
            Lock({"a.b": lock_entry("a.b"), "a-b": lock_entry("a-b", digest="sha256:" + "1" * 64)}),
            JobOptions(),
            "a-b and a.b would both be the init container pull-a-b",
        ),
        (
            index_lock(),
            JobOptions(node_selector=(("kubernetes.io/arch", "amd64"),)),
            "--node-selector kubernetes.io/arch=amd64: the selected cells include arm64 images",
        ),
        (Lock({"c": lock_entry("c")}), JobOptions(namespace="Team"), "--namespace 'Team': not a DNS label"),
    ],
    ids=["image digest", "index digest", "reference", "too many", "names", "arch", "namespace"],
)
def test_bad_input_is_refused_in_one_line(lock: Lock, options: JobOptions, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as raised:
        render_prepull(lock, options)
    assert "\n" not in str(raised.value)


def test_as_many_images_as_the_bound_are_pulled() -> None:
    (manifest,) = daemonsets(render_prepull(_many(MAX_PREPULL_IMAGES), JobOptions())).values()
    assert len(pod_of(manifest)["initContainers"]) == MAX_PREPULL_IMAGES


def _published(tmp_path: Path, count: int) -> tuple[tuple[str, ...], Path]:
    """`imagekit k8s` arguments for the shipped matrix's first ``count`` amd64 cells, published."""
    plan = load_plan(REPO / "matrix.yaml")
    cells = [c.id for c in plan.cells if c.platform == "linux/amd64"][:count]
    lock = tmp_path / "images.lock.json"
    entries = {
        c: replace(lock_entry(c, digest=f"sha256:{n:064x}"), repository="ghcr.io/imagekit/pytorch")
        for n, c in enumerate(cells, start=1)
    }
    merge_lock(lock, entries)
    out = tmp_path / "k8s"
    only = [arg for c in cells for arg in ("--only", c)]
    return ("k8s", "-m", str(REPO / "matrix.yaml"), *only, "--lock", str(lock), "--out", str(out)), out


def test_k8s_prepull_writes_the_daemonset_beside_the_jobs(tmp_path: Path) -> None:
    args, out = _published(tmp_path, 2)
    done = run_cli(*args, "--prepull", "--namespace", "ml")
    assert done.exit_code == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "prepull-amd64.yaml" in names and len(names) == 3  # two Jobs and the DaemonSet
    (manifest,) = daemonsets({"p": (out / "prepull-amd64.yaml").read_text()}).values()
    assert len(pod_of(manifest)["initContainers"]) == 2 and manifest["metadata"]["namespace"] == "ml"
    assert "imagekit: 3 manifests in" in done.stderr
    assert "--prepull" in run_cli("k8s", "--help").stdout


def test_k8s_prepull_writes_nothing_when_it_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, out = _published(tmp_path, 2)
    monkeypatch.setattr("imagekit.k8s.prepull.MAX_PREPULL_IMAGES", 1)
    refused = run_cli(*args, "--prepull")
    assert refused.exit_code == 2 and "--prepull: 2 images for amd64 nodes, more than 1" in refused.stderr
    assert not out.exists()  # not even the Jobs, which alone were fine


def test_k8s_prepull_writes_nothing_for_an_unattested_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DaemonSet pulls what passed the attestation check the Jobs pass, or nothing."""
    args, out = _published(tmp_path, 1)
    key = tmp_path / "key.pub"
    key.write_text("not read: the check is replaced")
    checked: list[set[str]] = []

    def require_attested(published: Lock, key: Path, policy: str, say: object) -> None:
        checked.append(set(published.images))
        raise InputError(f"{next(iter(published.images))}: no attestation signed by {key.name}")

    monkeypatch.setattr("imagekit.attest.required.require_attested", require_attested)
    refused = run_cli(*args, "--prepull", "--require-attestation", str(key))
    assert refused.exit_code == 2 and "no attestation signed by key.pub" in refused.stderr, refused.stderr
    assert len(checked) == 1 and not out.exists()
