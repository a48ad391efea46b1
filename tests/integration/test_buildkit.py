"""The BuildKit builder for real (issue 35): `imagekit build --builder buildkit` through Debian 13's
buildx 0.13.1 on dockerd 26 with the containerd image store, a registry on 127.0.0.1, and a second
engine of its own standing in for a remote BuildKit and for an empty runner."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from testbed.matrix_projects import BUSYBOX, REGISTRY, RUN_ID, Project, write_cells
from tests.integration.conftest import REPO_ROOT

# The test template, BuildKit's way: every step says its network; the first step is the run's
# own (RUN_ID), the last one reads LAST, so changing LAST changes only the last step.
BK_TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env if name != "LAST" %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN --network=none echo "building {{ cell.id }}" > /first && if [ -n "$SLEEP" ]; then sleep "$SLEEP"; fi
RUN --network=none if [ "$FAIL" = 1 ]; then echo "boom: this step fails on purpose" >&2; exit 3; fi
{% for name, value in cell.env if name == "LAST" %}
RUN --network=none echo {{ value }} > /last
{% endfor %}
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""
CELL = "busybox-torch2.1.2-cpu-py3.11-devel"
ENGINE_SH = str(REPO_ROOT / "scripts" / "engine.sh")


@pytest.fixture
def bk(project: Project) -> Project:
    (project.root / "templates" / "Dockerfile.j2").write_text(BK_TEMPLATE)
    return project


def tags_on(api: docker.APIClient, image_id: str) -> set[str]:
    try:
        return set(api.inspect_image(image_id).get("RepoTags") or ())
    except docker.errors.ImageNotFound:
        return set()


def test_buildkit_builds_skips_and_rebuilds_to_the_same_digest(bk: Project, api: docker.APIClient) -> None:
    write_cells(bk, ["2.1", "2.2"])
    first = bk.build("--builder", "buildkit", "--jobs", "2")
    assert first.returncode == 0, first.stderr
    report = bk.report()
    for result in report.values():
        assert result["status"] == "built"
        image = api.inspect_image(result["image_id"])
        assert image["Id"] == result["image_id"]  # the manifest digest, on the containerd store
        assert image["Config"]["Labels"]["imagekit.input-digest"] == result["input_digest"]
        assert set(result["tags"]) <= tags_on(api, result["image_id"])
        log = Path(bk.root, result["log"]).read_text()
        assert "RUN --network=none echo" in log and "loading it into the engine" in log
    # BuildKit's Dockerfiles differ from the classic ones: so do their input digests
    classic = json.loads(bk.run("plan", "--matrix", "matrix.yaml", "--json").stdout)["cells"]
    assert {c["input_digest"] for c in classic}.isdisjoint(r["input_digest"] for r in report.values())

    again = bk.build("--builder", "buildkit", "--jobs", "2")
    assert again.returncode == 0, again.stderr
    assert {r["status"] for r in bk.report().values()} == {"skipped"}
    # a run that built nothing leaves the record the next no-change run is answered from (no
    # buildx started: its discovery is no input of an image)
    answered = bk.build("--builder", "buildkit", "--jobs", "2")
    assert answered.returncode == 0 and "nothing changed since the run of" in answered.stderr, answered.stderr
    # Rebuilt from scratch (--force, --no-cache would be the same), the image is bit for bit the
    # same: fixed SOURCE_DATE_EPOCH, rewritten timestamps, no provenance.
    forced = bk.build("--builder", "buildkit", "--force", "--only", CELL)
    assert forced.returncode == 0, forced.stderr
    assert bk.report()[CELL]["image_id"] == report[CELL]["image_id"]


def test_a_failed_step_is_one_line_and_tags_nothing(bk: Project, api: docker.APIClient) -> None:
    write_cells(bk, ["2.1"], steer={"*": {"FAIL": "1"}})
    result = bk.build("--builder", "buildkit")
    assert result.returncode == 1
    cell = bk.report()[CELL]
    assert cell["status"] == "failed"
    # the step as BuildKit names it (its arguments expanded), then BuildKit's error
    assert cell["error"].startswith('step [3/3] RUN --network=none if [ "1" = 1 ]; then echo'), cell["error"]
    assert cell["error"].endswith("did not complete successfully: exit code: 3")
    assert "boom: this step fails on purpose" in Path(bk.root, cell["log"]).read_text()
    assert not api.images(name=bk.repository)


def test_a_timeout_stops_buildkit_and_leaves_no_step_running(bk: Project, api: docker.APIClient) -> None:
    marker = f"6{uuid.uuid4().int % 10**6:06d}"  # this test's own sleep, findable among processes
    write_cells(bk, ["2.1"], steer={"*": {"SLEEP": marker}})
    started = time.monotonic()
    result = bk.build("--builder", "buildkit", "--timeout", "4")
    assert result.returncode == 1 and time.monotonic() - started < 60, result.stderr
    assert bk.report()[CELL]["error"] == "timed out after 4s"
    deadline = time.monotonic() + 15
    while subprocess.run(["pgrep", "-f", f"sleep {marker}"], check=False).returncode == 0:
        assert time.monotonic() < deadline, "the step's process outlived the build"
        time.sleep(0.5)
    assert not api.images(name=bk.repository)
    assert not list((bk.root / ".imagekit" / "buildx").glob("build-*"))  # no OCI tar left behind


# The real buildx, its metadata file rewritten after it wrote it: KEY set to HELD (the digest of an
# image the engine already holds).
LYING_BUILDX = """\
import json, os, subprocess, sys
argv = sys.argv[1:]
done = subprocess.run(["docker", *argv], check=False)
if done.returncode or "build" not in argv:
    sys.exit(done.returncode)
