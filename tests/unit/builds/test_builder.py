"""The builder's run against a fake engine: failures of one job, skips, and what a skip keeps."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from docker.errors import ImageNotFound

from imagekit.builds import reuse
from imagekit.builds.builder import Builder
from imagekit.builds.jobs import BaseJob, Job
from imagekit.builds.options import BuildOptions
from imagekit.builds.outcome import BuildOutcome
from imagekit.builds.progress import PlainProgress
from imagekit.cli.flags import parse_mapping
from imagekit.core.errors import InputError
from imagekit.core.naming import BASE_DIGEST_LABEL, CONTEXT_DIGEST_LABEL, INPUT_DIGEST_LABEL
from imagekit.plan.cells import LocalBase, Plan
from imagekit.render import context
from imagekit.render.context import local_base_digest
from imagekit.render.dockerfile import RenderedCell, Renderer
from imagekit.report.store import (
    BuildReport,
    CellResult,
    ReportStore,
    read_previous,
    read_report,
    write_report,
)
from imagekit.report.verification import GPU_CHECKS, CheckRecord, Verification
from imagekit.verify import schedule
from testbed.sample_projects import TODAY, write_project

PROJECT = {"deb": "FROM busybox:latest\nRUN echo deb\n"}

# image ids as the engine gives them (a report holds nothing else)
BASE_NOW, EXISTING, BASE_THEN, OTHER, NEW = ("sha256:" + c * 64 for c in "abcde")


class FakeApi:
    """The engine calls a build that skips or fails before streaming makes."""

    def __init__(self, plan: Plan, existing: dict[str, Any] | None = None) -> None:
        base = plan.local_bases[0]
        digest = local_base_digest(base, Renderer(plan).hasher)
        self.inspected = {
            base.image: {
                "Id": BASE_NOW,
                "Size": 1,
                "Config": {"Labels": {CONTEXT_DIGEST_LABEL: digest}},
            }
        }
        self.existing = existing
        self.listing: list[dict[str, Any]] | None = None  # what images() answers, when not [existing]
        self.tagged: list[tuple[str, str, str | None]] = []

    def inspect_image(self, ref: str) -> dict[str, Any]:
        if ref in self.inspected:
            return self.inspected[ref]
        raise ImageNotFound(ref)

    def images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        if self.listing is not None:
            return self.listing
        return [self.existing] if self.existing else []

    def tag(self, image: str, repository: str, tag: str | None, force: bool = False) -> bool:
        self.tagged.append((image, repository, tag))
        return True


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    (tmp_path / "project").mkdir()
    return write_project(tmp_path / "project", PROJECT, ["deb"])


def builder(plan: Plan, api: FakeApi, state: Path, jobs: int = 1) -> Builder:
    options = BuildOptions(today=TODAY, jobs=jobs)
    store = ReportStore(state, read_previous(state))
    return Builder(api, plan, options, PlainProgress(io.StringIO()), store)  # type: ignore[arg-type]


def test_an_input_error_in_a_job_fails_that_cell_with_its_message(
    plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(rendered: object) -> IO[bytes]:
        raise InputError("cannot read wheel.whl for the build context: Permission denied")

    monkeypatch.setattr(RenderedCell, "context_tar", unreadable)
    outcome = builder(plan, FakeApi(plan), tmp_path / "state").run(plan.cells)
    (cell,) = outcome.report.cells
    assert cell.status == "failed"
    assert cell.error == "cannot read wheel.whl for the build context: Permission denied"
    assert outcome.report.bases[0].status == "skipped"


def test_an_unwritable_log_fails_the_job_not_the_run(plan: Plan, tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    (state / "logs" / f"{plan.cells[0].id}.log").mkdir()  # opening it for writing fails
    outcome = builder(plan, FakeApi(plan), state).run(plan.cells)
    (cell,) = outcome.report.cells
    assert cell.status == "failed" and "cannot write the build log" in (cell.error or "")


def test_a_workers_bug_stops_the_other_builds_before_it_propagates(
    plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = builder(plan, FakeApi(plan), tmp_path / "state", jobs=2)
    saw_cancel: list[bool] = []
    started = threading.Event()

    def job(self: Builder, job: Job) -> CellResult:
        if job.name == "broken":
            started.wait(5)
            raise RuntimeError("a bug")
        started.set()
        saw_cancel.append(self.state.cancel.wait(5))
        return job.result("cancelled", error="stopped")

    monkeypatch.setattr(Builder, "_run_job", job)
    base = LocalBase("b", "example/b:dev", tmp_path, "Dockerfile", ())
    jobs: list[Job] = [BaseJob("slow", (), "b", base, "d"), BaseJob("broken", (), "b", base, "d")]
    with pytest.raises(RuntimeError, match="a bug"):
        run.schedule(jobs)
    assert saw_cancel == [True]
    assert "RuntimeError: a bug" in run.state.cancel_reason


def existing_image(plan: Plan) -> dict[str, Any]:
    rendered = Renderer(plan).render(plan.cells[0])
    return {
        "Id": EXISTING,
        "Created": 1,
        "Size": 5,
        "RepoTags": [rendered.names(plan.matrix.publish, TODAY).references()[0]],
        "Labels": {INPUT_DIGEST_LABEL: rendered.input_digest, BASE_DIGEST_LABEL: BASE_THEN},
    }


def derived_image(plan: Plan) -> dict[str, Any]:
    """An image built FROM the cell (a front end's build stage, a user's FROM image): it inherits
    every label of the cell, and it is newer."""
    cell = existing_image(plan)
    return {**cell, "Id": OTHER, "Created": 2, "RepoTags": ["<none>:<none>"], "Labels": dict(cell["Labels"])}


def test_an_image_derived_from_the_cell_is_never_taken_for_it() -> None:
    digest = "sha256:" + "1" * 64
    labels = {INPUT_DIGEST_LABEL: digest}
    cell = {"Id": EXISTING, "Created": 1, "RepoTags": ["r:cell"], "Labels": labels}
    stage = {"Id": OTHER, "Created": 9, "RepoTags": ["<none>:<none>"], "Labels": labels}
    user = {"Id": NEW, "Created": 8, "RepoTags": ["mine:latest"], "Labels": labels}
    listing = [stage, user, cell]
    assert reuse.cell_image(listing, digest, ("r:cell",), None) is cell
    # the id the report recorded wins over tags (the cell's tags may have been moved by hand)
    assert reuse.cell_image(listing, digest, ("r:other",), EXISTING) is cell
    # neither a recorded id nor one of the cell's own tags: built again (from the layer cache)
    assert reuse.cell_image([stage, user], digest, ("r:cell",), None) is None
    # a recorded id whose image no longer has this input digest is no evidence
    assert reuse.cell_image(listing, "sha256:" + "2" * 64, ("r:cell",), EXISTING) is None


def test_a_no_change_rebuild_keeps_the_cells_tags_on_its_own_image(plan: Plan, tmp_path: Path) -> None:
    """The defect: the newest image with the cell's input-digest label was a front end's build
    stage, and a no-change rebuild moved the cell's tags onto it."""
    api = FakeApi(plan, existing_image(plan))
    api.listing = [derived_image(plan), existing_image(plan)]
    (cell,) = builder(plan, api, tmp_path / "state").run(plan.cells).report.cells
    assert cell.status == "skipped" and cell.image_id == EXISTING
    assert all(image == EXISTING for image, _, _ in api.tagged)


