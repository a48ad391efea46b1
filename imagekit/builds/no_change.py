"""No-change runs: `imagekit build` answered from the record of the last run that changed nothing.

A nightly where nothing changed should cost a stat of each input and a look at the engine, not a
plan, a render of every Dockerfile and a Python process importing pydantic, Jinja and docker-py.
So a full run that built nothing (every cell and base skipped, no process started, not
interrupted) leaves a record, ``STATE_DIR/unchanged.json``:

- the run's key (``imagekit.builds.run_key``): the command line, the environment that steers a
  build (DOCKER_*, IMAGEKIT_*, PIP_*, PATH, ...), the interpreter, and a stat of every file of the
  imagekit package;
- a stat (path, size, mtime, inode, ctime, as ``imagekit.render.context`` keys its hashes) of every file
  the run opened for reading and every directory it listed or opened a file in, as Python's audit
  events saw them (``imagekit.builds.read_recorder``; and the files it used unopened,
  ``imagekit.core.paths.depends_on``): the matrix,
  templates, contexts, the wheelhouse listing, the closure cache, the modules it imported. Nothing
  is listed by hand, so a reader added later is not forgotten;
- the sha256 of the report the run wrote, and the pulled bases it found in the engine.

The files that decide the plan are the check's, whatever the record lists: the record names
which of its inputs the plan read (``ReadRecorder.mark_plan``: derived, not listed by hand: the
matrix, its template directory, compat data, the wheelhouse listing...), and it must name the
matrix this very run is given among them; imagekit's own files (its templates, its compat table)
are in the run's key. A record whose inputs were emptied, or replaced by other files that stat
the same, names no matrix: no record, the build runs in full. And the inputs the matrix names are
taken from the matrix, never from the record (``imagekit.builds.named_inputs``): every file and
directory below its template directory (or imagekit's), its local bases' contexts and its
wheelhouses must be among the record's inputs, each of which is checked, so a record edited to
leave the template directory out of both lists is no record either.

The next run with the same key, whose inputs all stat the same and whose report is byte for byte
that one, checks the engine instead of planning: an inspect of each image of the report (still
there, with its digest label and every tag the report names) and of each pulled base (still the
same image). On a new day it adds the dated tags the full run would add, only to images that carry
the same tag of the record's day. Then it rewrites the report (start, duration, tags and day;
verifications kept: the images are the same) and the record. Any difference, any doubt, an
unreadable record: the full run, which drops the record first.

The record is the state directory's, which anyone may edit: it is read bounded and strictly, and
it can only send a run down the full path or let it skip work the engine shows was done: it
names no image that the engine does not show already carrying the report's tags and digest.
The report is read here as JSON, without its pydantic model (building that costs more than the
whole answer); every reader of the report still checks it whole.
"""

# Paths here are the plain strings audit events hand over; thousands of stats a run go without Path.
# ruff: noqa: PTH100

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit.builds import command_line, named_inputs
from imagekit.builds.read_recorder import ReadRecorder, ignored_dirs
from imagekit.builds.run_key import argv_key, stat_key
from imagekit.core import naming
from imagekit.core.atomic import atomic_write
from imagekit.core.clock import timestamp, today
from imagekit.core.errors import ImagekitError
from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import FileKey, read_regular_file
from imagekit.core.text import counted
from imagekit.engine.raw_socket import EngineSocket, EngineSocketError
from imagekit.report.state import DEFAULT_STATE_DIR, REPORT_NAME, report_json_text, state_lock

if TYPE_CHECKING:
    from imagekit.builds.outcome import BuildOutcome
    from imagekit.plan.cells import Plan

RECORD_NAME = "unchanged.json"
RECORD_VERSION = 3  # 2: the files the plan read (``Record.plan``); 3: all the matrix names (``named_inputs``)
RECORD_BYTES = 32 << 20
MAX_FILES = named_inputs.MAX_ENTRIES


def _build_options(argv: Sequence[str]) -> Mapping[str, list[str | None]] | None:
    """The options of ``imagekit build ...`` (``argv``: after the program's name), as click reads
    them (``imagekit.builds.command_line.parse``); None for another command or any doubt."""
    return command_line.parse(argv[1:]) if argv[:1] == ["build"] else None


