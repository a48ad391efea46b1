"""`imagekit publish`, `images` and `k8s` against a real registry (Debian's docker-registry on a
free 127.0.0.1 port, its own storage) and the real engine, on busybox-sized cells."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import kubernetes_validate
import pytest
import requests
import yaml

from imagekit.registry.manifest import ACCEPT
from testbed.matrix_projects import Project, write_cells
from testbed.registry_server import FlakyProxy, LocalRegistry, free_port

SECRET = "s3cr3t-never-printed"


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    server = LocalRegistry().start()
    yield server
    server.remove()


@pytest.fixture
def proxy(registry: LocalRegistry) -> Iterator[FlakyProxy]:
    relay = FlakyProxy(registry.host)
    yield relay
    relay.close()


def make_cells(project: Project, policy: str | None, torches: tuple[str, ...] = ("2.1", "2.2")) -> list[str]:
    """Write and build a matrix of busybox cells; returns the cell ids."""
    write_cells(project, torches, publish={"policy": policy} if policy else None)
    built = project.build()
    assert built.returncode == 0, built.stderr
    return sorted(project.report())


def lock_of(project: Project) -> dict[str, dict[str, object]]:
    images: dict[str, dict[str, object]] = json.loads((project.root / "images.lock.json").read_text())[
        "images"
    ]
    return images


def digest_of(registry: str, repository: str, tag: str) -> str | None:
    response = requests.head(
        f"http://{registry}/v2/{repository}/manifests/{tag}", headers={"Accept": ACCEPT}, timeout=10
    )
    return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None


def final_tags(registry: LocalRegistry, repository: str) -> list[str]:
    return [t for t in registry.tags(repository) if not t.startswith("staging-")]


def test_unvalidated_cells_are_refused_before_any_push(project: Project, registry: LocalRegistry) -> None:
    (cell,) = make_cells(project, None, ("2.1",))
    # busybox has no python: the real verification fails, so nothing may be published.
    verified = project.run("verify", "--matrix", "matrix.yaml", "--gpus", "none")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    done = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert done.returncode == 1, done.stderr
    assert f"imagekit: refused: {cell}: it failed verification" in done.stderr
    assert registry.tags(project.repository) == []
    assert not (project.root / "images.lock.json").exists()

    # `built` admits unverified images, never ones that failed their checks.
    path = project.root / "matrix.yaml"
    path.write_text(path.read_text().replace("publish:\n", "publish:\n  policy: built\n", 1))
    again = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert again.returncode == 1 and "failed verification" in again.stderr
    assert registry.tags(project.repository) == []


def test_default_policy_refuses_an_unverified_cell(project: Project, registry: LocalRegistry) -> None:
    (cell,) = make_cells(project, None, ("2.1",))
    done = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert done.returncode == 1
    assert f"{cell}: publish policy gpu-validated needs validated; it was never verified" in done.stderr
    assert registry.tags(project.repository) == []


def test_push_promote_pull_back_list_tags_and_export(
    project: Project, registry: LocalRegistry, api: docker.APIClient, tmp_path: Path
) -> None:
    cells = make_cells(project, "built")
    report = project.report()

    dry = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("would publish") == 2 and "-unverified" in dry.stdout
    assert registry.tags(project.repository) == []
    assert not (project.root / "images.lock.json").exists()
    dry_json = project.run(
        "publish", "--matrix", "matrix.yaml", "--registry", registry.host, "--dry-run", "--json"
    )
    document = json.loads(dry_json.stdout)
    assert document["dry_run"] and sorted(e["cell"] for e in document["published"]) == cells
    assert document["refused"] == [] and registry.tags(project.repository) == []

    env = {"IMAGEKIT_REGISTRY_USER": "ci", "IMAGEKIT_REGISTRY_PASSWORD": SECRET}
    done = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host, env=env)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    lock_text = (project.root / "images.lock.json").read_text()
    assert SECRET not in lock_text
    lock = lock_of(project)
    assert sorted(lock) == cells

    listed = registry.tags(project.repository)
    for cell in cells:
        entry = lock[cell]
        built = report[cell]
        digest = str(entry["digest"])
        assert re.fullmatch(r"sha256:[a-f0-9]{64}", digest)
        assert entry["repository"] == f"{registry.host}/{project.repository}"
        assert entry["level"] == "built" and entry["policy"] == "built" and entry["verification"] is None
        # Every build tag, suffixed so nobody mistakes it for a verified image, names the one digest.
        expected = [str(t).split(":", 1)[1] + "-unverified" for t in built["tags"]]  # type: ignore[union-attr]
        assert entry["tags"] == expected
        for tag in expected:
            assert tag in listed
            assert digest_of(registry.host, project.repository, tag) == digest
        # Pull back by digest: the same image (config digest = image id) comes back.
        api.pull(f"{registry.host}/{project.repository}", tag=digest)
        pulled = api.inspect_image(f"{registry.host}/{project.repository}@{digest}")
        assert pulled["Id"] == built["image_id"] == entry["image_id"]
    # One staging tag per cell stays in the registry; none stays in the local engine.
    assert len([t for t in listed if t.startswith("staging-")]) == 2
    local = [
        t for i in api.images() for t in i.get("RepoTags") or () if ":staging-" in t and registry.host in t
    ]
    assert local == []

    as_env = project.run("images", "--format", "env")
    assert as_env.returncode == 0, as_env.stderr
    lines = dict(line.split("=", 1) for line in as_env.stdout.splitlines())
    assert sorted(lines.values()) == sorted(f"{e['repository']}@{e['digest']}" for e in lock.values())
    as_yaml = yaml.safe_load(project.run("images", "--format", "yaml").stdout)
    assert as_yaml["images"].keys() == lock.keys()
    assert json.loads(project.run("images").stdout)["images"][cells[0]]["digest"] == lock[cells[0]]["digest"]

    # Publishing again is idempotent: the same digests under the same tags.
    twice = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert twice.returncode == 0, twice.stderr
    assert {c: e["digest"] for c, e in lock_of(project).items()} == {c: e["digest"] for c, e in lock.items()}

    # Kubernetes Jobs by digest, validated against the Kubernetes schema.
    out = tmp_path / "jobs"
    k8s = project.run(
        "k8s", "--matrix", "matrix.yaml", "--out", str(out), "--gpus", "2", "--runtime-class", "nvidia",
        "--node-selector", "nvidia.com/gpu.product=NVIDIA-H200", "--toleration", "nvidia.com/gpu:NoSchedule",
        "--pvc", "checkpoints:/ckpt", "--memory", "64Gi",
    )  # fmt: skip
    assert k8s.returncode == 0, k8s.stderr
    files = sorted(out.glob("*.yaml"))
    assert len(files) == 2
    for path in files:
        manifest = yaml.safe_load(path.read_text())
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] in {f"{e['repository']}@{e['digest']}" for e in lock.values()}
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 2

    # A report whose input digests were edited no longer matches the images' own labels in the
    # registry: refused before any tag moves (publish renders nothing; the label is the witness).
    report_path = project.root / ".imagekit" / "report.json"
    document = json.loads(report_path.read_text())
    for record in document["cells"]:
        record["input_digest"] = "e" * 64
    report_path.write_text(json.dumps(document))
    stale = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert stale.returncode == 1, stale.stderr
    assert stale.stderr.count("was built from inputs") == 2, stale.stderr
    assert {c: e["digest"] for c, e in lock_of(project).items()} == {c: e["digest"] for c, e in lock.items()}


def test_a_registry_that_is_down_is_exit_3_with_nothing_promoted(
    project: Project, registry: LocalRegistry, proxy: FlakyProxy
) -> None:
    make_cells(project, "built", ("2.1",))
    closed = f"127.0.0.1:{free_port()}"
    done = project.run("publish", "--matrix", "matrix.yaml", "--registry", closed, "--retries", "2")
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("imagekit: error:") == 1 and f"registry {closed} unreachable" in done.stderr
    assert not (project.root / "images.lock.json").exists()

    # The staging push gets through, then the registry answers 503 to every promotion: exit 3,
    # the staged manifest is there, and no final tag was written.
    proxy.fail(
        lambda method, path: method == "PUT" and "/manifests/" in path and "/manifests/staging-" not in path
    )
    cut = project.run("publish", "--matrix", "matrix.yaml", "--registry", proxy.host, "--retries", "2")
    assert cut.returncode == 3, cut.stderr
    assert "kept answering HTTP 503" in cut.stderr
    assert [t for t in registry.tags(project.repository) if t.startswith("staging-")]
    assert final_tags(registry, project.repository) == []
    assert not (project.root / "images.lock.json").exists()


def test_transient_registry_errors_are_retried(
    project: Project, registry: LocalRegistry, proxy: FlakyProxy, api: docker.APIClient
) -> None:
    (cell,) = make_cells(project, "built", ("2.1",))
    proxy.fail_first = 3  # the first requests of the run (the ping) fail
    proxy.fail(lambda method, path: method == "PUT" and "/manifests/" in path and "staging-" not in path, 2)
    done = project.run("publish", "--matrix", "matrix.yaml", "--registry", proxy.host)
    assert done.returncode == 0, done.stderr
    assert proxy.failures() == 5
    assert done.stderr.count("imagekit: retry:") >= 5
    entry = lock_of(project)[cell]
    for tag in entry["tags"]:  # type: ignore[union-attr]
        assert digest_of(registry.host, project.repository, str(tag)) == entry["digest"]
    staging = f"{proxy.host}/{project.repository}:staging-{str(entry['input_digest'])[:12]}"
    assert not [t for i in api.images() for t in i.get("RepoTags") or () if t.startswith(staging)]


def test_an_immutable_tag_never_moves_to_a_second_build_of_the_same_inputs(
    project: Project, registry: LocalRegistry
) -> None:
    """A cell staged (`build --push`) and published; the same inputs built again (another label,
    no registry cache: the same input digest, another image digest), staged and published to the
    same registry: refused (exit 1) naming both digests, every tag and the lock as they were."""
    (cell,) = make_cells(project, "built", ("2.1",))
    host = ("--registry", registry.host)
    staged = project.build("--push", *host)
    assert staged.returncode == 0, staged.stderr
    first = project.run("publish", "--matrix", "matrix.yaml", *host)
    assert first.returncode == 0, first.stderr
    published = lock_of(project)[cell]
    tags = {
        t: digest_of(registry.host, project.repository, t) for t in final_tags(registry, project.repository)
    }
    assert set(tags) == set(published["tags"]) and set(tags.values()) == {published["digest"]}  # type: ignore[arg-type]

    again = project.build("--push", "--force", "--no-cache-from", "--label", "org.example.rebuild=2", *host)
    assert again.returncode == 0, again.stderr
    record = project.report()[cell]
    second = record["staged"]["digest"]  # type: ignore[index]
    assert record["input_digest"] == published["input_digest"] and second != published["digest"]
    refused = project.run("publish", "--matrix", "matrix.yaml", *host)
    assert refused.returncode == 1, refused.stderr
    assert f"already names {published['digest']}, not this build's {second}" in refused.stderr
    assert "nothing promoted for this cell" in refused.stderr
    assert {t: digest_of(registry.host, project.repository, t) for t in tags} == tags
    assert set(final_tags(registry, project.repository)) == set(tags)  # no tag added either
    assert lock_of(project)[cell] == published


def test_k8s_refuses_a_cell_without_a_digest(project: Project, tmp_path: Path) -> None:
    make_cells(project, "built", ("2.1",))
    out = tmp_path / "jobs"
    done = project.run("k8s", "--matrix", "matrix.yaml", "--out", str(out))
    assert done.returncode == 2
    assert "has no digest for" in done.stderr
    assert not out.exists()


# -- faults during publish---------- --------------------------------------------------------------


def test_a_registry_answering_500_to_its_first_requests_is_retried(
    project: Project, registry: LocalRegistry
) -> None:
    (cell,) = make_cells(project, "built", ("2.1",))
    relay = FlakyProxy(registry.host, fail_first=3, status=500)
    try:
        done = project.run("publish", "--matrix", "matrix.yaml", "--registry", relay.host)
        assert done.returncode == 0, done.stderr
        assert relay.failures() == 3
        entry = lock_of(project)[cell]
        for tag in entry["tags"]:  # type: ignore[union-attr]
            assert digest_of(registry.host, project.repository, str(tag)) == entry["digest"]
    finally:
        relay.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_publish_promotes_nothing(
    project: Project, registry: LocalRegistry, api: docker.APIClient, sig: signal.Signals
) -> None:
    (cell,) = make_cells(project, "built", ("2.1",))
    report_before = (project.root / ".imagekit" / "report.json").read_text()
    relay = FlakyProxy(registry.host)
    # The staging push stalls on its first layer upload: the signal lands mid-push.
    relay.slow(lambda method, path: "/blobs/uploads/" in path, 20)
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "imagekit",
                "publish",
                "--matrix",
                "matrix.yaml",
                "--registry",
                relay.host,
            ],
            cwd=project.root,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while relay.held() == 0:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the push never reached the registry"
            time.sleep(0.1)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == (130 if sig == signal.SIGINT else 143), stderr
        assert "Traceback" not in stderr
    finally:
        relay.close()
    # nothing promoted, nothing recorded, the build report untouched, no local staging tag left
    tags = [t for t in registry.tags(project.repository) if not t.startswith("staging-")]
    assert tags == []
    assert not (project.root / "images.lock.json").exists()
    assert (project.root / ".imagekit" / "report.json").read_text() == report_before
    # this test's own: a bake --push of another test leaves its staging tag in the shared engine
    mine = f"/{project.repository}:staging-"
    staging = [t for image in api.images() for t in image.get("RepoTags") or () if mine in t]
    assert staging == [], f"{cell}: a local staging tag outlived the interrupted publish"


def _scan_of(image: str, severity: str) -> dict[str, object]:
    """The recorded Trivy scan (tests/fixtures/scans), made a scan of ``image``: its findings'
    CRITICAL ones at ``severity``."""
    from tests.unit.publish.test_scan_gate import TRIVY

    document = json.loads(TRIVY.read_text())
    document["ArtifactName"] = f"busybox-cell@{image}"
    document["Metadata"] = {"ImageID": image, "OS": document["Metadata"]["OS"]}  # Trivy names the OS
    for result in document["Results"]:
        for finding in result["Vulnerabilities"]:
            finding["Severity"] = severity if finding["Severity"] == "CRITICAL" else finding["Severity"]
    return document


def test_a_critical_scanner_finding_refuses_the_cell_and_moves_no_tag(
    project: Project, registry: LocalRegistry
) -> None:
    (cell,) = make_cells(project, "built", ("2.1",))
    image = str(project.report()[cell]["image_id"])
    scan = project.root / "trivy.json"
    scan.write_text(json.dumps(_scan_of(image, "CRITICAL")))
    publish = ("publish", "--matrix", "matrix.yaml", "--registry", registry.host, "--scan", str(scan))
    done = project.run(*publish)
    assert done.returncode == 1, done.stderr
    assert f"imagekit: refused: {cell}: libssl3 3.0.20-1~deb12u2 has CVE-2099-0001 (critical)" in done.stderr
    assert "fixed in 3.0.99-1~deb12u1" in done.stderr and "nothing promoted for this cell" in done.stderr
    assert final_tags(registry, project.repository) == []
    assert not (project.root / "images.lock.json").exists()
    # a scan of another image is refused before anything is pushed, with exit 2
    other = project.root / "other.json"
    other.write_text(json.dumps(_scan_of("sha256:" + "4" * 64, "LOW")))
    foreign = project.run(*publish[:-1], str(other))
    assert foreign.returncode == 2 and "is no cell's staged digest or image" in foreign.stderr
    # the same image with the finding below the threshold: published, its counts in the report
    scan.write_text(json.dumps(_scan_of(image, "MEDIUM")))
    again = project.run(*publish)
    assert again.returncode == 0, again.stderr
    assert final_tags(registry, project.repository) != [] and cell in lock_of(project)
    (counted,) = project.report()[cell]["scans"]  # type: ignore[misc]
    assert counted["counts"] == {
        "critical": 0,
        "high": 2,
        "medium": 2,
        "low": 2,
        "negligible": 0,
        "unknown": 0,
    }
