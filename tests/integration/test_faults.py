"""Fault injection across the pipeline: each fault is injected for real, against the real
engine or registry, and each test checks that imagekit kept working and lost nothing.

What "lost nothing" means here, every time: no container of ours is left on the engine, no tag
moved to an image that did not finish, the report is whole JSON that says what happened, and the
lock file is there and free. RELIABILITY.md tabulates the faults; keep the two in step.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import ImageNotFound

from imagekit.core.naming import VERIFY_RUN_LABEL as VERIFY_LABEL
from imagekit.report.state import state_lock
from testbed.matrix_projects import (
    BUSYBOX,
    CHECK_TEMPLATE,
    RUN_ID,
    TEMPLATE,
    TEST_LABEL,
    Project,
    busybox_base,
    write_cells,
)
from testbed.private_engine import private_engine

CELL = "busybox-torch{}-cpu-py3.11-devel"
C21, C22, C23 = CELL.format("2.1.2"), CELL.format("2.2.2"), CELL.format("2.3.1")

# -- helpers ------------------------------------------------------------------------------------------


def has_tag(api: docker.APIClient, reference: str) -> bool:
    try:
        api.inspect_image(reference)
    except ImageNotFound:
        return False
    return True


def image_of(api: docker.APIClient, reference: str) -> str | None:
    try:
        return str(api.inspect_image(reference)["Id"])
    except ImageNotFound:
        return None


def wait_for(process: subprocess.Popen[str], text: str, seconds: float = 60) -> str:
    """Read the process's stderr until ``text`` appears; returns what was read."""
    seen = ""
    deadline = time.monotonic() + seconds
    assert process.stderr is not None
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never appeared; stderr so far:\n{seen}")


def popen(project: Project, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=project.root,
        env={**os.environ, **(env or {})},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def build_args(*args: str) -> tuple[str, ...]:
    return ("build", "--matrix", "matrix.yaml", "--label", f"{TEST_LABEL}={RUN_ID}", *args)


def assert_lock_free(state_dir: Path) -> None:
    assert (state_dir / "lock").is_file(), "the lock file is gone"
    with state_lock(state_dir):  # raises EnvironmentProblem while someone still holds it
        pass


def read_report(state_dir: Path) -> dict[str, dict[str, object]]:
    data = json.loads((state_dir / "report.json").read_text())
    return {entry["id"]: entry for entry in data["cells"] + data["bases"]}


def no_temporaries(directory: Path) -> list[Path]:
    return list(directory.rglob(".*.tmp"))


# -- the engine stops in the middle of a build, comes back, the next run resumes -----------------------


def test_engine_killed_mid_build_then_the_next_run_builds_only_what_is_missing(project: Project) -> None:
    write_cells(project, ["2.1", "2.2", "2.3"], steer={"2.2": {"SLEEP": "10"}, "2.3": {"SLEEP": "10"}})
    root = Path(tempfile.mkdtemp(prefix="ikf-", dir="/tmp"))
    try:
        with private_engine(root / "e", (BUSYBOX,)) as engine:
            env = {"DOCKER_HOST": engine.host}
            process = popen(project, *build_args("--jobs", "2"), env=env)
            seen = wait_for(process, f"{C21}: built")
            if f"{C22}: building" not in seen and f"{C23}: building" not in seen:
                wait_for(process, ": building")
            time.sleep(1.5)  # a RUN step of a sleeping cell is running now
            engine.kill()
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 1, stderr
            assert "Traceback" not in stderr
            first = project.report()
            assert first[C21]["status"] == "built"
            for cell in (C22, C23):
                assert first[cell]["status"] == "failed"
                assert "stopped answering" in str(first[cell]["error"])
            assert_lock_free(project.root / ".imagekit")

            engine.start()  # the engine comes back with its data root
            api = engine.client()
            assert image_of(api, f"{project.repository}:busybox-2.1.2") == first[C21]["image_id"]
            for torch in ("2.2.2", "2.3.1"):
                assert not has_tag(api, f"{project.repository}:busybox-{torch}")

            again = project.build("--jobs", "2", env=env)
            assert again.returncode == 0, again.stderr
            assert "a crash left" in again.stderr, again.stderr  # the killed steps' containers, swept
            second = project.report()
            assert second[C21]["status"] == "skipped"
            assert second[C21]["image_id"] == first[C21]["image_id"]
            assert second[C22]["status"] == second[C23]["status"] == "built"
            for cell in (C21, C22, C23):
                repo_tags = api.inspect_image(second[cell]["image_id"])["RepoTags"]
                assert set(second[cell]["tags"]) <= set(repo_tags)
            running = api.containers(all=True)
            api.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # The killed step's container is the engine's own: it is gone after the restart (dockerd
    # removes build containers it finds on start), and imagekit created none of its own.
    assert running == [], running


# -- verification: a hanging check in a matrix; the check container's confinement ----------------------


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory, busybox: str) -> Project:
    """Two cells built once: 2.1's check passes, 2.2's check hangs (HANG=1)."""
    root = tmp_path_factory.mktemp("checked")
    (root / "templates").mkdir()
    (root / "templates" / "Dockerfile.j2").write_text(CHECK_TEMPLATE)
    project = Project(root, f"imagekit-test/faults-{RUN_ID}-{uuid.uuid4().hex[:6]}")
    write_cells(project, ["2.1", "2.2"], steer={"2.2": {"HANG": "1"}})
    done = project.build()
    assert done.returncode == 0, done.stderr
    return project


