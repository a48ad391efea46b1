"""Refresh imagekit/data/cuda_wheels.yaml: the CUDA wheels each torch build of a matrix pins exactly.

For every cell of the matrix that installs torch from an index (not a wheelhouse, not a fixed stack,
not CPU), pip resolves `torch==<patch>` against that cell's torch index, as the cell's Python on the
cell's machine would install it (the target's wheel tags and environment markers, whatever the
host), in dry-run mode with a report (PEP 658 metadata where the index serves it: no wheel is
installed). From the report it keeps the CUDA wheels reached from torch through exact `==` pins only
(imagekit.facts.cuda_wheels says why), checks each against the version pip resolved, and checks that
the build is the cell's variant (its CUDA runtime wheel is that CUDA minor): an index that serves
another build under that version (PyPI's torch 2.5.1 is cu124, not cu121) is refused for that cell.

It prints a reviewable unified diff; `--write` applies it (atomically). Entries it did not read are
kept, and listed on stderr.

  python -m imagekit.refresh.cuda_wheels                    # each cell's own index (matrix.yaml)
  python -m imagekit.refresh.cuda_wheels --index-url https://pypi.org/simple --write
  python -m imagekit.refresh.cuda_wheels --from-reports tests/fixtures/cuda_wheels --data /tmp/out.yaml

`--index-url` replaces every cell's torch index (PyPI carries one CUDA build per torch release: the
cells of other variants are refused, not guessed). `--save-reports DIR` keeps pip's reports, trimmed
to what is read; `--from-reports DIR` reads them instead of running pip (offline).
`scripts/refresh-cuda-wheels.py`, the path the table's header and the Dockerfiles name, runs the
same. How a report is read and checked: imagekit.refresh.cuda_pins.

Every input is untrusted: a report (an index answers its content; a recorded one may be edited or
misnamed), the table, the flags. A report is checked for its size, nesting and every type it is read
for, and must be of the very build asked for (torch version, variant, machine); one that is not is a
"not read: <build>: <why>" line, its entry kept. A table, matrix or flag that cannot be used ends the
run in one line and exit 2 (3 where the machine is at fault), nothing written. A login in a URL
(`--index-url https://user:password@host/...`) is masked in every line printed, and never written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import yaml

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import MESSAGE_CHARS, ExitCode, ImagekitError, InputError
from imagekit.core.limits import URL_CHARS
from imagekit.core.paths import check_length, os_problem, read_regular_text
from imagekit.core.platforms import get as get_platform
from imagekit.core.text import printable, redact, shown
from imagekit.core.yamlsource import parse_yaml
from imagekit.facts.cuda_wheels import parse_cuda_wheels
from imagekit.plan.cells import WheelCell
from imagekit.plan.matrix import load_plan
from imagekit.refresh.cuda_pins import Build, parse_report, pins_of, report_text, resolve
from imagekit.refresh.pip_report import RefreshError
from imagekit.render.pip_sources import pip_arguments, uses_wheelhouse

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "imagekit" / "data" / "cuda_wheels.yaml"
DATA_BYTES = 1_000_000  # the table: 20 kB for 16 builds
PYPI_SIMPLE = "https://pypi.org/simple"  # pip's default index
HEADER = """\
# CUDA's library wheels each torch build pins exactly: a cell that installs torch from an index
# installs these first, in a layer of their own (imagekit/facts/cuda_wheels.py says why exactly
# these). Written by scripts/refresh-cuda-wheels.py from pip's dry-run reports, or entered by hand
# from the public sources its note in `sources` names (PyTorch's own index is not reachable from
# every machine); `bundled` names the builds of PyTorch's index whose wheel brings CUDA inside it.
"""


def builds_of(matrix_path: Path, index_url: str | None) -> list[Build]:
    """The distinct torch builds the matrix's index-installed CUDA cells install."""
    plan = load_plan(matrix_path)
    found: dict[tuple[str, str, str], Build] = {}
    for cell in plan.cells:
        if not isinstance(cell, WheelCell) or not cell.is_cuda or uses_wheelhouse(cell, plan.matrix):
            continue
        if plan.matrix.sources.pip.no_index:
            continue  # no index: nothing to read
        torch_args, _ = pip_arguments(cell, plan.matrix)
        # no --index-url: pip's own default, PyPI (torch 2.1.2 cu121 comes from there: its build on
        # PyTorch's index bundles CUDA, imagekit.render.pip_sources)
        url = index_url or _option(torch_args, "--index-url") or PYPI_SIMPLE
        machine = get_platform(cell.platform).machine
        system = plan.compat.operating_systems.get(cell.os)
        build = Build(cell.torch, cell.variant, machine, cell.python, system.glibc if system else None, url)
        found.setdefault((build.torch, build.variant, build.machine), build)
    return [found[k] for k in sorted(found)]


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# -- the table ---------------------------------------------------------------------------------------

