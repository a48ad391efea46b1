"""The report store: records round-trip, unreadable and hostile reports are one line, what is written
reads back."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_ITEMS, SHORT_CHARS, STATE_BYTES, TEXT_CHARS
from imagekit.report import text as report_text
from imagekit.report.html import render_html
from imagekit.report.state import REPORT_NAME
from imagekit.report.store import REPORT_VERSION, BuildReport, read_report, write_report
from imagekit.report.verification import CheckRecord, Verification
from tests.conftest import REPO
from tests.unit.report_samples import build_report, sample_report
from tests.unit.strategies import json_values

# -- the report --------------------------------------------------------------------------------------------


def test_report_round_trip(tmp_path: Path) -> None:
    report = build_report()
    path = write_report(tmp_path, report)
    assert path == tmp_path / REPORT_NAME
    assert read_report(tmp_path) == report
    assert report.cells[0].advisories  # the sample's built cell carries a waived finding
    data = json.loads(path.read_text())
    assert data["cells"][0]["advisories"][0] == {
        "id": "CVE-2025-32434",
        "package": "torch",
        "version": "2.1.2",
        "fixed": "2.6.0",
        "severity": "critical",
        "summary": "torch.load(weights_only=True) runs code",
        "waived": "seed row: loads only trusted checkpoints",
    }
    del data["cells"][0]["advisories"]  # a report of an earlier release: none recorded
    path.write_text(json.dumps(data))
    assert read_report(tmp_path).cells[0].advisories == ()
    write_report(tmp_path, report)
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
    report = build_report()
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
    data = build_report().as_json()
    data["version"] = version
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    assert caught.value.message.startswith(
        f"{tmp_path / REPORT_NAME}: report version {version!r}; expected {REPORT_VERSION}; fix it, or move"
        f" it away (`mv {tmp_path / REPORT_NAME} {tmp_path / REPORT_NAME}.bad`)"
    )


def test_read_report_without_a_version(tmp_path: Path) -> None:
    data = build_report().as_json()
    del data["version"]
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="report version None; expected 1"):
        read_report(tmp_path)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([1, 2], "(top level): a report is a JSON object, not list"),
        ("a string", "(top level): a report is a JSON object, not str"),
        ({"version": 1}, "matrix: is required"),
        (
            {
                "version": 1,
                "matrix": "m",
                "started": "2024-05-17T10:00:00Z",
                "duration_s": 1,
                "engine": "e",
                "cells": [{}],
                "bases": [],
            },
            "cells[0].id: is required",
        ),
        (
            {
                "version": 1,
                "matrix": "m",
                "started": "2024-05-17T10:00:00Z",
                "duration_s": 1,
                "engine": "e",
                "cells": 3,
                "bases": [],
            },
            "cells: Input should be a valid array",
        ),
    ],
    ids=["list", "string", "keys missing", "cell empty", "cells not a list"],
)
def test_read_report_of_a_malformed_report(tmp_path: Path, data: object, field: str) -> None:
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: ") as caught:
        read_report(tmp_path)
    assert caught.value.message.startswith(f"{tmp_path / REPORT_NAME}: {field}"), caught.value.message


# -- a hostile report: every field checked by its type and pattern ----------------------------------------


def _report_with(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    data = build_report().as_json()
    data["cells"][0]["verification"] = sample_report().cells[0].verification.as_json()  # type: ignore[union-attr]
    data["cells"][0]["verification"]["target"] = data["cells"][0]["id"]  # a verification of this cell
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


HOSTILE_FIELDS: list[tuple[tuple[str | int, ...], object, str]] = [
    (("cells", 0, "id"), "../../etc/passwd", "cells[0].id: '../../etc/passwd' is not a cell id"),
    (
        ("cells", 0, "id"),
        "<img src=x onerror=alert(1)>",
        "cells[0].id: '<img src=x onerror=alert(1)>' holds a space",
    ),
    (("cells", 0, "id"), "a\nimagekit: error: forged", "cells[0].id: "),
    (("cells", 0, "status"), "exploded", "cells[0].status: Input should be 'built', 'skipped', 'failed' or"),
    (("cells", 0, "duration_s"), "83.4", "cells[0].duration_s: Input should be a valid number"),
    (("cells", 0, "duration_s"), -1, "cells[0].duration_s: Input should be greater than or equal to 0"),
    (("cells", 0, "size"), True, "cells[0].size: Input should be a valid integer"),
    (("cells", 0, "size"), "1 GB", "cells[0].size: Input should be a valid integer"),
    (("cells", 0, "tags", 0), "reg/it:$(reboot)", "cells[0].tags[0]: 'reg/it:$(reboot)' holds '$('"),
    (("cells", 0, "tags", 0), "r/" + "x" * 600, "cells[0].tags[0]: is 602 characters long"),
    (("cells", 0, "image_id"), 12, "cells[0].image_id: Input should be a valid string"),
    (("cells", 0, "image_id"), "sha256:zz", "cells[0].image_id: 'sha256:zz' is not a digest"),
    (("cells", 0, "base_digest"), "x@sha256:" + "a" * 64 + "\nFROM evil", "cells[0].base_digest: "),
    (("cells", 0, "error_tail"), "one line", "cells[0].error_tail: Input should be a valid array"),
    (("cells", 0, "error"), "x" * 70_000, "cells[0].error: is 70,000 characters long"),
    (("cells", 0, "verification", "verdict"), "excellent", "cells[0].verification.verdict: Input should be"),
    (
        ("cells", 0, "verification", "gpu_visible"),
        1,
        "cells[0].verification.gpu_visible: Input should be a valid",
    ),
    (
        ("cells", 0, "verification", "metrics"),
        {"gemm.tflops": {"deep": []}},
        "cells[0].verification.metrics.",
    ),
    (
        ("cells", 0, "verification", "metrics"),
        {"gemm_perf.tflops": 10**400},  # parses as an int, then overflows a float where shown
        "cells[0].verification.metrics.gemm_perf.tflops: is an integer past 64 bits",
    ),
    (
        ("cells", 0, "verification", "gpu_figures"),
        [{"index": 0, "power_w": {"min": 1e300}}],
        "cells[0].verification.gpu_figures[0].power_w.min: ",
    ),
    (
        ("cells", 0, "verification", "gpu_figures"),
        [{"throttle": {"x": {"deep": []}}}],
        "cells[0].verification.gpu_figures[0].throttle.x: ",
    ),
    (
        ("cells", 0, "verification", "checks", 0, "duration_s"),
        "fast",
        "cells[0].verification.checks[0].duration_s",
    ),
    (
        ("cells", 0, "verification", "gpus"),
        "all; rm -rf /",
        "cells[0].verification.gpus: 'all; rm -rf /' holds",
    ),
    (("started",), "yesterday", "started: 'yesterday' is not an ISO 8601 time"),
    (("bases",), {"a": 1}, "bases: Input should be a valid array"),
]


@pytest.mark.parametrize(("path", "value", "problem"), HOSTILE_FIELDS, ids=lambda v: str(v)[:30])
def test_a_wrong_field_is_one_line_naming_file_and_field(
    tmp_path: Path, path: tuple[str | int, ...], value: object, problem: str
) -> None:
    (tmp_path / REPORT_NAME).write_text(json.dumps(_report_with(path, value)))
    with pytest.raises(InputError) as caught:
        read_report(tmp_path)
    message = caught.value.message
    assert message.startswith(f"{tmp_path / REPORT_NAME}: {problem}"), message
    assert message.endswith("to start a new report") and "\n" not in message and len(message) < 1_000


JSON = json_values()
REPORT_FIELDS = [
    ("matrix",), ("started",), ("duration_s",), ("engine",), ("cells",), ("bases",),
    *[("cells", 0, key) for key in build_report().as_json()["cells"][0]],
    *[("cells", 0, "verification", key) for key in sample_report().cells[0].verification.as_json()],  # type: ignore[union-attr]
    *[("cells", 0, "verification", "checks", 0, key) for key in ("name", "status", "required", "detail")],
]  # fmt: skip


@settings(max_examples=400, deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(REPORT_FIELDS), value=JSON)
def test_any_value_in_any_field_reads_or_is_one_input_error(
    tmp_path_factory: pytest.TempPathFactory, field: tuple[str | int, ...], value: object
) -> None:
    state = tmp_path_factory.mktemp("report")
    (state / REPORT_NAME).write_text(json.dumps(_report_with(field, value)))
    try:
        report = read_report(state)
    except InputError as exc:
        assert exc.message.startswith(f"{state / REPORT_NAME}: ") and "\n" not in exc.message
    else:
        # whatever was accepted is what the types promise: rendering it cannot fail
        assert isinstance(report, BuildReport)
        report_text.markdown(report)
        report_text.rows(report)
        render_html(report)


@settings(max_examples=300, deadline=2000, derandomize=True)
@given(JSON)
def test_any_json_document_reads_or_is_one_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: object
) -> None:
    state = tmp_path_factory.mktemp("report")
    (state / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"^{state / REPORT_NAME}: "):
        read_report(state)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"version": 1, "cells": ' + "[" * 50_000 + "]" * 50_000 + "}",
        '{"version": ' + "9" * 5_000 + "}",
        '{"version": 1, "matrix": "m", "started": "2024-05-17T10:00:00Z", "duration_s": 1e999, "engine": "e",'
        ' "cells": [], "bases": []}',
        '{"version": 1, "matrix": "m", "started": "2024-05-17T10:00:00Z", "duration_s": NaN, "engine": "e",'
        ' "cells": [], "bases": []}',
        "\ufeff{}",
    ],
    ids=["deep array", "deep cells", "5,000-digit version", "infinite duration", "NaN duration", "BOM"],
)
def test_hostile_json_is_one_input_error(tmp_path: Path, text: str) -> None:
    (tmp_path / REPORT_NAME).write_text(text)
    with pytest.raises(InputError, match=rf"^{tmp_path / REPORT_NAME}: "):
        read_report(tmp_path)


def test_no_view_of_a_report_shows_a_login(tmp_path: Path) -> None:
    """An edited or merged report, or a build log that echoed an index URL: masked as it is read."""
    login = "https://ci:s3cret@pypi.example/simple"
    data = _report_with(("cells", 0, "error"), f"pip could not reach {login}")
    data["cells"][0]["error_tail"] = [f"Looking in indexes: {login}"]
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    report = read_report(tmp_path)
    views = [report_text.markdown(report), render_html(report), json.dumps(report.as_json())]
    views.append(repr(report_text.rows(report)))
    assert all("s3cret" not in view for view in views) and "***@pypi.example" in render_html(report)
    write_report(tmp_path, replace(report, cells=(replace(report.cells[0], error=login),)))
    assert "s3cret" not in (tmp_path / REPORT_NAME).read_text()


def test_a_report_its_reader_would_refuse_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """merge-reports and bake-import can gather more cells than a report holds: refused on write,
    never written to fail every later run."""
    write_report(tmp_path, build_report())
    kept = (tmp_path / REPORT_NAME).read_bytes()
    cells = build_report().cells
    monkeypatch.setattr("imagekit.report.store.MAX_RECORDS", len(cells) - 1)
    with pytest.raises(
        InputError, match=rf"the report would hold {len(cells)} cells; a report holds at most"
    ):
        write_report(tmp_path, build_report())
    monkeypatch.setattr("imagekit.report.store.MAX_RECORDS", 100_000)
    monkeypatch.setattr("imagekit.report.store.STATE_BYTES", len(kept) - 1)
    with pytest.raises(InputError, match=r"the report would be larger than"):
        write_report(tmp_path, build_report())
    assert (tmp_path / REPORT_NAME).read_bytes() == kept and list(tmp_path.iterdir()) == [
        tmp_path / REPORT_NAME
    ]


def test_a_report_past_the_size_limit_is_not_read(tmp_path: Path) -> None:
    with (tmp_path / REPORT_NAME).open("wb") as handle:
        handle.truncate(STATE_BYTES + 1)  # sparse: no disk used, and never read
    with pytest.raises(InputError, match=rf"larger than {STATE_BYTES} bytes"):
        read_report(tmp_path)


def test_a_report_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / REPORT_NAME)
    with pytest.raises(InputError, match=r"is a FIFO, not a regular file"):
        read_report(tmp_path)


def test_a_report_written_by_the_previous_release_still_reads() -> None:
    # written by main before the typed reader: the offline demo's build + verify --gpus none
    report = read_report(REPO / "tests" / "fixtures" / "state" / "v1")
    assert report.cells[0].id == "debian-local-torch2.13.0-cpu-py3.11-runtime"
    assert len(report.cells) == 3 and [b.id for b in report.bases] == ["base-debian-local"]
    assert all(c.verification is not None and c.verification.verdict == "checked" for c in report.cells)


def test_checks_an_image_reports_are_cut_to_what_a_report_holds() -> None:
    record = CheckRecord.from_script(
        {"name": "n" * 5_000, "status": "pass", "detail": "d" * 100_000, "duration_s": float("inf")}
    )
    assert len(record.name) == SHORT_CHARS and record.detail is not None and len(record.detail) == TEXT_CHARS
    assert record.duration_s == 0.0
    assert CheckRecord.from_script({"duration_s": "fast"}).duration_s == 0.0


def test_a_report_without_the_staging_fields_still_reads(tmp_path: Path) -> None:
    """Reports written before build --push: no `staged`, no verified `image_digest`."""
    report = build_report()
    data = report.as_json()
    assert data["cells"][0]["staged"]["digest"] == "sha256:" + "5" * 64
    for entry in data["cells"]:
        entry.pop("staged")
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    old = read_report(tmp_path)
    assert all(r.staged is None for r in old.cells)
    assert old.cells[1:] == report.cells[1:]


def test_staged_names_the_reference_by_digest() -> None:
    staged = build_report().cells[0].staged
    assert staged is not None
    assert staged.name == "reg/it-staging"
    assert staged.reference == "reg/it-staging@sha256:" + "5" * 64


def test_an_unchanged_image_keeps_its_staging_record_and_a_rebuilt_one_loses_it() -> None:
    from imagekit.report.store import Staged

    previous = build_report()
    staged = Staged("reg", "it", "staging-0", "sha256:" + "7" * 64)
    before = replace(previous, cells=(replace(previous.cells[1], staged=staged),))
    again = replace(previous, cells=(previous.cells[1],))  # skipped, same image id, nothing staged
    assert again.keeping_verifications(before).cells[0].staged == staged
    rebuilt = replace(previous, cells=(replace(previous.cells[1], image_id="sha256:" + "8" * 64),))
    assert rebuilt.keeping_verifications(before).cells[0].staged is None


def test_what_imagekit_writes_it_reads_back_whatever_an_engine_or_image_said(tmp_path: Path) -> None:
    """An engine's error, a build log line and an image's check output may be any length or shape:
    the report written is still one the reader accepts."""
    report = build_report()
    checks = tuple(CheckRecord.from_script({"name": f"c{i}", "status": "pass"}) for i in range(2_000))
    verification = Verification(
        report.cells[2].id, "sha256:" + "1" * 64, "all", "failed", True, False, checks, 1.0,
        error="e" * 200_000, log="/x/" + "l" * 3_000,
    )  # fmt: skip
    failed = replace(
        report.cells[2], error="x" * 200_000, error_tail=("y" * 100_000,) * 3, verification=verification
    )
    write_report(tmp_path, replace(report, cells=(*report.cells[:2], failed)))
    back = read_report(tmp_path).cells[2]
    assert back.error is not None and len(back.error) == TEXT_CHARS
    assert back.verification is not None and len(back.verification.checks) == MAX_ITEMS


@pytest.mark.parametrize("key", ["cells", "bases"])
def test_two_records_of_one_id_are_a_conflict_not_last_wins(tmp_path: Path, key: str) -> None:
    write_report(tmp_path, build_report())
    data = json.loads((tmp_path / REPORT_NAME).read_text())
    first = data[key][0]
    data[key].append({**first, "image_id": "sha256:" + "9" * 64})
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"{key}: two records for {first['id']}"):
        read_report(tmp_path)


VALIDATED_BUT = {
    "no GPU asked for": {"gpu_requested": False},
    "no GPU visible": {"gpu_visible": False},
    "every check skipped": {"checks": [{"name": "cuda_available", "status": "skip", "required": True}]},
    "a required check failed": {
        "checks": [
            {"name": "cuda_available", "status": "pass", "required": True},
            {"name": "gemm_gpu", "status": "pass", "required": True},
            {"name": "torch", "status": "fail", "required": True},
        ]
    },
    "the GPU GEMM missing": {"checks": [{"name": "cuda_available", "status": "pass", "required": True}]},
    "the run itself failed": {"error": "timed out after 900s; the check container was killed"},
    "no checks at all": {"checks": []},
    "an emulated run": {"platform": {"machine": "aarch64", "host_machine": "x86_64", "emulated": True}},
    "machines that differ, said native": {
        "platform": {"machine": "arm64", "host_machine": "x86_64", "emulated": False}
    },
}


@pytest.mark.parametrize("change", VALIDATED_BUT.values(), ids=VALIDATED_BUT.keys())
def test_a_validated_verdict_its_own_record_contradicts_is_refused(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """publish, merge-reports and k8s read reports through here: a verdict field edited to
    'validated' never promotes anything."""
    data = _report_with(("cells", 0, "verification", "verdict"), "validated")
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    assert read_report(tmp_path).cells[0].verification.verdict == "validated"  # type: ignore[union-attr]
    data["cells"][0]["verification"].update(change)
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"cells: cuda-built: its verification says 'validated', but its"):
        read_report(tmp_path)


def test_a_verification_of_another_cell_is_refused(tmp_path: Path) -> None:
    data = _report_with(("cells", 0, "verification", "target"), "cuda-skipped")
    (tmp_path / REPORT_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"cells: cuda-built: its verification is of cuda-skipped"):
        read_report(tmp_path)
