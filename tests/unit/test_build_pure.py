"""The builder's pure parts, without a Docker engine: mapping and mirror parsing, references,
pull retries, the job graph of local bases, deterministic build contexts and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import IO, Any

import pytest
import requests
from docker.errors import APIError

from imagekit.build import (
    BuildOptions,
    Job,
    apply_mirrors,
    image_repository,
    local_base_froms,
    parse_mapping,
    plan_jobs,
)
from imagekit.context import local_base_context, make_tar
from imagekit.engine import RetryPolicy, is_transient, pull, repo_digest, split_reference
from imagekit.errors import EnvironmentProblem, InputError
from imagekit.matrix import Cell, LocalBase, Plan, load_plan
from imagekit.render import Renderer
from imagekit.report import (
    REPORT_NAME,
    REPORT_VERSION,
    ROW_HEADERS,
    BuildReport,
    CellResult,
    markdown,
    read_report,
    rows,
    state_lock,
    summary_line,
    write_report,
)
from tests.conftest import REPO

TODAY = date(2024, 5, 17)
MIRROR_HINT = "expected SRC=DST (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"


# -- parse_mapping -----------------------------------------------------------------------------------


def test_parse_mapping_keeps_pairs_in_order() -> None:
    pairs = ["nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda", "docker.io=mirror.local", "k=a=b"]
    assert parse_mapping(pairs, "--mirror") == (
        ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
        ("docker.io", "mirror.local"),
        ("k", "a=b"),  # only the first '=' separates
    )
    assert parse_mapping([], "--label") == ()


@pytest.mark.parametrize(
    "pair", ["nvidia/cuda", "=mirror/cuda", "nvidia/cuda=", "=", "a = b", "a=b c", "a=\tb"]
)
def test_parse_mapping_rejects_malformed_pairs(pair: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_mapping(["ok=fine", pair], "--mirror")
    assert caught.value.message == f"--mirror {pair!r}: {MIRROR_HINT}"


def test_parse_mapping_names_the_option() -> None:
    with pytest.raises(InputError, match=r"^--label 'team': expected SRC=DST"):
        parse_mapping(["team"], "--label")


# -- apply_mirrors -----------------------------------------------------------------------------------

MIRRORS = (
    ("nvidia", "mirror.local/nv"),
    ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        # the longest prefix wins, whichever comes first
        (
            "nvidia/cuda:12.1.1-devel-ubuntu22.04",
            "127.0.0.1:5000/mirror/nvidia-cuda:12.1.1-devel-ubuntu22.04",
        ),
        ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
        ("nvidia/cuda@sha256:" + "a" * 64, "127.0.0.1:5000/mirror/nvidia-cuda@sha256:" + "a" * 64),
        ("nvidia/cuda/sub:1", "127.0.0.1:5000/mirror/nvidia-cuda/sub:1"),
        # only at a path boundary: nvidia/cudax is not nvidia/cuda, but is under nvidia
        ("nvidia/cudax:1", "mirror.local/nv/cudax:1"),
        ("nvidia/pytorch:24.01-py3", "mirror.local/nv/pytorch:24.01-py3"),
        # no match at all: untouched
        ("nvidiax/cuda:1", "nvidiax/cuda:1"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("library/nvidia:1", "library/nvidia:1"),
    ],
)
def test_apply_mirrors(ref: str, expected: str) -> None:
    assert apply_mirrors(ref, MIRRORS) == expected
    assert apply_mirrors(ref, tuple(reversed(MIRRORS))) == expected


def test_apply_mirrors_does_not_rewrite_a_longer_name() -> None:
    mirrors = (("nvidia/cuda", "m/cuda"),)
    assert apply_mirrors("nvidia/cudax", mirrors) == "nvidia/cudax"
    assert apply_mirrors("nvidia/cudax:12.1", mirrors) == "nvidia/cudax:12.1"
    assert apply_mirrors("nvidia/cuda:12.1", mirrors) == "m/cuda:12.1"


def test_apply_mirrors_with_a_registry_port_prefix() -> None:
    mirrors = (("localhost:5000/team", "mirror.local/team"),)
    assert apply_mirrors("localhost:5000/team/app:1", mirrors) == "mirror.local/team/app:1"
    assert apply_mirrors("localhost:5000/teamx/app:1", mirrors) == "localhost:5000/teamx/app:1"


def test_apply_mirrors_first_of_equal_sources_wins() -> None:
    # The command line's mappings come first in BuildOptions.mirrors and override the matrix's.
    mirrors = (("nvidia/cuda", "cli/cuda"), ("nvidia/cuda", "matrix/cuda"))
    assert apply_mirrors("nvidia/cuda:12.1", mirrors) == "cli/cuda:12.1"
    assert apply_mirrors("nvidia/cuda:12.1", ()) == "nvidia/cuda:12.1"


# -- references ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("busybox", ("busybox", None)),
        ("busybox:1.36", ("busybox", "1.36")),
        ("nvidia/cuda:12.1.1-devel-ubuntu22.04", ("nvidia/cuda", "12.1.1-devel-ubuntu22.04")),
        ("localhost:5000/team/app", ("localhost:5000/team/app", None)),
        ("localhost:5000/team/app:v1", ("localhost:5000/team/app", "v1")),
        ("127.0.0.1:5000/app@sha256:" + "b" * 64, ("127.0.0.1:5000/app", "sha256:" + "b" * 64)),
        ("app@sha256:" + "c" * 64, ("app", "sha256:" + "c" * 64)),
    ],
)
def test_split_reference(ref: str, expected: tuple[str, str | None]) -> None:
    assert split_reference(ref) == expected


def test_split_reference_with_tag_and_digest() -> None:
    ref = "nvidia/cuda:12.1@sha256:" + "d" * 64
    assert split_reference(ref) == ("nvidia/cuda", "sha256:" + "d" * 64)


def test_repo_digest_picks_the_references_repository() -> None:
    image = {
        "RepoDigests": [
            "mirror.local/cuda@sha256:" + "1" * 64,
            "nvidia/cuda@sha256:" + "2" * 64,
        ]
    }
    assert repo_digest(image, "nvidia/cuda:12.1") == "nvidia/cuda@sha256:" + "2" * 64
    assert repo_digest(image, "mirror.local/cuda") == "mirror.local/cuda@sha256:" + "1" * 64
    assert repo_digest(image, "nvidia/cudax:12.1") is None
    assert repo_digest(image, "nvidia:12.1") is None


@pytest.mark.parametrize("image", [{}, {"RepoDigests": None}, {"RepoDigests": []}])
def test_repo_digest_of_a_local_image_is_none(image: dict[str, Any]) -> None:
    assert repo_digest(image, "busybox:latest") is None


# -- is_transient ----------------------------------------------------------------------------------------


def api_error(
    status: int | None, explanation: str = "refused", url: str = "http+docker://x/images"
) -> APIError:
    if status is None:
        return APIError(explanation)
    response = requests.Response()
    response.status_code = status
    response.url = url
    return APIError("error", response=response, explanation=explanation)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_transient(status: int) -> None:
    assert is_transient(api_error(status))


def test_too_many_requests_is_transient() -> None:
    assert is_transient(api_error(429))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409])
def test_client_errors_are_not_transient(status: int) -> None:
    assert not is_transient(api_error(status, "manifest unknown"))


@pytest.mark.parametrize(
    "exc",
    [
        requests.ConnectionError("refused"),
        requests.ReadTimeout("slow"),
        requests.Timeout("slow"),
        ConnectionResetError("reset"),
        ConnectionRefusedError("refused"),
        api_error(None, "read tcp: connection reset by peer"),
        api_error(None, "net/http: TLS handshake timeout"),
        api_error(None, "unexpected EOF"),
        api_error(404, "Get https://registry/v2/: net/http: request canceled (Client.Timeout exceeded)"),
    ],
    ids=repr,
)
def test_connection_problems_are_transient(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        api_error(None, "manifest for nvidia/cuda:99 not found: manifest unknown"),
        api_error(None, "pull access denied for private/app"),
        ValueError("bad"),
        OSError("disk"),
        RuntimeError("timeout"),  # not a connection or API error at all
    ],
    ids=repr,
)
def test_other_errors_are_not_transient(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_a_404_for_an_image_whose_name_contains_eof_is_not_transient() -> None:
    url = "http+docker://localhost/v1.43/images/create?tag=latest&fromImage=geoffrey%2Fapp"
    assert not is_transient(api_error(404, "pull access denied for geoffrey/app", url=url))


# -- pull ------------------------------------------------------------------------------------------------


class FakeApi:
    """An APIClient stand-in: each call to ``pull`` takes the next outcome (an exception to raise
    at once, or the stream lines to yield)."""

    def __init__(self, *outcomes: BaseException | list[dict[str, Any]]) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str | None, bool, bool]] = []

    def pull(
        self, repository: str, tag: str | None = None, stream: bool = False, decode: bool = False
    ) -> Iterator[dict[str, Any]]:
        self.calls.append((repository, tag, stream, decode))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return iter(outcome)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


OK = [{"status": "Pulling from nvidia/cuda"}, {"status": "Download complete"}]


def test_pull_retries_transient_errors_with_exponential_backoff() -> None:
    api = FakeApi(requests.ConnectionError("reset"), api_error(503, "unavailable"), OK)
    sleep = Sleeps()
    pull(api, "nvidia/cuda:12.1", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == [1.0, 3.0]
    assert api.calls == [("nvidia/cuda", "12.1", True, True)] * 3
    assert api.outcomes == []


def test_pull_gives_up_after_the_policys_attempts() -> None:
    failures = [api_error(500, f"attempt {n}") for n in range(1, 4)]
    api = FakeApi(*failures, OK)
    sleep = Sleeps()
    with pytest.raises(APIError) as caught:
        pull(api, "app:1", RetryPolicy(attempts=3, first_delay_s=0.5, factor=2.0), sleep)  # type: ignore[arg-type]
    assert caught.value is failures[-1]
    assert sleep.delays == [0.5, 1.0]
    assert len(api.calls) == 3


def test_pull_raises_a_non_transient_error_at_once() -> None:
    denied = api_error(404, "pull access denied for private/app")
    api = FakeApi(denied, OK)
    sleep = Sleeps()
    with pytest.raises(APIError) as caught:
        pull(api, "private/app:1", sleep=sleep)  # type: ignore[arg-type]
    assert caught.value is denied
    assert sleep.delays == []
    assert len(api.calls) == 1


def test_pull_raises_an_error_line_of_the_stream() -> None:
    api = FakeApi([{"status": "Pulling"}, {"error": "manifest unknown"}], OK)
    sleep = Sleeps()
    with pytest.raises(APIError, match="manifest unknown"):
        pull(api, "nvidia/cuda:99", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == []
    assert len(api.calls) == 1


def test_pull_retries_a_transient_error_line_of_the_stream() -> None:
    api = FakeApi([{"error": "unexpected EOF"}], [{"errorDetail": {}, "error": "connection reset"}], OK)
    sleep = Sleeps()
    pull(api, "nvidia/cuda:12.1", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == [1.0, 3.0]
    assert len(api.calls) == 3


def test_pull_asks_for_latest_or_the_digest() -> None:
    api = FakeApi(OK, OK)
    pull(api, "localhost:5000/team/app", sleep=Sleeps())  # type: ignore[arg-type]
    pull(api, "app@sha256:" + "e" * 64, sleep=Sleeps())  # type: ignore[arg-type]
    assert [c[:2] for c in api.calls] == [
        ("localhost:5000/team/app", "latest"),
        ("app", "sha256:" + "e" * 64),
    ]


# -- the job graph of local bases ---------------------------------------------------------------------------

TEMPLATE = "FROM {{ cell.base_image }}\nRUN echo {{ cell.id }}\n"


def local_base(name: str, image: str) -> str:
    return textwrap.indent(
        f'{name}:\n  image: {image}\n  os: debian12\n  python: "3.11"\n  cuda: false\n'
        f"  build: {{context: {name}}}\n",
        "  ",
    )


def write_project(
    root: Path, dockerfiles: dict[str, str], axis: list[str], registry: str | None = None
) -> Plan:
    """A matrix in ``root`` whose bases are built from ``root/<name>/Dockerfile``."""
    (root / "templates").mkdir()
    (root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    for name, text in dockerfiles.items():
        (root / name).mkdir()
        (root / name / "Dockerfile").write_text(text)
        (root / name / "marker.txt").write_text(name)
    publish = "publish:\n  repository: example/it\n"
    if registry:
        publish += f"  registry: {registry}\n"
    publish += '  tags: {readable: "{base}-{torch}"}\n'
    bases = "".join(local_base(name, f"example/{name}:dev") for name in dockerfiles)
    text = (
        'version: "1"\ntemplates: templates\n'
        + publish
        + f'axes:\n  torch: ["2.1"]\n  base: [{", ".join(axis)}]\n'
        + "bases:\n"
        + bases
    )
    (root / "matrix.yaml").write_text(text)
    return load_plan(root / "matrix.yaml")


def options(tmp_path: Path) -> BuildOptions:
    return BuildOptions(state_dir=tmp_path / ".imagekit", today=TODAY)


def jobs_of(plan: Plan, tmp_path: Path, cells: tuple[Cell, ...] | None = None) -> dict[str, Job]:
    jobs = plan_jobs(plan, plan.cells if cells is None else cells, Renderer(plan), {}, options(tmp_path))
    return {job.name: job for job in jobs}


CHAIN = {
    "outer": "FROM example/middle:dev\nRUN echo outer\n",
    "inner": "FROM busybox:latest\nRUN echo inner\n",
    "middle": "# FROM example/outer:dev is a comment\nfrom --platform=linux/amd64 example/inner:dev AS m\n",
}


def test_local_bases_come_first_in_dependency_order(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    jobs = jobs_of(plan, tmp_path)
    names = list(jobs)
    assert names[:3] == ["base-inner", "base-middle", "base-outer"]
    assert {jobs[n].kind for n in names[:3]} == {"base"}
    assert {jobs[n].kind for n in names[3:]} == {"cell"}
    assert jobs["base-inner"].depends_on == ()
    assert jobs["base-middle"].depends_on == ("base-inner",)
    assert jobs["base-outer"].depends_on == ("base-middle",)
    assert jobs["base-inner"].base_reference == "busybox:latest"
    assert jobs["base-middle"].base_reference == "example/inner:dev"
    for job in names[3:]:
        rendered = jobs[job].rendered
        assert rendered is not None
        cell = rendered.cell
        assert jobs[job].depends_on == (f"base-{cell.base}",)
        assert jobs[job].base_reference == f"example/{cell.base}:dev"
    # Each base is built once, and the context digests tell the bases apart.
    assert len({jobs[n].context_digest for n in names[:3]}) == 3


def test_selecting_one_cell_still_builds_the_bases_it_derives_from(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    outer = tuple(c for c in plan.cells if c.base == "outer")
    jobs = jobs_of(plan, tmp_path, outer)
    assert list(jobs) == ["base-inner", "base-middle", "base-outer", outer[0].id]


def test_a_cell_on_a_leaf_base_needs_only_that_base(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer", "middle", "inner"])
    inner = tuple(c for c in plan.cells if c.base == "inner")
    assert list(jobs_of(plan, tmp_path, inner)) == ["base-inner", inner[0].id]


def test_a_loop_between_local_bases_is_an_input_error(tmp_path: Path) -> None:
    loop = {"a": "FROM example/b:dev\n", "b": "FROM example/c:dev\n", "c": "FROM example/a:dev\n"}
    plan = write_project(tmp_path, loop, ["a", "b", "c"])
    with pytest.raises(InputError, match=r"local bases derive from each other in a loop: a -> b -> c -> a"):
        jobs_of(plan, tmp_path)


def test_a_base_on_itself_is_a_loop(tmp_path: Path) -> None:
    plan = write_project(tmp_path, {"self": "FROM example/self:dev\n"}, ["self"])
    with pytest.raises(InputError, match="in a loop: self -> self"):
        jobs_of(plan, tmp_path)


def test_a_parent_base_that_no_cell_uses_is_still_built(tmp_path: Path) -> None:
    plan = write_project(tmp_path, CHAIN, ["outer"])
    jobs = jobs_of(plan, tmp_path)
    assert list(jobs)[:3] == ["base-inner", "base-middle", "base-outer"]


def test_local_base_froms_reads_every_from(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile.multi").write_text(
        "ARG X=1\n"
        "FROM --platform=$BUILDPLATFORM golang:1.22 AS build\n"
        "  from alpine:3.19\n"
        "# FROM commented/out\n"
        "RUN echo FROM not/a-parent\n"
        "COPY --from=build /x /x\n"
    )
    base = LocalBase("multi", "example/multi:dev", tmp_path, "Dockerfile.multi", ())
    assert local_base_froms(base) == ("golang:1.22", "alpine:3.19")


def test_local_base_froms_of_a_missing_dockerfile(tmp_path: Path) -> None:
    base = LocalBase("gone", "example/gone:dev", tmp_path, "Dockerfile", ())
    with pytest.raises(InputError, match=r"^base gone: cannot read .*Dockerfile: No such file"):
        local_base_froms(base)


def test_image_repository_with_and_without_registry(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    plain = write_project(tmp_path / "one", {"inner": CHAIN["inner"]}, ["inner"])
    hosted = write_project(tmp_path / "two", {"inner": CHAIN["inner"]}, ["inner"], registry="127.0.0.1:5000")
    assert image_repository(plain) == "example/it"
    assert image_repository(hosted) == "127.0.0.1:5000/example/it"


def test_a_cell_on_another_cell_of_the_matrix_waits_for_it(tmp_path: Path) -> None:
    plan = write_project(tmp_path, {"inner": CHAIN["inner"]}, ["inner"])
    (cell,) = plan.cells
    child = replace(
        cell, id="child", base_image=f"example/it:{cell.readable_tag}", local_base=None, readable_tag="child"
    )
    jobs = plan_jobs(plan, (cell, child), Renderer(plan), {}, options(tmp_path))
    assert [(j.name, j.depends_on) for j in jobs] == [
        ("base-inner", ()),
        (cell.id, ("base-inner",)),
        ("child", (cell.id,)),
    ]


# -- build contexts ---------------------------------------------------------------------------------------


def members(archive: IO[bytes]) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=archive, mode="r") as tar:
        return tar.getmembers()


def make_files(root: Path, modes: dict[str, int], mtime: int) -> list[tuple[str, Path]]:
    files = []
    for name, mode in modes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {name}\n")
        path.chmod(mode)
        os.utime(path, (mtime, mtime))
        files.append((name, path))
    return files


def test_make_tar_is_deterministic(tmp_path: Path) -> None:
    first = make_files(tmp_path / "a", {"run.sh": 0o755, "req.txt": 0o644, "sub/x.py": 0o600}, 1_000_000)
    # The same contents elsewhere, with other times, other non-executable modes, in another order.
    second = make_files(tmp_path / "b", {"sub/x.py": 0o664, "run.sh": 0o700, "req.txt": 0o640}, 2_000_000)
    dockerfile = ("Dockerfile", "FROM busybox\nCOPY . /app\n")
    with (
        make_tar(dockerfile, first) as one,
        make_tar(dockerfile, first) as again,
        make_tar(dockerfile, second) as other,
    ):
        data = one.read()
        assert data == again.read()
        assert data == other.read()
    with make_tar(("Dockerfile", "FROM busybox\n"), first) as changed:
        assert changed.read() != data


def test_make_tar_normalises_headers_and_keeps_the_executable_bit(tmp_path: Path) -> None:
    modes = {"run.sh": 0o700, "data.bin": 0o600, "tool": 0o750, "doc.md": 0o664, "shared": 0o645}
    files = make_files(tmp_path, modes, 1_700_000_000)
    with make_tar(("Dockerfile", "FROM busybox\n"), files) as archive:
        found = {m.name: m for m in members(archive)}
    assert list(found) == ["Dockerfile", "data.bin", "doc.md", "run.sh", "shared", "tool"]  # then sorted
    assert {name: m.mode for name, m in found.items()} == {
        "Dockerfile": 0o644,
        "data.bin": 0o644,
        "doc.md": 0o644,
        "run.sh": 0o755,
        "shared": 0o755,  # any execute bit counts
        "tool": 0o755,
    }
    for m in found.values():
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert m.isfile()
    assert found["run.sh"].size == len("content of run.sh\n")


def test_make_tar_holds_the_file_contents(tmp_path: Path) -> None:
    files = make_files(tmp_path, {"sub/dir/x.txt": 0o644}, 0)
    with make_tar(None, files) as archive, tarfile.open(fileobj=archive, mode="r") as tar:
        assert tar.getnames() == ["sub/dir/x.txt"]
        extracted = tar.extractfile("sub/dir/x.txt")
        assert extracted is not None
        assert extracted.read() == b"content of sub/dir/x.txt\n"


def test_make_tar_of_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*missing\.txt for the build context: No such file"):
        make_tar(None, [("missing.txt", tmp_path / "missing.txt")])


def test_local_base_context_holds_the_context_directory(tmp_path: Path) -> None:
    make_files(tmp_path / "ctx", {"Dockerfile": 0o644, "scripts/setup.sh": 0o755}, 5)
    base = LocalBase("b", "example/b:dev", tmp_path / "ctx", "Dockerfile", ())
    with local_base_context(base) as archive:
        found = {m.name: m.mode for m in members(archive)}
    assert found == {"Dockerfile": 0o644, "scripts/setup.sh": 0o755}


# -- the report --------------------------------------------------------------------------------------------

SHA_IMAGE = "sha256:" + "0123456789abcdef" * 4
SHA_BASE = "sha256:" + "fedcba9876543210" * 4


def result(name: str, status: str, **values: Any) -> CellResult:
    fields: dict[str, Any] = {
        "id": name,
        "kind": "cell",
        "status": status,
        "image_id": None,
        "tags": (),
        "size": None,
        "input_digest": None,
        "base_image": "nvidia/cuda:12.1",
        "base_digest": None,
        "duration_s": 0.0,
        "log": None,
        "error": None,
    }
    return CellResult(**{**fields, **values})


def sample_report() -> BuildReport:
    base = result(
        "base-inner",
        "built",
        kind="base",
        image_id=SHA_BASE,
        tags=("example/inner:dev",),
        size=5_000_000,
        base_image="busybox:latest",
        duration_s=1.26,
    )
    built = result(
        "cuda-built",
        "built",
        image_id=SHA_IMAGE,
        tags=("reg/it:cuda-2.1", "reg/it:cuda-2.1-20240517"),
        size=1_500_000_000,
        input_digest="d" * 64,
        base_digest="nvidia/cuda@sha256:" + "9" * 64,
        duration_s=83.42,
        log=".imagekit/logs/cuda-built.log",
    )
    skipped = result(
        "cuda-skipped",
        "skipped",
        image_id=SHA_IMAGE,
        tags=("reg/it:cuda-2.2",),
        size=123_456_789,
        base_digest=SHA_BASE,
    )
    failed = result(
        "cuda-failed",
        "failed",
        duration_s=4.0,
        error="The command '/bin/sh -c exit 3' returned a non-zero code: 3 | see log",
        error_tail=("Step 3/4 : RUN exit 3", "boom: this step fails on purpose"),
    )
    cancelled = result(
        "cuda-cancelled",
        "cancelled",
        error="cancelled by --fail-fast after cuda-failed failed",
        error_tail=("Step 2/4 : RUN sleep 60",),  # only failures get a details block
    )
    return BuildReport(
        matrix="matrix.yaml",
        started="2024-05-17T10:00:00+00:00",
        duration_s=92.345,
        engine="unix:///var/run/docker.sock",
        cells=(built, skipped, failed, cancelled),
        bases=(base,),
    )


def test_report_round_trip(tmp_path: Path) -> None:
    report = sample_report()
    path = write_report(tmp_path, report)
    assert path == tmp_path / REPORT_NAME
    assert read_report(tmp_path) == report
    data = json.loads(path.read_text())
    assert data["version"] == REPORT_VERSION
    assert data["counts"] == {"built": 1, "skipped": 1, "failed": 1, "cancelled": 1}
    assert data["cells"][0]["tags"] == ["reg/it:cuda-2.1", "reg/it:cuda-2.1-20240517"]
    assert [entry["id"] for entry in data["bases"]] == ["base-inner"]
    # A second write replaces the first completely.
    smaller = replace(report, cells=report.cells[:1], bases=())
    write_report(tmp_path, smaller)
    assert read_report(tmp_path) == smaller


def test_report_failed_and_counts() -> None:
    report = sample_report()
    assert report.failed
    assert report.counts() == {"built": 1, "skipped": 1, "failed": 1, "cancelled": 1}
    fine = replace(report, cells=report.cells[:2])
    assert not fine.failed
    failed_base = replace(fine, bases=(replace(fine.bases[0], status="failed"),))
    assert failed_base.failed
    assert failed_base.counts() == {"built": 1, "skipped": 1, "failed": 0, "cancelled": 0}  # cells only


def test_read_report_without_a_report(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    assert caught.value.message == f"no build report at {tmp_path / REPORT_NAME}; run `imagekit build` first"


@pytest.mark.parametrize("text", ["{not json", "", "\x00\x01garbage"])
def test_read_report_of_garbage(tmp_path: Path, text: str) -> None:
    (tmp_path / REPORT_NAME).write_text(text)
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: not a readable report \("):
        read_report(tmp_path)


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_read_report_of_another_version(tmp_path: Path, version: object) -> None:
    data = sample_report().as_json()
    data["version"] = version
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    assert caught.value.message == (
        f"{tmp_path / REPORT_NAME}: report version {version!r}; expected {REPORT_VERSION}"
    )


def test_read_report_without_a_version(tmp_path: Path) -> None:
    data = sample_report().as_json()
    del data["version"]
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="report version None; expected 1"):
        read_report(tmp_path)


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],
        "a string",
        {"version": 1},
        {
            "version": 1,
            "matrix": "m",
            "started": "s",
            "duration_s": 1,
            "engine": "e",
            "cells": [{}],
            "bases": [],
        },
        {
            "version": 1,
            "matrix": "m",
            "started": "s",
            "duration_s": 1,
            "engine": "e",
            "cells": 3,
            "bases": [],
        },
    ],
    ids=["list", "string", "keys missing", "cell empty", "cells not a list"],
)
def test_read_report_of_a_malformed_report(tmp_path: Path, data: object) -> None:
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: malformed report \("):
        read_report(tmp_path)


# -- the state lock ----------------------------------------------------------------------------------------


def test_state_lock_writes_the_holders_pid_and_refuses_a_second_holder(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "lock").write_text("4194303 left over by a crashed build\n")
    with state_lock(state):
        assert (state / "lock").read_text() == f"{os.getpid()}\n"
        for _ in range(2):  # the refused attempt must not release the first holder's lock
            with pytest.raises(EnvironmentProblem) as caught, state_lock(state):
                pytest.fail("a second holder got the lock")
            assert f"(pid {os.getpid()})" in caught.value.message
            assert str(state / "lock") in caught.value.message
    with state_lock(state):  # released on exit
        pass


def test_state_lock_is_released_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(KeyError), state_lock(tmp_path):
        raise KeyError("x")
    with state_lock(tmp_path):
        pass


def test_state_lock_held_by_another_process(tmp_path: Path) -> None:
    holder = (
        "import sys\nfrom pathlib import Path\nfrom imagekit.report import state_lock\n"
        "with state_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    sys.stdin.readline()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline() == "held\n"
        with (
            pytest.raises(EnvironmentProblem, match=rf"another `imagekit build` \(pid {process.pid}\) holds"),
            state_lock(tmp_path),
        ):
            pass
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with state_lock(tmp_path):
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"


# -- presentation -----------------------------------------------------------------------------------------


def by_column(report: BuildReport) -> dict[str, dict[str, str]]:
    """rows() as {cell: {header: value}}, so the checks do not hang on the column order."""
    out = {}
    for row in rows(report):
        assert len(row) == len(ROW_HEADERS)
        values = dict(zip(ROW_HEADERS, row, strict=True))
        out[values["cell"]] = values
    return out


def test_rows() -> None:
    table = by_column(sample_report())
    assert list(table) == [
        "base-inner (base)",
        "cuda-built",
        "cuda-skipped",
        "cuda-failed",
        "cuda-cancelled",
    ]
    columns = ("status", "image", "size", "time", "base digest", "detail")

    def pick(name: str) -> tuple[str, ...]:
        return tuple(table[name][c] for c in columns)

    assert pick("base-inner (base)") == ("built", "fedcba987654", "5.0 MB", "1.3s", "-", "example/inner:dev")
    assert pick("cuda-built") == (
        "built",
        "0123456789ab",
        "1.50 GB",
        "83.4s",
        "@sha256:999999999999",
        "reg/it:cuda-2.1",  # the first (readable) tag
    )
    assert pick("cuda-skipped") == (
        "skipped",
        "0123456789ab",
        "123.5 MB",
        "0.0s",
        "sha256:fedcba987654",
        "reg/it:cuda-2.2",
    )
    assert pick("cuda-failed") == (
        "failed",
        "-",
        "-",
        "4.0s",
        "-",
        "The command '/bin/sh -c exit 3' returned a non-zero code: 3 | see log",
    )
    assert table["cuda-cancelled"]["status"] == "cancelled"
    assert table["cuda-cancelled"]["detail"] == "cancelled by --fail-fast after cuda-failed failed"


def test_summary_line() -> None:
    report = sample_report()
    assert summary_line(report) == "4 cells: 1 built, 1 skipped, 1 failed, 1 cancelled in 92.3s"
    two = replace(report, cells=report.cells[:1] * 2, duration_s=3.0)
    assert summary_line(two) == "2 cells: 2 built in 3.0s"  # bases are not counted
    assert summary_line(replace(report, cells=(), bases=())) == "0 cells: none in 92.3s"


def test_markdown() -> None:
    text = markdown(sample_report())
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[:4] == [
        "### imagekit build: matrix.yaml",
        "",
        "4 cells: 1 built, 1 skipped, 1 failed, 1 cancelled in 92.3s",
        "",
    ]
    assert lines[4] == "| " + " | ".join(ROW_HEADERS) + " |"
    assert lines[4].startswith("| cell | status | ")
    assert lines[5] == "|" + "---|" * len(ROW_HEADERS)
    # One table line per row, bases first, each value escaped.
    expected = ["| " + " | ".join(v.replace("|", "\\|") for v in row) + " |" for row in rows(sample_report())]
    assert lines[6:11] == expected
    assert lines[11] == ""
    assert lines[6].startswith("| base-inner (base) | built | ")
    assert lines[7].startswith("| cuda-built | built | ")
    assert lines[7].endswith(" | 83.4s | @sha256:999999999999 | reg/it:cuda-2.1 |")
    # A '|' inside a value is escaped so it cannot split the table's cells.
    failed_row = next(line for line in lines if line.startswith("| cuda-failed |"))
    assert failed_row.endswith("returned a non-zero code: 3 \\| see log |")
    # The failure's tail follows the table in a details block; the cancelled cell has none.
    details = lines.index(
        "<details><summary>cuda-failed: The command '/bin/sh -c exit 3'"
        " returned a non-zero code: 3 \\| see log</summary>"
    )
    assert lines[details + 1 : details + 7] == [
        "",
        "```",
        "Step 3/4 : RUN exit 3",
        "boom: this step fails on purpose",
        "```",
        "",
    ]
    assert lines[-1] == "</details>"
    assert text.count("<details>") == 1


def test_markdown_without_failures_has_no_details() -> None:
    report = sample_report()
    text = markdown(replace(report, cells=report.cells[:2]))
    assert "<details>" not in text
    assert "2 cells: 1 built, 1 skipped in 92.3s" in text
