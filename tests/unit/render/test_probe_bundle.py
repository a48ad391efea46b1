"""The probe as a package and as what ships: one module per concern, ``protocol`` the one place
check names live, and a zipapp that is the same bytes every time it is built."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from imagekit.probe import protocol, run
from imagekit.probe.frontends.run import CHECKS as FRONTEND_CHECKS
from imagekit.render import probe_bundle
from imagekit.render.contract import packaged_check_script, packaged_frontend_check
from tests.conftest import REPO

PROBE = REPO / "imagekit" / "probe"
MAX_MODULE_LINES = 600
# Check names no other word of the host shares ("python", "torch", "driver" are labels and keys too).
DISTINCT_NAMES = tuple(
    n for n in (*protocol.CHECK_NAMES, protocol.IMAGE_SECRETS) if "_" in n or n in ("nvcc", "nccl")
)


def test_the_zipapp_is_byte_identical_across_builds() -> None:
    for entry in probe_bundle.ENTRIES:
        first, second = probe_bundle.build_zipapp(entry), probe_bundle.build_zipapp(entry)
        assert first == second
        assert first.startswith(b"#!/usr/bin/env python3\n")


def test_the_zipapp_entries_are_sorted_dated_and_free_of_bytecode() -> None:
    with zipfile.ZipFile(io.BytesIO(probe_bundle.build_zipapp())) as archive:
        infos = archive.infolist()
    names = [i.filename for i in infos]
    assert names == sorted(names) and "__main__.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    modules = {f"{probe_bundle.PACKAGE}/{p.relative_to(PROBE).as_posix()}" for p in PROBE.rglob("*.py")}
    assert "imagekit_probe/frontends/run.py" in modules  # a subpackage's modules ship too
    # tables.json: generated from imagekit/data (tests/unit/facts/test_probe_tables.py)
    assert set(names) - {"__main__.py"} == modules | {f"{probe_bundle.PACKAGE}/tables.json"}
    assert {i.date_time for i in infos} == {probe_bundle.DATE_TIME}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}


def test_the_shipped_files_are_the_zipapps(tmp_path: Path) -> None:
    assert packaged_check_script().read_bytes() == probe_bundle.build_zipapp("check")
    assert packaged_frontend_check().read_bytes() == probe_bundle.build_zipapp("frontend")
    script = tmp_path / "check.py"
    script.write_bytes(packaged_check_script().read_bytes())
    done = subprocess.run(
        [sys.executable, str(script), "--only", "python", "--expect-python", "3.0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    document = json.loads(done.stdout)
    assert document["schema"] == protocol.SCHEMA
    assert [c["name"] for c in document["checks"]] == list(protocol.CHECK_NAMES)
    assert tuple(document) == protocol.DOCUMENT_FIELDS
    assert tuple(document["summary"]) == protocol.SUMMARY_FIELDS
    assert all(tuple(c) == protocol.RESULT_FIELDS for c in document["checks"])
    assert {c["status"] for c in document["checks"]} <= set(protocol.STATUSES)


def test_the_protocol_names_the_checks_the_probe_runs() -> None:
    assert tuple(name for name, _ in run.CHECKS) == protocol.CHECK_NAMES
    assert {k: tuple(n for n, _ in v) for k, v in FRONTEND_CHECKS.items()} == protocol.FRONTEND_CHECKS


def test_no_probe_module_is_long() -> None:
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PROBE.rglob("*.py")}
    assert max(lengths.values()) <= MAX_MODULE_LINES, lengths


def test_check_names_are_spelled_only_in_the_protocol() -> None:
    """Outside the probe (and the tests) a check is named through ``protocol``, never by a literal."""
    found = []
    for path in sorted((REPO / "imagekit").rglob("*.py")):
        if PROBE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in DISTINCT_NAMES:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert not found