def copy_state(project: Project, tmp_path: Path) -> Path:
    """A private copy of the built project's state dir, so each test writes its own report."""
    state = tmp_path / "state"
    shutil.copytree(project.root / ".imagekit", state)
    return state


def our_images(state_dir: Path) -> set[str]:
    return {str(r["image_id"]) for r in read_report(state_dir).values() if r.get("image_id")}


def check_containers(api: docker.APIClient, images: set[str]) -> list[dict[str, object]]:
    return [
        c
        for c in api.containers(all=True, filters={"label": VERIFY_LABEL})
        if c.get("ImageID") in images or c.get("Image") in images
    ]


def test_a_hanging_check_in_a_matrix_is_killed_and_the_other_cell_verified(
    checked: Project, api: docker.APIClient, tmp_path: Path
) -> None:
    state = copy_state(checked, tmp_path)
    images = our_images(state)
    started = time.monotonic()
    process = popen(
        checked,
        *("verify", "--matrix", "matrix.yaml", "--gpus", "none", "--verify-timeout", "6"),
        *("--state-dir", str(state), "--memory", "256m"),
    )
    # The hanging cell's container, inspected live: the confinement is the engine's, not ours to trust.
    deadline = time.monotonic() + 30
    hanging: list[dict[str, object]] = []
    while not hanging:
        assert time.monotonic() < deadline, "the hanging check container never started"
        hanging = [c for c in check_containers(api, images) if c["State"] == "running"]
        hanging = [c for c in hanging if dict(c["Labels"]).get("imagekit.target") == C22]  # type: ignore[call-overload]
        time.sleep(0.2)
    inspected = api.inspect_container(hanging[0]["Id"])
    host = inspected["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert inspected["Config"].get("NetworkDisabled") is True
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True  # the image has its check script: nothing to inject
    assert host["Memory"] == 256 * 2**20 and host["MemorySwap"] == host["Memory"]
    assert 0 < host["PidsLimit"] <= 4096
    assert host["DeviceRequests"] in (None, [])  # --gpus none asks for no device
    assert inspected["Config"]["Env"] and "NVIDIA_VISIBLE_DEVICES=void" in inspected["Config"]["Env"]

    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stdout + stderr
    assert time.monotonic() - started < 40
    assert "Traceback" not in stderr
    report = read_report(state)
    fine, hung = report[C21]["verification"], report[C22]["verification"]
    assert isinstance(fine, dict) and isinstance(hung, dict)
    assert fine["verdict"] == "checked" and fine["checks"][0]["name"] == "stand-in"
    assert hung["verdict"] == "failed" and "timed out after 6s" in hung["error"]
    assert check_containers(api, images) == []
    assert_lock_free(state)


# -- SIGINT and SIGTERM at each stage ------------------------------------------------------------------

SIGNALS = pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)


def ended_by_signal(process: subprocess.Popen[str], signum: int, code: int, word: str) -> str:
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stdout + stderr
    assert "Traceback" not in stderr, stderr
    # At most one line of error, no traceback; the exit code tells SIGINT (130) from SIGTERM (143).
    assert stderr.count("imagekit: error:") <= 1, stderr
    return stderr