def _matrix(given: Mapping[str, list[str | None]]) -> str | None:
    found = command_line.last(given, "matrix")
    return str(command_line.DEFAULT_MATRIX) if found is None else found or None  # "": the command says


def matrix_of(argv: Sequence[str]) -> str | None:
    """The matrix ``imagekit build ...`` reads (``--matrix``/``-m`` in every spelling click takes,
    else the option's default); None where click would refuse the line, or it names no matrix.
    ``answer_command_line`` reads the line once and takes these same two steps."""
    given = _build_options(argv)
    return None if given is None else _matrix(given)


def answer_command_line(argv: Sequence[str]) -> bool:
    """Answer ``imagekit build ...`` before typer parses it, when the record of the last full run
    was left by these very arguments (in this directory, with this code and environment), and
    nothing changed: a no-change nightly then costs an interpreter, a stat of its inputs and an
    inspect of its images. A command line naming another state directory, or any doubt, goes to
    the command, which can still answer from the record once it has parsed its options."""
    given = _build_options(argv)
    if given is None or "state_dir" in given:
        return False
    matrix = _matrix(given)  # matrix_of's reading, which the tests hold to click's for every spelling
    if matrix is None:
        return False
    try:
        found = answer(DEFAULT_STATE_DIR, argv_key(argv), today(), matrix)
    except ImagekitError:
        return False  # the command says it, in its own words
    if found is None:
        return False
    found.show()
    return True