Table = dict[str, dict[str, dict[str, list[str]]]]
TABLE = "the CUDA wheel table (imagekit/data/cuda_wheels.yaml or a copy of it)"


def read_table_text(path: Path) -> str | None:
    """The table's text; None where there is none yet.

    Read as imagekit reads every file it did not make (``imagekit.core.paths.read_regular_file``: a
    regular file, checked on the descriptor opened, within its bound), and never through a symbolic
    link: `--write` replaces the file where it is (``atomic_write`` refuses to replace a link), so a
    diff read through a link would be one that cannot be written."""
    check_length(path, "--data")
    try:
        return read_regular_text(path, DATA_BYTES, f"--data: {TABLE}", follow_links=False)
    except FileNotFoundError:
        return None


Build3 = tuple[str, str, str]
Notes = dict[str, dict[Build3, str]]  # "sources" and "bundled": (torch, variant, machine) -> note


def read_table(path: Path, notes: Notes | None = None) -> tuple[str, Table, str | None]:
    """The table at ``path``: its text ("" where there is none yet), its entries, its checked_on;
    its ``sources`` and ``bundled`` notes into ``notes`` where given (a rewrite keeps them).
    Anything but a table the package would read is one InputError naming the file and the place."""
    text = read_table_text(path)
    if text is None:
        return "", {}, None
    # imagekit's own YAML reader: bounded in size, nesting and alias expansion, plain tags only
    value = parse_yaml(text, str(path)).value
    if value is None:  # nothing but comments: no entry yet
        return text, {}, None
    try:
        wheels = parse_cuda_wheels(value, str(path))
    except ValueError as exc:
        raise InputError(f"{exc}; fix the entry, or refresh into a new file with --data") from None
    checked_on = value.get("checked_on")
    if checked_on is not None and checked_on != "" and not _is_date(checked_on):
        shown_value = shown(checked_on) if isinstance(checked_on, str) else f"a {type(checked_on).__name__}"
        raise InputError(f"{path}: checked_on: {shown_value} is not a date (YYYY-MM-DD)")
    if notes is not None:
        notes["sources"] = dict(wheels.sources)
        notes["bundled"] = dict(wheels.bundled)
    table: Table = {}
    for (torch, variant, machine), pins in wheels.pins.items():
        table.setdefault(torch, {}).setdefault(variant, {})[machine] = list(pins)
    return text, table, checked_on


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _is_date(value: object) -> bool:
    """Whether ``value`` is a date as the table writes it (ISO 8601, ``2026-12-03``)."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def render(
    table: Mapping[str, Mapping[str, Mapping[str, Iterable[str]]]],
    checked_on: str,
    notes: Notes | None = None,
) -> str:
    """The file's text: the pins, then each entry's source note (one written for an entry that has
    none: the dry run of ``checked_on``), then the bundled builds' notes."""
    sources = dict((notes or {}).get("sources", {}))
    lines = [HEADER.rstrip("\n"), f'checked_on: "{checked_on}"', "wheels:" if table else "wheels: {}"]
    for torch in sorted(table, key=_release):
        lines.append(f'  "{torch}":')
        for variant in sorted(table[torch]):
            lines.append(f"    {variant}:")
            for machine in sorted(table[torch][variant]):
                lines.append(f"      {machine}:")
                lines += [f"        - {pin}" for pin in table[torch][variant][machine]]
                sources.setdefault(
                    (torch, variant, machine),
                    f"pip --dry-run --report of torch=={torch} from its index, {checked_on}",
                )
    for section, found in (("sources", sources), ("bundled", (notes or {}).get("bundled", {}))):
        if found:
            lines.append(f"{section}:")
            lines += _note_lines(found)
    text = "\n".join(lines) + "\n"
    parse_cuda_wheels(yaml.safe_load(text))  # what it writes, the package can read
    return text


def _release(version: str) -> list[int]:
    return [int(p) for p in version.split(".")]


def _note_lines(notes: Mapping[Build3, str]) -> list[str]:
    lines: list[str] = []
    last: tuple[str, ...] = ()
    for torch, variant, machine in sorted(notes, key=lambda b: (_release(b[0]), b[1], b[2])):
        if last[:1] != (torch,):
            lines.append(f'  "{torch}":')
        if last[:2] != (torch, variant):
            lines.append(f"    {variant}:")
        lines.append(f"      {machine}: {json.dumps(notes[(torch, variant, machine)])}")
        last = (torch, variant)
    return lines


