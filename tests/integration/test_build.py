"""`imagekit build` against the real engine, on busybox-sized images rendered from a test template."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from testbed.matrix_projects import BUSYBOX, RUN_ID, TEST_LABEL, Project, busybox_base, write_cells
from testbed.registry_server import LocalRegistry
from tests.integration.conftest import SocketProxy


def tags_of(api: docker.APIClient, image_id: str) -> set[str]:
    return set(api.inspect_image(image_id)["RepoTags"] or ())


def has_tag(api: docker.APIClient, reference: str) -> bool:
    try:
        api.inspect_image(reference)
    except ImageNotFound:
        return False
    return True


def wait_for(process: object, text: str, seconds: float = 60) -> str:
    """Read the build's stderr until ``text`` appears; returns what was read."""
    seen = ""
    deadline = time.monotonic() + seconds
    stream = process.stderr  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never appeared; stderr so far:\n{seen}")


def containers_now(api: docker.APIClient) -> set[str]:
    return {c["Id"] for c in api.containers(all=True)}


def two_bases_one_built_here(project: Project) -> str:
    """Cells 2.1 and 2.2 on busybox and on a local base built from it; the local base's image."""
    (project.root / "local").mkdir()
    (project.root / "local" / "Dockerfile").write_text(f"FROM {BUSYBOX}\nRUN echo local > /etc/local-base\n")
    local_image = f"{project.repository}-base:dev"
    write_cells(
        project,
        ["2.1", "2.2"],
        base_axis=["busybox", "local"],
        bases={**busybox_base(), **busybox_base("local", local_image, build="local")},
    )
    return local_image