def test_a_skipped_cell_reports_the_base_it_was_built_from(plan: Plan, tmp_path: Path) -> None:
    outcome = builder(plan, FakeApi(plan, existing_image(plan)), tmp_path / "state").run(plan.cells)
    (cell,) = outcome.report.cells
    assert cell.status == "skipped" and cell.image_id == EXISTING
    assert cell.base_digest == BASE_THEN  # not the base the engine holds now


@pytest.mark.parametrize("label", ["busybox\x00@sha256:" + "a" * 64, "not a reference", ""])
def test_a_base_label_the_report_could_not_read_back_is_not_recorded(
    plan: Plan, tmp_path: Path, label: str
) -> None:
    """The skipped image's base-digest label is its own word (an image staged elsewhere and
    pulled says what it likes): one the report's reader refuses is not recorded, the base the
    engine holds is (before: a NUL in it wrote a report.json the next command refused, exit 2)."""
    image = existing_image(plan)
    image["Labels"][BASE_DIGEST_LABEL] = label
    state = tmp_path / "state"
    outcome = builder(plan, FakeApi(plan, image), state).run(plan.cells)
    (cell,) = outcome.report.cells
    assert cell.status == "skipped" and cell.base_digest != label
    write_report(state, outcome.report)
    assert read_report(state).cells[0].base_digest == cell.base_digest


def previous(plan: Plan, state: Path, image_id: str) -> None:
    cell = plan.cells[0]
    result = CellResult(
        id=cell.id, kind="cell", status="built", base_image=cell.base_image, image_id=image_id
    )
    checks = (CheckRecord("torch_version", "pass", True),)
    verified = Verification(cell.id, image_id, "none", "checked", False, False, checks, 1.0)
    report = BuildReport("m", "2024-05-17T00:00:00+00:00", 1.0, "e", (result,), ())
    write_report(state, report.with_verification(cell.id, verified))


@pytest.mark.parametrize(("old_image", "kept"), [(EXISTING, True), (OTHER, False)])
def test_a_skipped_cell_keeps_the_verification_of_the_same_image(
    plan: Plan, tmp_path: Path, old_image: str, kept: bool
) -> None:
    state = tmp_path / "state"
    previous(plan, state, old_image)
    outcome = builder(plan, FakeApi(plan, existing_image(plan)), state).run(plan.cells)
    (cell,) = outcome.report.cells
    assert cell.status == "skipped"
    assert (cell.verification is not None) is kept
    if kept:
        assert cell.verification is not None and cell.verification.image == EXISTING
    assert read_report(state).cells[0].verification is not None  # run() writes nothing itself