# -- the record --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    """What names a cell's image: the matrix's repository and immutable patterns, each cell's
    readable tag (``imagekit.core.naming.Tagging`` fills them for a day)."""

    repository: str
    patterns: tuple[str, ...]
    readable: Mapping[str, str]  # cell id -> readable tag

    @classmethod
    def of_plan(cls, plan: Plan) -> Names:
        tagging = plan.matrix.publish.tagging
        return cls(tagging.repository, tagging.patterns, {cell.id: cell.image_tag for cell in plan.cells})

    def references(self, cell: str, day: date, input_digest: str) -> list[str]:
        tagging = naming.Tagging(self.repository, self.patterns)
        return list(tagging.names(self.readable[cell], day, input_digest).references())


@dataclass(frozen=True)
class Record:
    # The run's key (its options as parsed) and, when it was started from a shell, the key of its
    # arguments as given (``argv_key``): the same arguments, code and environment parse the same.
    keys: tuple[str, ...]
    json: bool  # --json: the answer prints the report on stdout too
    day: date
    report_sha256: str
    inputs: tuple[FileKey, ...]
    bases: tuple[tuple[str, str], ...]  # (name inspected, image id)
    names: Names
    plan: tuple[str, ...] = ()  # the inputs the plan read: the matrix among them, each in ``inputs``

    def as_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "keys": list(self.keys),
            "json": self.json,
            "day": self.day.isoformat(),
            "report_sha256": self.report_sha256,
            "inputs": [list(k) for k in self.inputs],
            "bases": [list(b) for b in self.bases],
            "repository": self.names.repository,
            "patterns": list(self.names.patterns),
            "readable": dict(self.names.readable),
            "plan": list(self.plan),
        }


def _strings(value: Any, length: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(v, str) for v in value)
    )


def _file_keys(inputs: Any) -> tuple[FileKey, ...] | None:
    if not isinstance(inputs, list) or len(inputs) > MAX_FILES:
        return None
    keys: list[FileKey] = []
    for item in inputs:
        if not (isinstance(item, list) and len(item) == 5 and isinstance(item[0], str)):
            return None
        if not all(type(n) is int for n in item[1:]):  # not bool, not float
            return None
        keys.append((item[0], item[1], item[2], item[3], item[4]))
    return tuple(keys)


def _parse(raw: bytes) -> Record | None:
    """The record, or None for anything but exactly what ``write`` writes."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            return None
        inputs = _file_keys(data["inputs"])
        bases, readable = data["bases"], data["readable"]
        well_formed = (
            inputs is not None
            and isinstance(bases, list)
            and all(_strings(b, 2) for b in bases)
            and _strings(data["patterns"])
            and isinstance(readable, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in readable.items())
            and _strings(data["keys"])
            and _strings(data["plan"])
            and isinstance(data["json"], bool)
            and all(isinstance(data[k], str) for k in ("day", "report_sha256", "repository"))
        )
        if not well_formed or inputs is None:
            return None
        return Record(
            keys=tuple(data["keys"]),
            json=data["json"],
            day=date.fromisoformat(data["day"]),
            report_sha256=data["report_sha256"],
            inputs=inputs,
            bases=tuple((b[0], b[1]) for b in bases),
            names=Names(data["repository"], tuple(data["patterns"]), readable),
            plan=tuple(data["plan"]),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def forget(state_dir: Path) -> None:
    """Drop the record: a run that may change the report or the engine starts here."""
    # a record that cannot be removed is one whose report hash will no longer match
    with contextlib.suppress(OSError):
        (state_dir / RECORD_NAME).unlink(missing_ok=True)


def _write(state_dir: Path, record: Record) -> None:
    try:
        atomic_write(state_dir / RECORD_NAME, json.dumps(record.as_json(), sort_keys=True) + "\n", state_dir)
    except ImagekitError:
        forget(state_dir)  # a record is only ever a shortcut; without one the next run is a full one


def _report_digest(state_dir: Path) -> tuple[bytes, str] | None:
    try:
        raw = read_regular_file(state_dir / REPORT_NAME, STATE_BYTES, "the report.json imagekit writes")
    except (OSError, ImagekitError):
        return None
    return raw, hashlib.sha256(raw).hexdigest()


def record(
    state_dir: Path,
    keys: tuple[str, ...],
    as_json: bool,
    reads: ReadRecorder,
    outcome: BuildOutcome,
    names: Names,
    day: date,
    matrix: str | Path,
) -> str | None:
    """Leave the record of a full run of ``matrix`` when it changed nothing (every cell and base
    skipped, not interrupted); the reason when it leaves none. The caller holds the state
    directory's lock."""
    results = (*outcome.report.cells, *outcome.report.bases)
    if outcome.interrupted or not outcome.report.cells or any(r.status != "skipped" for r in results):
        return "it built something, or did not finish"
    if reads.started_process:
        return "it started a process, whose reads are not known"
    named = named_inputs.matrix_inputs(matrix, reads.ignored)
    if named is None:
        return "what its matrix names cannot be listed"
    inputs = reads.inputs(named)
    if len(inputs) > MAX_FILES:
        return f"it read more than {MAX_FILES:,} files, more than a record lists"
    found = _report_digest(state_dir)
    if found is None:
        return "its report cannot be read back"
    plan = tuple(sorted(reads.plan))
    _write(
        state_dir, Record(keys, as_json, day, found[1], tuple(inputs), outcome.external_bases, names, plan)
    )
    return None


# -- answering a run from the record -----------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    report: Path
    cells: int
    since: str  # when the recorded run started
    duration_s: float
    json: bool  # print the report on stdout as well
    text: str  # the report as this answer wrote it: printed as it is, never read back

    def show(self) -> None:
        """What the full run prints: the report with --json, then the summary line."""
        if self.json:
            sys.stdout.write(self.text)
            sys.stdout.flush()
        sys.stderr.write(f"imagekit: {self.summary}; report: {self.report}\n")

    @property
    def summary(self) -> str:
        return (
            f"{counted(self.cells, 'cell')}: {self.cells} skipped in {self.duration_s:.1f}s (nothing changed"
            f" since the run of {self.since})"
        )


def answer(state_dir: Path, key: str, today: date, matrix: str | Path) -> Answer | None:
    """Redo the recorded run's outcome when nothing it depends on changed; None: run in full.
    ``matrix``: the matrix this run is given, which the record must name as read by its plan."""
    if not (state_dir / RECORD_NAME).is_file():
        return None
    with state_lock(state_dir):
        return _answer(state_dir, key, today, matrix)


def names_its_plan(found: Record, matrix: str | Path) -> bool:
    """Whether the record names the plan's inputs, this matrix among them, each with its stat:
    what it leaves out would go unchecked, so a record that does not is no record."""
    listed = {k[0] for k in found.inputs}
    given = {os.path.abspath(matrix), os.path.realpath(matrix)}
    return bool(given & set(found.plan)) and set(found.plan) <= listed


def covers_the_matrix(found: Record, matrix: str | Path, state_dir: Path) -> bool:
    """Whether the record names everything ``matrix`` names, read from the matrix (as its stat
    in the record says it is), never from the record: its template directory, its contexts and
    wheelhouses, each whole. Left out, an edit there would go unchecked."""
    named = named_inputs.matrix_inputs(matrix, ignored_dirs(state_dir))
    return named is not None and named <= {k[0] for k in found.inputs}


def _answer(state_dir: Path, key: str, today: date, matrix: str | Path) -> Answer | None:
    clock = time.monotonic()
    try:
        raw = read_regular_file(state_dir / RECORD_NAME, RECORD_BYTES, "the unchanged.json imagekit writes")
    except (OSError, ImagekitError):
        return None
    found = _parse(raw)
    if found is None or key not in found.keys or not names_its_plan(found, matrix):
        return None
    if any(stat_key(k[0]) != k for k in found.inputs) or not covers_the_matrix(found, matrix, state_dir):
        return None
    read = _report_digest(state_dir)
    if read is None or read[1] != found.report_sha256:
        return None
    try:
        report = json.loads(read[0])
        retags = _engine_agrees(report, found, today)
    except (EngineSocketError, ValueError, KeyError, TypeError, AttributeError, ImagekitError):
        return None
    if retags is None:
        return None
    since = str(report["started"])
    duration = round(time.monotonic() - clock, 2)
    report["started"] = timestamp()
    report["duration_s"] = duration
    for result in report["cells"]:
        if result["id"] in retags:  # a new day: its dated tags, as a full run names them
            result["tags"], result["built_on"] = retags[result["id"]], today.isoformat()
    text = report_json_text(report)
    try:
        atomic_write(state_dir / REPORT_NAME, text, inside=state_dir)
    except ImagekitError:
        return None
    _write(
        state_dir,
        dataclasses.replace(found, day=today, report_sha256=hashlib.sha256(text.encode()).hexdigest()),
    )
    return Answer(state_dir / REPORT_NAME, len(report["cells"]), since, duration, found.json, text)


def _engine_agrees(report: dict[str, Any], found: Record, today: date) -> dict[str, list[str]] | None:
    """Check the engine holds what the report says, and put today's dated tags on the cells'
    images when the record is of another day. Each cell's new tags by id; None: not so."""
    engine = EngineSocket()
    if not report["cells"]:
        return None
    retags: dict[str, list[str]] = {}
    todo: list[tuple[str, str]] = []  # (image id, reference) to tag
    results = [(r, naming.INPUT_DIGEST_LABEL) for r in report["cells"]]
    results += [(r, naming.CONTEXT_DIGEST_LABEL) for r in report["bases"]]
    for result, label in results:
        if not _holds(engine, result, label):
            return None
        if label == naming.INPUT_DIGEST_LABEL and today != found.day:
            cell, digest, tags = result["id"], result["input_digest"], result["tags"]
            if cell not in found.names.readable or tags != found.names.references(cell, found.day, digest):
                return None  # tags the record's names do not make: nothing is tagged from them
            retags[cell] = found.names.references(cell, today, digest)
            todo += [(result["image_id"], ref) for ref in retags[cell] if ref not in tags]
    for name, image_id in found.bases:
        base = engine.image(name)
        if base is None or base.get("Id") != image_id:
            return None
    for image_id, ref in todo:
        repository, tag = naming.split_reference(ref)
        if tag is None:
            return None
        engine.tag(image_id, repository, tag)
    return retags


def _holds(engine: EngineSocket, result: dict[str, Any], label: str) -> bool:
    """Whether the engine holds a skipped result's image: its id, its digest label (``label``)
    and every tag the report names. An inspect per image, not one listing: an engine computes
    every image's sizes for a listing (~0.2 s for 70 images here), an inspect is a lookup."""
    digest, image_id, tags = result["input_digest"], result["image_id"], result["tags"]
    if result["status"] != "skipped" or not isinstance(digest, str) or not isinstance(image_id, str):
        return False
    image = engine.image(image_id)
    if image is None or image.get("Id") != image_id:
        return False
    if ((image.get("Config") or {}).get("Labels") or {}).get(label) != digest:
        return False
    return _strings(tags) and set(tags) <= set(image.get("RepoTags") or ())
