"""Separate runners, as the nightly runs them: no two jobs share a Docker engine.

Two private dockerd engines with their own data roots stand for two GPU runners (engine A never
sees engine B's images, nor B A's), one docker-registry on 127.0.0.1 (behind a relay that can
answer 500 on purpose) for the registry. Runner A builds and stages (`build --push`); runner B
pulls by digest and verifies (`verify --pull`) from A's report alone; the publish job merges the
reports and promotes with DOCKER_HOST pointing nowhere. Then the registry faults: down, 500s, and a
digest mismatch planted in a report, each ending with nothing half-promoted.

The engines and the registry are processes, not containers: testcontainers has nothing to start
here (its containers would need an image pulled from a registry, and a network).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from imagekit.registry.manifest import ACCEPT
from testbed.matrix_projects import BUSYBOX, CHECK_TEMPLATE, RUN_ID, Project, write_cells
from testbed.private_engine import PrivateEngine, private_engine
from testbed.registry_server import FlakyProxy, LocalRegistry
from tests.integration.conftest import venv_tool_wheels

NOWHERE = "unix:///nonexistent/docker.sock"
CELL = "busybox-torch{}-cpu-py3.11-devel"
GOOD = (CELL.format("2.1.2"), CELL.format("2.2.2"))
BAD = CELL.format("2.3.1")  # its check fails on runner B
VERIFY_PULLED = ("verify", "--matrix", "matrix.yaml", "--pull", "--gpus", "none")


@dataclass(frozen=True)
class Runners:
    a: PrivateEngine
    b: PrivateEngine
    registry: LocalRegistry
    proxy: FlakyProxy  # what every runner and the publish job talk to
    project: Project
    staging: str  # the staging repository (another repository than the final one)
    a_state: Path  # runner A's state dir (build --push)
    b_state: Path  # runner B's state dir (A's report, then verify --pull)
    merged: Path  # the publish job's state dir (merge-reports of both)


def digest_of(host: str, repository: str, tag: str) -> str | None:
    response = requests.head(
        f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": ACCEPT}, timeout=10
    )
    return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None


def tag_map(registry: LocalRegistry, repository: str) -> dict[str, str | None]:
    return {tag: digest_of(registry.host, repository, tag) for tag in registry.tags(repository)}


def cells_of(state: Path) -> dict[str, dict[str, object]]:
    data = json.loads((state / "report.json").read_text())
    return {entry["id"]: entry for entry in data["cells"]}


def staged_digest(state: Path, cell: str) -> str:
    staged = cells_of(state)[cell]["staged"]
    assert isinstance(staged, dict)
    return str(staged["digest"])


def image_ids(engine: PrivateEngine) -> set[str]:
    client = engine.client()
    try:
        return {str(i["Id"]) for i in client.images(all=True)}
    finally:
        client.close()


def writes(proxy: FlakyProxy, since: int) -> list[tuple[str, str, int]]:
    """The requests after ``since`` that would change the registry (uploads, manifest PUTs)."""
    with proxy.lock:
        seen = proxy.seen[since:]
    return [s for s in seen if s[0] in ("PUT", "POST", "PATCH", "DELETE")]


def run(project: Project, *args: str, host: str, state: Path | None = None, **kw: str) -> tuple[int, str]:
    extra = ("--state-dir", str(state)) if state is not None else ()
    done = project.run(*args, *extra, env={"DOCKER_HOST": host, **kw})
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory, busybox: str) -> Iterator[Runners]:
    root = tmp_path_factory.mktemp("runners")
    (root / "templates").mkdir()
    (root / "templates" / "Dockerfile.j2").write_text(CHECK_TEMPLATE)
    repository = f"imagekit-test/runners-{RUN_ID}-{uuid.uuid4().hex[:6]}"
    project = Project(root, repository)
    registry = LocalRegistry().start()
    proxy = FlakyProxy(registry.host)
    engines = Path(tempfile.mkdtemp(prefix="ikr-", dir="/tmp"))  # unix sockets want short paths
    try:
        with (
            private_engine(engines / "a", (BUSYBOX,)) as a,
            private_engine(engines / "b", (BUSYBOX,)) as b,
        ):
            staging = f"{repository}-staging"
            write_cells(
                project,
                ["2.1", "2.2", "2.3"],
                steer={"2.3": {"CHECK_FAIL": "1"}},
                publish={"registry": proxy.host, "policy": "checked", "staging": {"repository": staging}},
            )
            yield Runners(
                a, b, registry, proxy, project, staging, root / "a", root / "b", root / "published" / "state"
            )
    finally:
        proxy.close()
        registry.remove()
        shutil.rmtree(engines, ignore_errors=True)


def test_separate_runners_stage_verify_and_promote_by_digest(runners: Runners) -> None:
    r, project = runners, runners.project
    # Runner A: build and stage. Nothing but staging tags reaches the registry.
    code, out = run(project, "build", "--matrix", "matrix.yaml", "--push", host=r.a.host, state=r.a_state)
    assert code == 0, out
    built = cells_of(r.a_state)
    assert sorted(built) == sorted((*GOOD, BAD))
    for cell, entry in built.items():
        staged = entry["staged"]
        assert isinstance(staged, dict), cell
        assert staged["registry"] == r.proxy.host and staged["repository"] == r.staging
        assert staged["tag"] == f"staging-{str(entry['input_digest'])[:12]}"
        assert digest_of(r.registry.host, r.staging, str(staged["tag"])) == staged["digest"]
    assert r.registry.tags(project.repository) == []  # no final tag, not even the repository

    # Runner B: an engine that never saw A's images verifies A's staged digests, pulled by digest.
    ours = {str(e["image_id"]) for e in built.values()}
    assert not ours & image_ids(r.b)
    shutil.copytree(r.a_state, r.b_state)
    code, out = run(project, *VERIFY_PULLED, host=r.b.host, state=r.b_state)
    assert code == 1, out  # BAD's check fails here
    assert "2 checked without GPU, 1 failed" in out
    verified = cells_of(r.b_state)
    for cell in GOOD:
        verification = verified[cell]["verification"]
        assert isinstance(verification, dict)
        assert verification["verdict"] == "checked"
        assert verification["image_digest"] == staged_digest(r.a_state, cell)
        assert verification["image"] == f"{r.proxy.host}/{r.staging}@{staged_digest(r.a_state, cell)}"
    assert ours <= image_ids(r.b)  # pulled by digest: the very images A built (config digests)

    # The publish job: no engine at all. It merges both runners' reports and promotes.
    code, out = run(project, "merge-reports", str(r.a_state), str(r.b_state), host=NOWHERE, state=r.merged)
    assert code == 0, out
    lock = r.merged.parent / "images.lock.json"
    publish = ("publish", "--matrix", "matrix.yaml", "--lock", str(lock))
    code, out = run(project, *publish, host=NOWHERE, state=r.merged)
    assert code == 1, out  # the failed cell is refused, the others promoted
    assert f"imagekit: refused: {BAD}: it failed verification" in out
    assert "Docker engine" not in out
    entries = json.loads(lock.read_text())["images"]
    assert sorted(entries) == sorted(GOOD)
    final = tag_map(r.registry, project.repository)
    for cell in GOOD:
        entry = entries[cell]
        digest = staged_digest(r.a_state, cell)
        assert entry["digest"] == digest
        assert entry["tags"] and all(final[tag] == digest for tag in entry["tags"])
        assert all(tag.endswith("-checked") for tag in entry["tags"])
        provenance = entry["provenance"]
        assert provenance["digest_chain"] == {
            "staged": digest,
            "verified": digest,
            "promoted": digest,
            "equal": True,
        }
        assert provenance["gpus"] == [] and provenance["driver"] is None and provenance["cuda_driver"] is None
        assert "without a visible GPU" in provenance["note"] and provenance["checks_passed"] == 1
        assert entry["expect"]["python"] == "3.11"  # labels read from the config blob, not an engine
    bad_tag = f"busybox-{BAD.split('torch')[1].split('-')[0]}"
    assert not [tag for tag in final if tag.startswith(bad_tag)]

    # A second run changes nothing: nothing pushed, pulled, or re-tagged to another digest.
    before = (tag_map(r.registry, r.staging), final, json.loads(lock.read_text()))
    mark = len(r.proxy.seen)
    code, out = run(project, "build", "--matrix", "matrix.yaml", "--push", host=r.a.host, state=r.a_state)
    assert code == 0, out
    assert {c: e["status"] for c, e in cells_of(r.a_state).items()} == dict.fromkeys((*GOOD, BAD), "skipped")
    assert writes(r.proxy, mark) == [], "build --push wrote to the registry for unchanged cells"
    for cell in (*GOOD, BAD):
        log = (r.a_state / "logs" / f"{cell}.log").read_text()
        assert "not pushed again" in log, log
    code, out = run(project, *VERIFY_PULLED, host=r.b.host, state=r.b_state)
    assert code == 1, out
    shutil.rmtree(r.merged)
    code, out = run(project, "merge-reports", str(r.a_state), str(r.b_state), host=NOWHERE, state=r.merged)
    assert code == 0, out
    code, out = run(project, *publish, host=NOWHERE, state=r.merged)
    assert code == 1, out
    after = json.loads(lock.read_text())
    assert tag_map(r.registry, r.staging) == before[0]
    assert tag_map(r.registry, project.repository) == before[1]
    assert {c: e["digest"] for c, e in after["images"].items()} == {
        c: e["digest"] for c, e in before[2]["images"].items()
    }
    uploads = [s for s in writes(r.proxy, mark) if "/blobs/uploads/" in s[1] and "mount=" not in s[1]]
    assert uploads == [], "a blob was uploaded again"


def test_merge_reports_refuses_runners_that_disagree_about_a_digest(runners: Runners, tmp_path: Path) -> None:
    r = runners
    if not (r.b_state / "report.json").exists():
        pytest.skip("needs the separate-runners run first")
    other = tmp_path / "other"
    shutil.copytree(r.b_state, other)
    document = json.loads((other / "report.json").read_text())
    for entry in document["cells"]:
        if entry["id"] == GOOD[0]:
            entry["staged"]["digest"] = "sha256:" + "0" * 64
    (other / "report.json").write_text(json.dumps(document))
    code, out = run(
        r.project, "merge-reports", str(r.b_state), str(other), host=NOWHERE, state=tmp_path / "m"
    )
    assert code == 2, out
    assert f"disagree about the staged digest of {GOOD[0]}" in out
    assert str(r.b_state) in out and str(other) in out
    assert not (tmp_path / "m" / "report.json").exists()


# -- registry faults: nothing half-promoted -----------------------------------------------------------


def fresh_target(runners: Runners, tmp_path: Path) -> tuple[Project, Path, Path, str]:
    """The publish job's state, promoting into a repository of its own (the staged images and
    their input digests are unchanged: the final repository is not an input of an image)."""
    r = runners
    if not (r.merged / "report.json").exists():
        pytest.skip("needs the separate-runners run first")
    target = f"{r.project.repository}-{uuid.uuid4().hex[:6]}"
    shutil.copytree(r.project.root / "templates", tmp_path / "templates")
    document = yaml.safe_load((r.project.root / "matrix.yaml").read_text())
    document["publish"]["repository"] = target
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    state = tmp_path / "state"
    shutil.copytree(r.merged, state)
    return Project(tmp_path, target), state, tmp_path / "images.lock.json", target


def assert_whole_or_nothing(registry: LocalRegistry, target: str, lock: Path) -> dict[str, object]:
    """Each cell in the lock has every tag at its digest; no other cell has its readable tag."""
    entries: dict[str, dict[str, object]] = json.loads(lock.read_text())["images"] if lock.exists() else {}
    final = tag_map(registry, target)
    for entry in entries.values():
        assert all(final.get(str(tag)) == entry["digest"] for tag in entry["tags"])  # type: ignore[union-attr]
    readable = {f"busybox-{c.split('torch')[1].split('-')[0]}-checked" for c in (*GOOD, BAD)}
    locked = {str(e["tags"][0]) for e in entries.values()}  # type: ignore[index]
    assert {t for t in final if t in readable} <= locked
    return entries


def test_registry_down_promotes_nothing(runners: Runners, tmp_path: Path) -> None:
    project, state, lock, target = fresh_target(runners, tmp_path)
    runners.registry.stop()
    try:
        code, out = run(project, "publish", "--matrix", "matrix.yaml", "--lock", str(lock), "--retries", "2",
                        host=NOWHERE, state=state)  # fmt: skip
    finally:
        runners.registry.start()
    assert code == 3, out
    assert out.count("imagekit: error:") == 1 and "Docker engine" not in out
    assert not lock.exists()
    assert runners.registry.tags(target) == []


def test_registry_500s_leave_every_cell_whole_or_untouched(runners: Runners, tmp_path: Path) -> None:
    project, state, lock, target = fresh_target(runners, tmp_path)
    proxy = runners.proxy
    proxy.status = 500
    publish = ("publish", "--matrix", "matrix.yaml", "--lock", str(lock), "--retries", "2")
    try:
        # Every final tag answered with 500: exit 3, nothing final written.
        proxy.fail(lambda method, path: method == "PUT" and f"/v2/{target}/manifests/" in path)
        code, out = run(project, *publish, host=NOWHERE, state=state)
        assert code == 3, out
        assert "kept answering HTTP 500" in out
        assert not lock.exists() and runners.registry.tags(target) in ([], None)
        # Then only the second cell's readable tag fails: the first cell is whole and locked,
        # the second has no readable tag and no lock entry.
        with proxy.lock:
            proxy.rules.clear()
        second = f"busybox-{GOOD[1].split('torch')[1].split('-')[0]}-checked"
        proxy.fail(lambda method, path: method == "PUT" and path.endswith(f"/v2/{target}/manifests/{second}"))
        code, out = run(project, *publish, host=NOWHERE, state=state)
        assert code == 3, out
        entries = assert_whole_or_nothing(runners.registry, target, lock)
        assert sorted(entries) == [GOOD[0]]
        assert second not in runners.registry.tags(target)
    finally:
        with proxy.lock:
            proxy.rules.clear()
        proxy.status = 503
    # The registry healthy again: a rerun finishes the job, with the same digests.
    code, out = run(project, *publish, host=NOWHERE, state=state)
    assert code == 1, out  # BAD stays refused
    entries = assert_whole_or_nothing(runners.registry, target, lock)
    assert sorted(entries) == sorted(GOOD)


@pytest.mark.parametrize("plant", ["verified-differs", "unknown-manifest"])
def test_a_planted_digest_mismatch_is_refused_and_the_rest_promoted(
    runners: Runners, tmp_path: Path, plant: str
) -> None:
    project, state, lock, target = fresh_target(runners, tmp_path)
    document = json.loads((state / "report.json").read_text())
    bogus = "sha256:" + "e" * 64
    (entry,) = [e for e in document["cells"] if e["id"] == GOOD[0]]
    if plant == "verified-differs":  # verified one digest, staged another
        entry["verification"]["image_digest"] = bogus
        expected = f"{GOOD[0]}: its verified digest ({bogus}) is not its staged digest"
    else:  # the report agrees with itself, on a manifest the registry never had
        entry["staged"]["digest"] = entry["verification"]["image_digest"] = bogus
        entry["verification"]["image"] = f"{runners.proxy.host}/{runners.staging}@{bogus}"
        expected = "nothing promoted for this cell"
    (state / "report.json").write_text(json.dumps(document))
    code, out = run(
        project, "publish", "--matrix", "matrix.yaml", "--lock", str(lock), host=NOWHERE, state=state
    )
    assert code == 1, out
    assert f"imagekit: refused: {GOOD[0]}: " in out and expected in out, out
    entries = assert_whole_or_nothing(runners.registry, target, lock)
    assert sorted(entries) == [GOOD[1]]
    assert not [t for t in runners.registry.tags(target) if t.startswith("busybox-2.1.2")]


# -- layer reuse on an empty runner --------------------------------------------------------------------

FAKE_TORCH = {
    "torch/__init__.py": '__version__ = "2.13.0+cpu"\nfrom torch import version  # noqa\n',
    "torch/version.py": "cuda = None\n",
}


def fake_wheel(where: Path, name: str, version: str, files: dict[str, str]) -> None:
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(where / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)


def fake_torch_wheel(where: Path) -> None:
    """A stand-in torch that passes the CPU build guard (what is measured is the layer reuse), and
    the NumPy a cell without torchvision installs beside it."""
    fake_wheel(where, "torch", "2.13.0+cpu", FAKE_TORCH)
    fake_wheel(where, "numpy", "2.0.0", {"numpy/__init__.py": "__version__ = '2.0.0'\n"})


def test_an_empty_runner_builds_nothing_for_a_cell_staged_elsewhere(
    runners: Runners, debian_python: str, tmp_path: Path
) -> None:
    """Runner A builds the real template's cell (a wheelhouse stage, a venv) and stages it; runner
    C, a fresh engine, "builds" the same unchanged cell: it pulls the staged image by digest and
    runs no build step. (The classic builder's --cache-from alone would not serve this cell: the
    wheelhouse stage is not in the final image's history, so its pip install would run again.)"""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    fake_torch_wheel(house)
    venv_tool_wheels(house)  # the real template upgrades the venv's pip and setuptools from it
    (tmp_path / "matrix.yaml").write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "allow_unknown": True,
                "axes": {"torch": ["2.13.0"], "cuda": ["cpu"], "base": ["deb"], "flavour": ["runtime"]},
                "defaults": {"torchvision": "none", "torchaudio": "none", "env": {"RUN_ID": RUN_ID}},
                "bases": {"deb": {"image": debian_python, "os": "debian12", "python": "3.11", "cuda": False}},
                "sources": {"pip": {"no_index": True, "find_links": ["wheelhouse"], "torch_index_url": None}},
                "publish": {
                    "registry": runners.registry.host,
                    "repository": f"{runners.project.repository}-real",
                },
            }
        )
    )
    project = Project(tmp_path, f"{runners.project.repository}-real")
    engines = Path(tempfile.mkdtemp(prefix="ikc-", dir="/tmp"))
    try:
        with (
            private_engine(engines / "a", (debian_python,)) as a,
            private_engine(engines / "c", (debian_python,)) as c,
        ):
            code, out = run(
                project, "build", "--matrix", "matrix.yaml", "--push", host=a.host, state=tmp_path / "a"
            )
            assert code == 0, out
            staged = cells_of(tmp_path / "a")
            code, out = run(project, "build", "--matrix", "matrix.yaml", host=c.host, state=tmp_path / "c")
            assert code == 0, out
            reused = cells_of(tmp_path / "c")
    finally:
        shutil.rmtree(engines, ignore_errors=True)
    ((cell, first),) = staged.items()
    log = (tmp_path / "c" / "logs" / f"{cell}.log").read_text()
    assert "reuse: pulled" in log and "nothing to build" in log, log
    assert "Step 1/" not in log, log
    assert reused[cell]["status"] == "skipped" and reused[cell]["image_id"] == first["image_id"], log


def test_build_push_with_the_registry_down_fails_the_cell_and_keeps_the_image(project: Project) -> None:
    """Staging is part of the cell's job: a registry that stays down fails it with one clear line;
    the built image keeps its tags, and the next run only pushes."""
    from testbed.registry_server import free_port

    closed = f"127.0.0.1:{free_port()}"
    write_cells(project, ["2.1"])
    done = project.build("--push", "--registry", closed)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (entry,) = project.report().values()
    assert entry["status"] == "failed" and entry["staged"] is None
    assert f"registry {closed} unreachable" in str(entry["error"])
    again = project.build()  # without --push: the image was built, nothing to do
    assert again.returncode == 0, again.stderr
    assert [e["status"] for e in project.report().values()] == ["skipped"]
