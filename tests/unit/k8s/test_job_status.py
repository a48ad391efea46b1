"""Why a validate-on Job left no probe document, read from `kubectl get jobs,pods -o json`: the
file's Jobs and pods grouped by Job, one kind per Job in a fixed precedence, the replacement pod's
state after an eviction, and a hostile message cut to a bounded line of printable text.
(tests/unit/k8s/test_results.py runs the same through `imagekit k8s-results --status`.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.core.errors import InputError
from imagekit.k8s.job_status import DETAIL_CHARS, missing_lines, parse_status, read_status, why_missing
from tests.unit.k8s.test_results import EVICTED, OOM_KILLED, UNSCHEDULABLE, job_object, pod_object


def status_of(*objects: dict[str, Any]) -> dict[str, Any]:
    return parse_status(json.dumps({"kind": "List", "items": list(objects)}).encode(), "status.json")


def test_pods_are_grouped_under_their_job_by_its_labels() -> None:
    other = pod_object("j2", "2026-12-01T10:00:01Z", "Running")
    other["metadata"]["labels"] = {"job-name": "j2"}  # the label older Kubernetes writes
    status = status_of(
        job_object("j1"),
        pod_object("j1", "2026-12-01T10:00:01Z", "Pending"),
        other,
        {"kind": "Service", "metadata": {"name": "j1"}},  # anything else is ignored
        {"kind": "Pod", "metadata": {"name": "stray", "labels": {"app": "x"}}},
    )
    assert set(status) == {"j1", "j2"}
    assert status["j1"].job is not None and len(status["j1"].pods) == 1
    assert status["j2"].job is None and len(status["j2"].pods) == 1
    # one object alone, as `kubectl get job j1 -o json` prints it
    assert set(parse_status(json.dumps(job_object("j1")).encode(), "s")) == {"j1"}


@pytest.mark.parametrize(
    ("objects", "kind", "detail"),
    [
        ([], "not-found", "no Job j in status.json: never applied, or removed since"),
        (
            [job_object("j", ("Failed", "DeadlineExceeded"), ("Complete", "x"))],  # failed wins
            "deadline",
            "activeDeadlineSeconds passed; no pod was made",
        ),
        (
            [
                job_object("j", ("Failed", "BackoffLimitExceeded")),
                pod_object("j", "2026-12-01T10:00:01Z", "Failed", containerStatuses=[OOM_KILLED]),
            ],
            "failed",
            "failed without a probe document (BackoffLimitExceeded: BackoffLimitExceeded happened);"
            " its last pod: Failed, exit 137, OOMKilled",
        ),
        ([job_object("j", ("Complete", "CompletionsReached"))], "no-output", "the Job completed, but NOTE"),
        ([job_object("j", ("Suspended", "JobSuspended"))], "pending", "suspended: a queue holds it"),
        (
            [
                job_object("j", active=1),
                pod_object("j", "2026-12-01T10:00:01Z", "Failed", **EVICTED),
                pod_object("j", "2026-12-01T10:05:02Z", "Pending", **UNSCHEDULABLE),  # the last made
                pod_object("j", "2026-12-01T09:59:03Z", "Failed", **EVICTED),  # listed last, made first
            ],
            "evicted",
            "EvictionByEvictionAPI: Eviction API: evicting; replaced;"
            " its last pod: Pending, Unschedulable: 0/12",
        ),
        ([job_object("j", active=1)], "pending", "no pod yet"),
        (
            [job_object("j", active=1), pod_object("j", "2026-12-01T10:00:01Z", "Running")],
            "running",
            "Running",
        ),
        (
            [
                job_object("j", active=1),
                pod_object(
                    "j",
                    "2026-12-01T10:00:01Z",
                    "Pending",
                    containerStatuses=[
                        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "denied"}}}
                    ],
                ),
            ],
            "pending",
            "Pending, ImagePullBackOff denied",
        ),
    ],
    ids=["not-found", "deadline", "failed", "no-output", "suspended", "evicted", "no-pod", "running", "pull"],
)
def test_each_job_gets_one_kind_in_the_documented_precedence(
    objects: list[dict[str, Any]], kind: str, detail: str
) -> None:
    status = status_of(*objects, job_object("other")) if objects else status_of(job_object("other"))
    found = why_missing("j", status, "status.json", "NOTE")
    assert found[0] == kind and found[1].startswith(detail), found


def test_without_a_status_file_every_job_is_no_output_saying_what_was_given() -> None:
    assert why_missing("j", None, "", "no output of it given") == (
        "no-output",
        "no output of it given; --status FILE says why",
    )
    assert missing_lines([("j", "running", "Running")]) == ["j: running: Running"]


def test_a_hostile_message_is_cut_to_a_line_of_printable_text() -> None:
    message = "\x1b[31mred\x1b[0m\nsecond line " + "x" * 5_000
    job = job_object("j", ("Failed", "BackoffLimitExceeded"))
    job["status"]["conditions"][0]["message"] = message
    _, detail = why_missing("j", status_of(job), "s", "n")
    assert "\n" not in detail and "\x1b" not in detail
    assert len(detail) < 2 * DETAIL_CHARS


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ('"text"', "not a list of Kubernetes objects"),
        ('{"items": [1]}', "not a list of Kubernetes objects"),
        ('{"items": [{"kind": "Service"}]}', "no Job and no pod of a Job in it"),
        ('{"items": [], "items": []}', "not JSON"),  # a key twice: strict, never the last one taken
    ],
)
def test_a_file_that_is_no_list_of_jobs_and_pods_is_one_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "status.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_status(path)
    assert caught.value.message.startswith(f"{path}: {problem}") and "\n" not in caught.value.message
    with pytest.raises(InputError, match="no such file"):
        read_status(tmp_path / "missing.json")
    assert read_status_of_nothing(tmp_path) == {}


def read_status_of_nothing(tmp_path: Path) -> dict[str, Any]:
    """An empty list is no error: no Job was there (each is then not-found)."""
    path = tmp_path / "empty.json"
    path.write_text('{"kind": "List", "items": []}')
    return read_status(path)