@SIGNALS
def test_signal_during_render_keeps_the_old_files(
    project: Project, signum: int, code: int, word: str
) -> None:
    write_cells(project, ["2.1", "2.2"])
    first = project.run("render", "--matrix", "matrix.yaml", "--out", "out")
    assert first.returncode == 0, first.stderr
    out = project.root / "out"
    before = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    assert len(before) == 2
    # The template changes (every file would change) and takes long to render: a slow render.
    # (nested: a user template renders in the sandbox, whose range() stops at 100,000 items)
    slow = (
        TEMPLATE
        + "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}# changed\n"
    )
    (project.root / "templates" / "Dockerfile.j2").write_text(slow)
    process = popen(project, "render", "--matrix", "matrix.yaml", "--out", "out")
    time.sleep(3)  # imports and planning are done; the template loop is running
    assert process.poll() is None, process.communicate()
    ended_by_signal(process, signum, code, word)
    assert {p: p.read_text() for p in out.rglob("*") if p.is_file()} == before
    assert no_temporaries(project.root) == []
    assert not (project.root / ".imagekit").exists()


def step_containers_of(api: docker.APIClient, before: set[str], test_id: str) -> set[str]:
    """Containers created since ``before`` whose environment holds this test's RUN_ID."""
    found = set()
    for container in api.containers(all=True):
        if container["Id"] in before:
            continue
        with contextlib.suppress(docker.errors.NotFound):
            env = api.inspect_container(container["Id"])["Config"].get("Env") or []
            if f"RUN_ID={test_id}" in env:
                found.add(str(container["Id"]))
    return found