def test_mappings_parse_any_key() -> None:
    # --label refuses imagekit.* keys itself (test_build_verify_exits_1_...); a mirror may use any
    assert parse_mapping(["imagekit.x=y"], "--mirror") == (("imagekit.x", "y"),)


@pytest.fixture(autouse=True)
def no_engine_address(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    yield


def test_build_verify_exits_1_when_a_verification_failed(
    plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.engine import client as engine
    from tests.conftest import run_cli

    cell = plan.cells[0]
    built = CellResult(id=cell.id, kind="cell", status="built", base_image=cell.base_image, image_id=NEW)
    report = BuildReport("m", "2024-05-17T00:00:00+00:00", 1.0, "e", (built,), ())
    monkeypatch.setattr(engine, "connect", lambda **_: object())
    monkeypatch.setattr(Builder, "run", lambda self, cells: BuildOutcome(report, False))
    verdicts: list[str] = []

    def verify_cells(*args: Any, **kwargs: Any) -> list[Verification]:
        passed = tuple(CheckRecord(name, "pass", True) for name in GPU_CHECKS)
        checks = passed if verdicts[0] == "validated" else ()
        return [Verification(cell.id, NEW, "all", verdicts[0], True, True, checks, 1.0)]  # type: ignore[arg-type]

    monkeypatch.setattr(schedule, "verify_cells", verify_cells)
    matrix = str(plan.root / "matrix.yaml")
    for verdict, code in (("failed", 1), ("validated", 0)):
        verdicts[:] = [verdict]
        result = run_cli("build", "-m", matrix, "--state-dir", str(tmp_path / "s"), "--verify")
        assert result.exit_code == code, (verdict, result.stderr)
    refused = run_cli(
        "build", "-m", matrix, "--state-dir", str(tmp_path / "s"), "--label", "imagekit.torch=9"
    )
    assert refused.exit_code == 2 and "imagekit's own" in refused.stderr


@pytest.mark.parametrize(
    ("asked", "built"),
    [((("team", "ml"),), True), ((("team", "vision"),), False), ((), False)],
    ids=["a label the image lacks", "the label it carries", "no label asked"],
)
def test_an_image_of_the_same_inputs_is_reused_only_with_the_labels_asked_for(
    plan: Plan,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    asked: tuple[tuple[str, str], ...],
    built: bool,
) -> None:
    image = existing_image(plan)
    image["Labels"]["team"] = "vision"
    requests: list[dict[str, str]] = []

    def build_and_tag(self: Builder, job: Job, request: Any, *args: Any, **fields: Any) -> CellResult:
        requests.append(dict(request.labels))
        return job.result("built", image_id=NEW)

    monkeypatch.setattr(Builder, "_build_and_tag", build_and_tag)
    options = BuildOptions(today=TODAY, jobs=1, extra_labels=asked)
    state = tmp_path / "state"
    run = Builder(FakeApi(plan, image), plan, options, PlainProgress(io.StringIO()), ReportStore(state, None))  # type: ignore[arg-type]
    (cell,) = run.run(plan.cells).report.cells
    assert (cell.status, cell.image_id) == (("built", NEW) if built else ("skipped", EXISTING))
    if built:
        (labels,) = requests
        assert labels["team"] == "ml" and labels[INPUT_DIGEST_LABEL] == image["Labels"][INPUT_DIGEST_LABEL]


def test_a_no_change_run_reads_no_context_file_and_still_asks_the_engine(
    plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state directory's hash cache spares the re-hash; the skip is still the engine's image."""
    monkeypatch.setattr(context, "_SETTLE_NS", -1)  # the test's files are seconds old
    read: list[tuple[context.FileHasher, Path]] = []  # the files each hasher read to hash them
    hash_file = context.FileHasher._hash

    def reading(hasher: context.FileHasher, path: Path) -> str:
        read.append((hasher, path))
        return hash_file(hasher, path)

    monkeypatch.setattr(context.FileHasher, "_hash", reading)
    state = tmp_path / "state"
    first = builder(plan, FakeApi(plan, existing_image(plan)), state)
    assert first.run(plan.cells).report.cells[0].status == "skipped"
    assert any(h is first.hasher for h, _ in read) and (state / context.HASH_CACHE_NAME).is_file()
    again = builder(plan, FakeApi(plan, existing_image(plan)), state)
    assert again.run(plan.cells).report.cells[0].status == "skipped"
    assert not any(h is again.hasher for h, _ in read)  # every context file known by its stat
    # the same cache, but the engine no longer holds the cell's image: built, not skipped
    built: list[str] = []

    def build_and_tag(self: Builder, job: Job, request: Any, *args: Any, **fields: Any) -> CellResult:
        built.append(job.name)
        return job.result("built", image_id=NEW)

    monkeypatch.setattr(Builder, "_build_and_tag", build_and_tag)
    gone = builder(plan, FakeApi(plan, None), state)
    (cell,) = gone.run(plan.cells).report.cells
    assert (cell.status, cell.image_id, built) == ("built", NEW, [cell.id])
    assert not any(h is gone.hasher for h, _ in read)