def test_build_skip_force_only_labels_tags(project: Project, api: docker.APIClient) -> None:
    local_image = two_bases_one_built_here(project)
    planned = json.loads(project.run("plan", "--matrix", "matrix.yaml", "--json").stdout)["cells"]

    first = project.build("--jobs", "2")
    assert first.returncode == 0, first.stderr
    report = project.report()
    assert report["base-local"]["status"] == "built"
    busybox_id = api.inspect_image(BUSYBOX)["Id"]
    local_id = api.inspect_image(local_image)["Id"]
    for cell in planned:
        result = report[cell["id"]]
        assert result["status"] == "built"
        image = api.inspect_image(result["image_id"])
        labels = image["Config"]["Labels"]
        assert labels["imagekit.input-digest"] == cell["input_digest"] == result["input_digest"]
        assert labels["imagekit.cell"] == cell["id"]
        assert labels[TEST_LABEL] == RUN_ID
        expected_tags = {f"{project.repository}:{tag}" for tag in cell["tags"]}
        assert set(result["tags"]) == expected_tags
        assert expected_tags <= tags_of(api, result["image_id"])
        base, base_id = (local_image, local_id) if cell["base"] == "local" else (BUSYBOX, busybox_id)
        # A local image has no repo digest on the overlay2 store (its id is recorded); the
        # containerd store gives it one, its name at its manifest digest, which is its id there.
        assert result["base_digest"] in (base_id, f"{base.rsplit(':', 1)[0]}@{base_id}")
        assert labels["imagekit.base-digest"] == result["base_digest"]
        assert result["size"] > 0
        assert Path(project.root, result["log"]).read_text().count("Step ") >= 3

    # An unchanged matrix starts no build: every cell is skipped and the engine creates no container.
    started_ns = time.time_ns()
    second = project.build("--jobs", "2")
    until = int(time.time()) + 1
    assert second.returncode == 0, second.stderr
    assert {r["status"] for r in project.report().values()} == {"skipped"}
    # Other sessions may use the shared engine: watch only containers of this matrix's images.
    ours = {
        layer["Id"]
        for r in report.values()
        for layer in api.history(r["image_id"])
        if layer["Id"] != "<missing>"
    }
    events = api.events(since=started_ns // 10**9, until=until, decode=True, filters={"type": "container"})
    assert [
        e for e in events if e["timeNano"] >= started_ns and e["Actor"]["Attributes"].get("image") in ours
    ] == []
    second_report = project.report()
    assert {k: v["image_id"] for k, v in second_report.items()} == {
        k: v["image_id"] for k, v in report.items()
    }
    assert all("Step " not in Path(project.root, r["log"]).read_text() for r in second_report.values())

    # --force rebuilds, --only narrows.
    forced = project.build("--force", "--only", "busybox-*")
    assert forced.returncode == 0, forced.stderr
    report = project.report()
    assert sorted(report) == sorted(c["id"] for c in planned if c["base"] == "busybox")
    assert {r["status"] for r in report.values()} == {"built"}


def test_failure_isolation_and_report(project: Project, api: docker.APIClient) -> None:
    write_cells(project, ["2.1", "2.2", "2.3"], steer={"2.2": {"FAIL": "1"}})
    result = project.build("--jobs", "2")
    assert result.returncode == 1
    report = project.report()
    failed = report["busybox-torch2.2.2-cpu-py3.11-devel"]
    assert failed["status"] == "failed"
    assert "returned a non-zero code: 3" in failed["error"]
    assert any("boom: this step fails on purpose" in line for line in failed["error_tail"])
    assert failed["image_id"] is None
    assert not has_tag(api, f"{project.repository}:busybox-2.2.2")
    assert report["busybox-torch2.1.2-cpu-py3.11-devel"]["status"] == "built"
    assert report["busybox-torch2.3.1-cpu-py3.11-devel"]["status"] == "built"
    assert "busybox-torch2.2.2-cpu-py3.11-devel" in result.stderr

    table = project.run("report")
    assert table.returncode == 1
    assert "failed" in table.stdout and "built" in table.stdout
    markdown = project.run("report", "--markdown").stdout
    assert markdown.startswith("### imagekit build")
    assert "boom: this step fails on purpose" in markdown


def test_fail_fast_cancels_the_rest(project: Project) -> None:
    write_cells(project, ["2.1", "2.2", "2.3"], steer={"2.1": {"FAIL": "1"}})
    result = project.build("--jobs", "1", "--fail-fast")
    assert result.returncode == 1
    statuses = {k: v["status"] for k, v in project.report().items()}
    assert statuses["busybox-torch2.1.2-cpu-py3.11-devel"] == "failed"
    assert set(statuses.values()) == {"failed", "cancelled"}


def test_parallel_builds_overlap(project: Project) -> None:
    write_cells(project, ["2.1", "2.2"], steer={"*": {"SLEEP": "3"}})
    result = project.build("--jobs", "2")
    assert result.returncode == 0, result.stderr
    events = [
        line.split(": ", 2)[1:]
        for line in result.stderr.splitlines()
        if line.startswith("imagekit: busybox-")
    ]
    order = [state.split()[0] for _, state in events]
    # Both builds were running before either finished.
    assert order[:2] == ["building", "building"], result.stderr


def test_local_bases_build_in_dependency_order(project: Project, api: docker.APIClient) -> None:
    inner = f"{project.repository}-inner:dev"
    outer = f"{project.repository}-outer:dev"
    for name, parent in (("inner", BUSYBOX), ("outer", inner)):
        (project.root / name).mkdir()
        (project.root / name / "Dockerfile").write_text(f"FROM {parent}\nRUN echo {name} >> /etc/layers\n")
    write_cells(
        project,
        base_axis=["outer", "inner"],
        bases={**busybox_base("outer", outer, build="outer"), **busybox_base("inner", inner, build="inner")},
    )
    result = project.build("--jobs", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.index("imagekit: base-inner: built " + inner) < lines.index("imagekit: base-outer: building")
    report = project.report()
    outer_cell = report["outer-torch2.1.2-cpu-py3.11-devel"]
    assert outer_cell["base_digest"] == api.inspect_image(outer)["Id"]
    # The cell has both local layers, in order.
    container = api.create_container(outer_cell["image_id"], "cat /etc/layers", labels={TEST_LABEL: RUN_ID})
    api.start(container)
    api.wait(container)
    assert api.logs(container).decode().split() == ["inner", "outer"]
    api.remove_container(container)


def test_ctrl_c_cancels_and_tags_nothing_unfinished(project: Project, api: docker.APIClient) -> None:
    write_cells(project, ["2.1", "2.2"], steer={"*": {"SLEEP": "60"}})
    before = containers_now(api)
    process = project.popen_build("--jobs", "1")
    wait_for(process, "busybox-torch2.1.2-cpu-py3.11-devel: building")
    time.sleep(1.5)  # let the RUN step's container start
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    statuses = {k: v["status"] for k, v in project.report().items()}
    assert set(statuses.values()) == {"cancelled"}
    assert not has_tag(api, f"{project.repository}:busybox-2.1.2")
    deadline = time.monotonic() + 15
    while containers_now(api) - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert containers_now(api) - before == set()


def test_timeout_fails_the_cell(project: Project, api: docker.APIClient) -> None:
    write_cells(project, steer={"*": {"SLEEP": "60"}})
    result = project.build("--timeout", "3")
    assert result.returncode == 1
    cell = project.report()["busybox-torch2.1.2-cpu-py3.11-devel"]
    assert cell["status"] == "failed"
    assert cell["error"] == "timed out after 3s"
    assert not has_tag(api, f"{project.repository}:busybox-2.1.2")


def test_mirror_mapping_and_pinned_base_digest(project: Project, api: docker.APIClient) -> None:
    # Its own registry (temporary storage, removed afterwards): nothing is left in a shared one.
    registry = LocalRegistry().start()
    mirror_repo = f"{registry.host}/imagekit-test-{RUN_ID}/busybox"
    try:
        api.tag(BUSYBOX, mirror_repo, "latest")
        for line in api.push(mirror_repo, tag="latest", stream=True, decode=True):
            assert "error" not in line, line
        api.remove_image(f"{mirror_repo}:latest")  # so the builder has to pull it from the mirror
        write_cells(
            project,
            bases=busybox_base(image="upstream.invalid/library/busybox:latest"),
            extra={"mirrors": {"upstream.invalid/library": f"{registry.host}/imagekit-test-{RUN_ID}"}},
        )
        result = project.build("--pin-base-digests")
        assert result.returncode == 0, result.stderr
        cell = project.report()["busybox-torch2.1.2-cpu-py3.11-devel"]
        assert cell["base_image"] == f"{mirror_repo}:latest"
        assert cell["base_digest"].startswith(f"{mirror_repo}@sha256:")
        labels = api.inspect_image(cell["image_id"])["Config"]["Labels"]
        # FROM by digest: the OCI labels split it, base.name the name, base.digest the digest
        name, _, digest = cell["base_digest"].partition("@")
        assert labels["org.opencontainers.image.base.name"] == name == mirror_repo
        assert labels["org.opencontainers.image.base.digest"] == digest
        assert labels["imagekit.base-digest"] == cell["base_digest"]
    finally:
        for reference in (f"{mirror_repo}:latest", cell_digest_ref(api, mirror_repo)):
            if reference:
                with contextlib.suppress(ImageNotFound):
                    api.remove_image(reference)
        registry.remove()


def cell_digest_ref(api: docker.APIClient, repository: str) -> str | None:
    for image in api.images(name=repository):
        for digest in image.get("RepoDigests") or ():
            return str(digest)
    return None


def test_unreachable_engine_is_exit_3(project: Project) -> None:
    write_cells(project)
    result = project.build(env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach the Docker engine at unix:///nonexistent/docker.sock" in lines[0]
    assert "scripts/engine.sh docker" in lines[0]
    assert not (project.root / ".imagekit" / "report.json").exists()


def test_engine_dying_mid_run_fails_the_rest(project: Project, api: docker.APIClient, tmp_path: Path) -> None:
    write_cells(project, ["2.1", "2.2", "2.3"], steer={"*": {"SLEEP": "60"}})
    proxy = SocketProxy(tmp_path / "engine.sock")
    try:
        process = project.popen_build("--jobs", "1", env={"DOCKER_HOST": f"unix://{proxy.path}"})
        wait_for(process, ": building")
        time.sleep(1.5)
    finally:
        proxy.kill()  # also when the build never got going: no proxy thread outlives the test
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stderr
    report = project.report()
    assert {r["status"] for r in report.values()} == {"failed"}
    assert all("stopped answering" in r["error"] for r in report.values()), report
    for torch in ("2.1.2", "2.2.2", "2.3.1"):
        assert not has_tag(api, f"{project.repository}:busybox-{torch}")


def test_a_second_build_in_the_same_directory_is_refused(project: Project) -> None:
    from imagekit.report.state import state_lock

    write_cells(project)
    with state_lock(project.root / ".imagekit"):
        result = project.build()
    assert result.returncode == 3
    assert "another `imagekit build`" in result.stderr
    assert not (project.root / ".imagekit" / "report.json").exists()


def test_a_nightly_where_nothing_changed_is_answered_from_the_record(
    project: Project, api: docker.APIClient
) -> None:
    """The second no-change run is answered from the record the first one left (imagekit.builds.no_change):
    no build and no container, the same images; a new day's dated tags land on the cell's image; a
    touched input, a missing tag or --force goes the full way again."""
    two_bases_one_built_here(project)
    record = project.root / ".imagekit" / "unchanged.json"
    assert project.build().returncode == 0
    assert not record.exists()  # it built: nothing to answer from
    full = project.build()
    assert full.returncode == 0, full.stderr
    assert record.exists() and "nothing changed" not in full.stderr
    built = project.report()

    started_ns = time.time_ns()
    answered = project.build()
    until = int(time.time()) + 1
    assert answered.returncode == 0, answered.stderr
    assert "4 cells: 4 skipped" in answered.stderr and "nothing changed since the run of" in answered.stderr
    assert project.report() == built  # the same records: only the run's start and duration moved
    events = api.events(since=started_ns // 10**9, until=until, decode=True, filters={"type": "container"})
    ours = {r["image_id"] for r in built.values()}
    assert [
        e for e in events if e["timeNano"] >= started_ns and e["Actor"]["Attributes"].get("image") in ours
    ] == []
    assert (
        json.loads(project.run("report", "--json").stdout)["counts"]["skipped"] == 4
    )  # its reader accepts it
    # answered before the command line is parsed: no typer, pydantic, Jinja or docker-py imported;
    # PyYAML reads what the matrix names (imagekit.builds.named_inputs: never taken from the record)
    imports = project.build(env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert "nothing changed" in imports.stderr, imports.stderr
    imported = {
        line.split("|")[-1].strip() for line in imports.stderr.splitlines() if line.startswith("import time")
    }
    assert {"imagekit.builds.no_change", "imagekit.builds.named_inputs", "yaml"} <= imported
    assert imported.isdisjoint({"typer", "pydantic", "jinja2", "docker", "requests"})

    # A new day: the answer puts that day's dated tag on each cell's image, as a full run would.
    tomorrow = {"SOURCE_DATE_EPOCH": str(int(time.time()) + 86_400)}
    day = time.strftime("%Y%m%d", time.gmtime(int(tomorrow["SOURCE_DATE_EPOCH"])))
    next_day = project.build(env=tomorrow)
    assert next_day.returncode == 0 and "nothing changed" in next_day.stderr, next_day.stderr
    for cell in (r for r in project.report().values() if r["kind"] == "cell"):
        dated = [t for t in cell["tags"] if t.endswith(f"-{day}")]
        assert len(dated) == 1 and dated[0] in tags_of(api, str(cell["image_id"]))
        assert cell["built_on"] == f"{day[:4]}-{day[4:6]}-{day[6:]}"
    # ... the same images and tags the full run finds that day
    answered_report = {k: (v["image_id"], v["tags"], v["built_on"]) for k, v in project.report().items()}
    full_next_day = project.build("--jobs", "2", env=tomorrow)  # another command line: not answered
    assert full_next_day.returncode == 0 and "nothing changed" not in full_next_day.stderr
    assert {
        k: (v["image_id"], v["tags"], v["built_on"]) for k, v in project.report().items()
    } == answered_report

    # A touched template (same bytes, new mtime): the full run, which skips every cell again.
    template = project.root / "templates" / "Dockerfile.j2"
    template.write_text(template.read_text())
    touched = project.build()
    assert touched.returncode == 0 and "nothing changed" not in touched.stderr, touched.stderr
    assert {r["status"] for r in project.report().values()} == {"skipped"}
    # A tag taken off an image: the full run puts it back.
    readable = next(str(r["tags"][0]) for r in project.report().values() if r["kind"] == "cell")
    assert project.build().returncode == 0  # answered: the record is current again
    api.remove_image(readable)  # the image keeps its other tags
    repaired = project.build()
    assert repaired.returncode == 0 and "nothing changed" not in repaired.stderr, repaired.stderr
    assert has_tag(api, readable)
    # --force is never answered.
    forced = project.build("--force", "--only", "busybox-*")
    assert forced.returncode == 0 and "nothing changed" not in forced.stderr
    assert not record.exists()