path = argv[argv.index("--metadata-file") + 1]
with open(path) as handle:
    said = json.load(handle)
said[os.environ["KEY"]] = os.environ["HELD"]
with open(path, "w") as handle:
    json.dump(said, handle)
"""


@pytest.mark.parametrize("key", ["containerimage.digest", "containerimage.config.digest"])
def test_metadata_naming_another_image_moves_no_tag(
    bk: Project, api: docker.APIClient, tmp_path: Path, key: str
) -> None:
    """Issue 45: before, the metadata's digest was tagged as buildx said: an image the engine held
    got the cell's tags, and the build exited 0. The honest path is every other test here."""
    held = str(api.inspect_image(BUSYBOX)["Id"])
    busybox_tags = tags_on(api, held)
    cli = tmp_path / "docker"
    cli.write_text(f"#!{sys.executable}\n{LYING_BUILDX}")
    cli.chmod(0o755)
    write_cells(bk, ["2.1"])
    lying = {"IMAGEKIT_DOCKER_CLI": str(cli), "HELD": held, "KEY": key}
    result = bk.build("--builder", "buildkit", env=lying)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    error = str(bk.report()[CELL]["error"])
    assert error.endswith("nothing was loaded or tagged"), error
    assert tags_on(api, held) == busybox_tags
    assert not api.images(name=bk.repository)
    assert not list((bk.root / ".imagekit" / "buildx").glob("build-*"))


def test_an_unknown_builder_and_a_classic_only_flag_are_one_line(bk: Project) -> None:
    write_cells(bk, ["2.1"])
    unknown = bk.build("--builder", "buildkit", "--buildx-builder", f"nosuch{RUN_ID}")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines()[-1].endswith("`docker buildx create` adds one)")
    zstd = bk.build("--compression", "zstd")
    assert zstd.returncode == 2 and "zstd applies to the BuildKit builder's" in zstd.stderr
    secret = bk.build("--secret", "x=/dev/null")
    assert secret.returncode == 2
    assert "--secret needs the BuildKit builder: add --builder buildkit" in secret.stderr