@SIGNALS
def test_signal_during_build_moves_no_tag_and_leaves_no_container(
    project: Project, api: docker.APIClient, signum: int, code: int, word: str
) -> None:
    test_id = uuid.uuid4().hex[:8]
    write_cells(project, test_id=test_id)
    first = project.build()
    assert first.returncode == 0, first.stderr
    tag = f"{project.repository}:busybox-2.1.2"
    old_image = image_of(api, tag)
    assert old_image == project.report()[C21]["image_id"]

    # The same cell, changed (so it must be rebuilt), and slow.
    write_cells(project, steer={"*": {"SLEEP": "60", "CHANGED": "1"}}, test_id=test_id)
    before = {str(c["Id"]) for c in api.containers(all=True)}
    process = project.popen_build()
    wait_for(process, f"{C21}: building")
    # The signal must land while the RUN step's container runs (it sleeps 60 s). It starts a moment
    # after "building", later on a busy machine (the fast and slow tiers run beside this one):
    # polled for, never a fixed sleep.
    deadline = time.monotonic() + 45
    while not step_containers_of(api, before, test_id):
        assert time.monotonic() < deadline, "the slow step never started"
        time.sleep(0.2)
    ended_by_signal(process, signum, code, word)

    assert image_of(api, tag) == old_image, "the tag moved to an unfinished image"
    report = project.report()
    assert report[C21]["status"] == "cancelled" and "interrupted" in str(report[C21]["error"])
    assert_lock_free(project.root / ".imagekit")
    deadline = time.monotonic() + 15
    while step_containers_of(api, before, test_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert step_containers_of(api, before, test_id) == set()


@SIGNALS
def test_signal_during_verify_removes_the_check_container_and_keeps_the_verdicts(
    checked: Project, api: docker.APIClient, tmp_path: Path, signum: int, code: int, word: str
) -> None:
    state = copy_state(checked, tmp_path)
    images = our_images(state)
    process = popen(
        checked,
        *("verify", "--matrix", "matrix.yaml", "--gpus", "none", "--verify-timeout", "120"),
        *("--state-dir", str(state)),
    )
    deadline = time.monotonic() + 30
    # the signal must land while the hanging cell's check runs, after the other cell's finished
    while not [
        c
        for c in check_containers(api, images)
        if c["State"] == "running" and (c.get("Labels") or {}).get("imagekit.target") == C22  # type: ignore[union-attr]
    ]:
        assert time.monotonic() < deadline, "the hanging check container never started"
        time.sleep(0.2)
    ended_by_signal(process, signum, code, word)
    assert check_containers(api, images) == []
    report = read_report(state)  # whole JSON
    fine = report[C21]["verification"]
    assert isinstance(fine, dict) and fine["verdict"] == "checked"  # verified before the signal
    assert report[C22]["verification"] is None  # never verified: recorded as nothing, not a pass
    assert report[C22]["status"] == "built"
    assert_lock_free(state)


# -- two imagekit processes on the same working directory ----------------------------------------------


def test_two_processes_on_one_working_directory(project: Project) -> None:
    write_cells(project, steer={"*": {"SLEEP": "6"}})
    first = project.popen_build()
    wait_for(first, f"{C21}: building")
    second = project.build()
    verify = project.run("verify", "--matrix", "matrix.yaml", "--gpus", "none")
    for refused in (second, verify):
        assert refused.returncode == 3, refused.stderr
        assert "holds" in refused.stderr and "lock" in refused.stderr
        assert "Traceback" not in refused.stderr
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert project.report()[C21]["status"] == "built"  # the refused runs wrote nothing over it
    # Two renders of one matrix into one directory at once: both finish, the files are whole.
    renders = [popen(project, "render", "--matrix", "matrix.yaml", "--out", "out") for _ in range(2)]
    for render in renders:
        _, err = render.communicate(timeout=60)
        assert render.returncode == 0, err
    check = project.run("render", "--matrix", "matrix.yaml", "--out", "out", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert no_temporaries(project.root) == []


# -- the disk under the report directory is full, or read-only -----------------------------------------


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (root ignores permissions, not a full or ro mount)."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> None:
    """Write until the filesystem refuses: pages first, then the last bytes."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_report_disk_full_or_read_only_is_a_clear_error_and_keeps_the_old_report(
    project: Project, fault: str
) -> None:
    write_cells(project)
    state = project.root / ".imagekit"
    with small_filesystem(state):
        first = project.build()
        assert first.returncode == 0, first.stderr
        old = (state / "report.json").read_text()
        if fault == "full":
            fill(state)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        for args in (build_args("--force"), ("verify", "--matrix", "matrix.yaml", "--gpus", "none")):
            done = project.run(*args)
            assert done.returncode == 3, (args, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr, done.stderr
            errors = [line for line in done.stderr.splitlines() if line.startswith("imagekit: error:")]
            assert len(errors) == 1, done.stderr
            expected = "No space left on device" if fault == "full" else "Read-only file system"
            assert expected in errors[0] and ".imagekit" in errors[0], errors[0]
            assert (state / "report.json").read_text() == old
            assert no_temporaries(state) == []


# -- hostile input: a build context that links outside itself -----------------------------------------


@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_context_symlink_pointing_outside_is_refused(
    project: Project, api: docker.APIClient, link: str
) -> None:
    context = project.root / "local"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {BUSYBOX}\nCOPY . /ctx\n")
    if link == "file":
        (context / "passwd").symlink_to("/etc/passwd")
    else:
        (context / "etc").symlink_to("/etc", target_is_directory=True)
    image = f"{project.repository}-base:dev"
    write_cells(project, bases=busybox_base("local", image, build="local"))
    done = project.build()  # the context is only read (and refused) by the build; render never ships it
    assert done.returncode == 2, done.stderr
    assert "links outside" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("imagekit: error:") == 1
    assert not has_tag(api, image)


# -- publish: the registry goes down in the middle of a push --------------------------------------------


def test_registry_down_in_the_middle_of_a_push(project: Project, api: docker.APIClient) -> None:
    from testbed.registry_server import FlakyProxy, LocalRegistry

    registry = LocalRegistry().start()
    proxy = FlakyProxy(registry.host)
    try:
        write_cells(project, publish={"policy": "built"})
        assert project.build().returncode == 0
        report_before = (project.root / ".imagekit" / "report.json").read_text()

        def registry_dies(method: str, url: str) -> bool:
            if "/blobs/uploads/" in url:  # the first layer upload: the registry goes away
                registry.stop()
            return False

        proxy.fail(registry_dies)
        done = project.run("publish", "--matrix", "matrix.yaml", "--registry", proxy.host, "--retries", "2")
        assert done.returncode in (1, 3), done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.count("imagekit: error:") <= 1
        assert not (project.root / "images.lock.json").exists()  # nothing was published
        assert (project.root / ".imagekit" / "report.json").read_text() == report_before
        registry.start()  # back, with what it had stored: no tag of the cell was written
        assert [t for t in registry.tags(project.repository) if not t.startswith("staging-")] == []
        staged = [t for i in api.images() for t in i.get("RepoTags") or () if t.startswith(proxy.host)]
        assert staged == [], "a staging tag was left in the engine"
    finally:
        proxy.close()
        registry.remove()