# -- the command line --------------------------------------------------------------------------------

PROG = "refresh-cuda-wheels"


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors masked and on one line: it repeats what it could not parse, and
    `--index-urll https://user:password@host/simple` would print the password."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.INVALID_INPUT, f"{PROG}: error: {printable(redact(message))}\n")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument("--data", type=Path, default=DATA, help="the table to refresh")
    parser.add_argument("--index-url", help="read every build from this index (default: each cell's)")
    parser.add_argument("--save-reports", type=Path, metavar="DIR")
    parser.add_argument("--from-reports", type=Path, metavar="DIR")
    parser.add_argument("--today", default=dt.date.today().isoformat())
    parser.add_argument("--write", action="store_true", help="apply the change (default: print the diff)")
    args = parser.parse_args(argv)
    if not _is_date(args.today):
        raise InputError(f"--today: {shown(args.today)} is not a date; give it as YYYY-MM-DD")
    if args.index_url is not None:
        _check_index_url(args.index_url)
    for flag in ("matrix", "data", "save_reports", "from_reports"):
        if getattr(args, flag) is not None:
            check_length(getattr(args, flag), f"--{flag.replace('_', '-')}")
    if args.from_reports is not None and not args.from_reports.is_dir():
        raise InputError(
            f"--from-reports {args.from_reports}: not a directory; pass the one --save-reports wrote"
        )
    return args


def _check_index_url(url: str) -> None:
    """--index-url: an http(s) or file URL in printable ASCII (it reaches pip's command line and
    every line about a build). A login in it is pip's to use, and never printed."""
    if len(url) > URL_CHARS:
        raise InputError(f"--index-url: {len(url):,} characters long; a URL has at most {URL_CHARS:,}")
    if not all(" " < char < "\x7f" for char in url):
        raise InputError(
            f"--index-url: {shown(url)} holds a space or a character that is not printable ASCII"
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # reading it refuses a port past 65535, or one that is not a number
        del port
    except ValueError:
        raise InputError(f"--index-url: {shown(url)} names no valid host or port") from None
    if parts.scheme not in ("http", "https", "file") or (parts.scheme != "file" and not parts.hostname):
        raise InputError(
            f"--index-url: {shown(url)} is not an index's http(s) or file URL (like https://pypi.org/simple)"
        )


def _say(line: str) -> None:
    """One line on stderr as a person may read it: no login (an index URL's password), no control
    character (a value from a report), bounded (pip's error line)."""
    text = printable(redact(line))
    print(text if len(text) <= MESSAGE_CHARS else f"{text[: MESSAGE_CHARS - 3]}...", file=sys.stderr)


def _read_build(build: Build, args: argparse.Namespace) -> tuple[str, ...]:
    """The pins of one build, from its recorded report or from pip; saved where asked (trimmed)."""
    if args.from_reports:
        path = args.from_reports / f"{build.key}.json"
        text = report_text(
            path, f"no report {path.name} in {args.from_reports}; record it with --save-reports"
        )
    else:
        text = resolve(build)
    report = parse_report(text)
    if args.save_reports:
        saved = json.dumps(report, indent=1, sort_keys=True) + "\n"
        atomic_write(args.save_reports / f"{build.key}.json", saved)
    return pins_of(build, report)


def refresh(args: argparse.Namespace) -> int:
    notes: Notes = {}
    before, table, checked_on = read_table(args.data, notes)
    builds = builds_of(args.matrix, args.index_url)
    if args.save_reports:
        try:
            args.save_reports.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_problem(
                exc, args.save_reports, "make the directory", "pass a directory as --save-reports"
            ) from None
    read = 0
    for build in builds:
        try:
            pins = _read_build(build, args)
        # ValueError: packaging's own refusal of a value the report's checks let through
        except (RefreshError, ValueError) as exc:
            kept = table.get(build.torch, {}).get(build.variant, {}).get(build.machine)
            _say(f"not read: {build.key}: {exc}{'; the entry is kept' if kept else ''}")
            continue
        table.setdefault(build.torch, {}).setdefault(build.variant, {})[build.machine] = list(pins)
        read += 1
    after = render(
        table, args.today if read else (checked_on if checked_on is not None else args.today), notes
    )
    if args.write:
        if after != before:
            atomic_write(args.data, after)
        return 0
    name = printable(redact(str(args.data)))
    sys.stdout.writelines(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), name, "refreshed")
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return refresh(parse_arguments(argv))
    except ImagekitError as exc:  # a table, matrix, flag or directory that cannot be used: one line
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