@pytest.fixture(scope="module")
def second_engine(api: docker.APIClient) -> Iterator[str]:
    """A second dockerd 26 of its own (empty store, empty BuildKit cache): Docker context
    imagekit-<name>. It holds only the busybox base, copied over; removed afterwards."""
    name = f"t{RUN_ID[:8]}"
    subprocess.run(["bash", ENGINE_SH, "second", name], check=True, capture_output=True, timeout=300)
    try:
        socket = f"unix:///run/imagekit-engine-{name}/docker.sock"
        other = docker.APIClient(base_url=socket, version="auto")
        other.load_image(b"".join(api.get_image(BUSYBOX)))
        other.close()
        yield name
    finally:
        subprocess.run(
            ["bash", ENGINE_SH, "stop-second", name], check=False, capture_output=True, timeout=300
        )


def registry_manifest(repository: str, reference: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/manifests/{reference}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def test_a_remote_buildkit_and_an_empty_runner_reuse_the_registry(
    bk: Project, api: docker.APIClient, second_engine: str
) -> None:
    repository = bk.repository.split("/", 1)[1]
    run = uuid.uuid4().hex[:8]  # one RUN_ID for both matrices: only LAST differs
    write_cells(bk, ["2.1"], steer={"*": {"LAST": "one"}}, publish={"registry": REGISTRY}, test_id=run)
    pushed = bk.build("--builder", "buildkit", "--push", "--compression", "zstd")
    assert pushed.returncode == 0, pushed.stderr
    staged = bk.report()[CELL]["staged"]
    manifest = registry_manifest(f"imagekit-test/{repository}", staged["digest"])
    assert {layer["mediaType"] for layer in manifest["layers"]} == {  # type: ignore[index]
        "application/vnd.oci.image.layer.v1.tar+zstd"
    }
    assert staged["digest"] == bk.report()[CELL]["image_id"]  # the staged digest is the one built

    # An empty runner (the second engine) with an unchanged cell: recognised from the registry,
    # nothing built, nothing pulled.
    runner = {"DOCKER_HOST": f"unix:///run/imagekit-engine-{second_engine}/docker.sock"}
    (bk.root / ".imagekit").rename(bk.root / ".imagekit-first")
    unchanged = bk.build("--builder", "buildkit", "--push", "--compression", "zstd", env=runner)
    assert unchanged.returncode == 0, unchanged.stderr
    assert bk.report()[CELL]["status"] == "skipped"
    assert bk.report()[CELL]["staged"]["digest"] == staged["digest"]
    other = docker.APIClient(base_url=runner["DOCKER_HOST"], version="auto")
    assert not other.images(name=f"{REGISTRY}/{bk.repository}")

    # Its last step changed: only that step runs, the earlier ones come from the registry cache.
    write_cells(bk, ["2.1"], steer={"*": {"LAST": "two"}}, publish={"registry": REGISTRY}, test_id=run)
    changed = bk.build("--builder", "buildkit", "--push", "--compression", "zstd", env=runner)
    assert changed.returncode == 0, changed.stderr
    log = Path(bk.root, bk.report()[CELL]["log"]).read_text()
    assert 'RUN --network=none echo "building' in log
    assert [line for line in log.splitlines() if 'RUN --network=none echo "building' in line][-1].endswith(
        ": CACHED"
    )
    assert [line for line in log.splitlines() if "echo two > /last" in line][-1].endswith("echo two > /last")
    # BuildKit pushed it itself (issue 46): the runner's engine holds no copy
    assert "staged: BuildKit pushed" in log and not other.images(name=f"{REGISTRY}/{bk.repository}")
    other.close()

    # The same build on the second engine's BuildKit, as a remote builder: loaded here.
    (bk.root / ".imagekit").rename(bk.root / ".imagekit-runner")
    remote = bk.build("--builder", "buildkit", "--buildx-builder", f"imagekit-{second_engine}", "--force")
    assert remote.returncode == 0, remote.stderr
    assert api.inspect_image(bk.report()[CELL]["image_id"])["Config"]["Labels"]["imagekit.cell"] == CELL
