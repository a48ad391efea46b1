"""Refresh the torch section of imagekit/data/compat.yaml from the package registries' metadata.

Like cibuildwheel's bin/update_* scripts, this rebuilds a table from what the registries publish
and prints a reviewable unified diff; `--write` applies it (atomically).

What it reads (no wheel is downloaded):
  * the configured index's file list of torch, torchvision and torchaudio (PEP 691 JSON, or the
    PEP 503 HTML page): the torch patches of each release, the CPython versions with a manylinux
    x86_64 (and aarch64) wheel, and the upload dates;
  * pip's dry-run report (`pip install --dry-run --report`) for `torch==<patch>` against that
    index, dependencies resolved for one Linux x86_64 CPython: the CUDA variant PyPI's wheel is
    built for (the CUDA runtime it pulls), and the cuDNN, NCCL and cudart versions it pins;
  * pip's dry-run report (`--no-deps`) for the manylinux aarch64 wheel of each torch patch: its
    Requires-Dist (pip reads the PEP 658 metadata file, or the wheel's METADATA by HTTP range
    requests), whose markers, evaluated for Linux aarch64 here (pip would evaluate them for this
    host), say which CUDA build the aarch64 wheel is in effect: `aarch64.pypi`;
  * pip's dry-run report (`--no-deps`) for each recent torchvision / torchaudio release: which
    torch patch it pins (`Requires-Dist: torch==X`) or admits;
  * PyTorch's own wheel index (`--torch-index https://download.pytorch.org/whl`) when given and
    reachable: the CUDA variants of each release and what each variant's wheel pins, and the
    variants with an aarch64 wheel (`aarch64.variants`);
  * the index's file list of `cuda-toolkit`, NVIDIA's metapackage: the newest final release of each
    CUDA minor, written as the `toolkit` of that minor's row of the `cuda` section (the rest of the
    row is left as it is). A CUDA minor on the index that the table lacks is listed as a note: its
    row (the nvidia/cuda tag, the drivers) comes from NVIDIA's release notes and Docker Hub, which
    this tool does not read (neither is reachable from the project's machines).

Facts the registries cannot give (the variant list when PyTorch's index is not reachable, a
variant's pins that were not read, the NumPy caps, the CUDA rows' tags and drivers, the NGC stacks)
are kept from the existing table and listed as "kept" on stderr.

Offline: `--from-reports DIR` reads reports saved earlier (by `--save-reports DIR`) instead of
running pip or fetching anything; tests/fixtures/compat/ holds such a recording.

Examples (`scripts/refresh-compat.py`, the path the table's note and `imagekit plan` name, runs
the same):
  python -m imagekit.refresh.compat                       # diff against PyPI, newest release onwards
  python -m imagekit.refresh.compat --since 2.0 --write   # re-read every release and apply
  python -m imagekit.refresh.compat --torch-index https://download.pytorch.org/whl
  python -m imagekit.refresh.compat --from-reports tests/fixtures/compat --compat /tmp/compat.yaml

It uses imagekit's versions, platform and wheel tags, and the table's record types, which check
every release it writes, and `packaging` (PEP 508 markers). The modules beside it: compat_metadata
(what an answer says), compat_sources (where answers come from), compat_releases (the torch
section's releases), compat_table (the file's text).
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import ImagekitError, one_line
from imagekit.core.paths import read_regular_text
from imagekit.core.text import printable, redact
from imagekit.facts.compat import TorchRelease
from imagekit.refresh.compat_metadata import TOOLKIT_PROJECT, plain
from imagekit.refresh.compat_releases import Refresh, refresh
from imagekit.refresh.compat_sources import ERROR_CHARS, LiveSource, RecordedSource, Source
from imagekit.refresh.compat_table import (
    emit_section,
    refresh_toolkits,
    splice,
    toolkit_releases,
    validate_cuda,
)
from imagekit.refresh.pip_report import RefreshError

PROG = "refresh-compat"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_COMPAT = REPO / "imagekit" / "data" / "compat.yaml"
DEFAULT_INDEX = "https://pypi.org/simple"
COMPAT_BYTES = 1_000_000  # the compat table is about 16 kB


def label(path: Path) -> str:
    """The path a diff names: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return path.name


class MaskedParser(argparse.ArgumentParser):
    """argparse, its usage errors masked: it repeats what it could not parse, and
    `--index-urll https://user:password@host/simple` would print the password."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {printable(redact(message))}\n")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = MaskedParser(
        description="Rebuild the torch section of compat.yaml, and the CUDA rows' cuda-toolkit releases,"
        " from registry metadata and print the diff.",
        prog=PROG,
        epilog="Example: python -m imagekit.refresh.compat --since 2.10 --write",
    )
    parser.add_argument("--compat", type=Path, default=DEFAULT_COMPAT, help="compat.yaml to refresh")
    parser.add_argument("--write", action="store_true", help="apply the change (atomically)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the table would change")
    parser.add_argument("--index-url", default=DEFAULT_INDEX, help="package index (default: PyPI)")
    parser.add_argument(
        "--torch-index",
        help="PyTorch's wheel index, e.g. https://download.pytorch.org/whl: the variant lists and "
        "their pins (skipped with a note when unreachable)",
    )
    parser.add_argument("--since", help="oldest release to re-read (default: the newest in the table)")
    parser.add_argument("--from-reports", type=Path, metavar="DIR", help="read recorded reports, run nothing")
    parser.add_argument("--save-reports", type=Path, metavar="DIR", help="record what was read (trimmed)")
    parser.add_argument(
        "--pip", default=f"{sys.executable} -m pip", help="pip command (default: %(default)s)"
    )
    parser.add_argument(
        "--fast-deps",
        choices=("auto", "on", "off"),
        default="auto",
        help="read wheel METADATA by HTTP range requests; auto: when the index serves no PEP 658 metadata",
    )
    parser.add_argument("--keep-pip-config", action="store_true", help="let pip read its config files")
    parser.add_argument("--today", default=dt.date.today().isoformat(), help="checked_on date (YYYY-MM-DD)")
    args = parser.parse_args(argv)
    if args.from_reports and args.save_reports:
        parser.error("--from-reports and --save-reports exclude each other")
    if args.since and not plain(args.since):
        parser.error(f"--since takes a release like 2.10, not {args.since!r}")
    return args


def make_source(args: argparse.Namespace, notes: list[str]) -> Source:
    if args.from_reports:
        return RecordedSource(args.from_reports)
    return LiveSource(
        args.index_url,
        args.torch_index,
        args.pip.split(),
        args.fast_deps,
        args.keep_pip_config,
        args.save_reports,
        notes,
    )


def load_table(path: Path) -> tuple[str, dict[str, Any]]:
    """The compat file's text and its torch section; RefreshError when it is no compat table."""
    try:
        text = read_regular_text(path, COMPAT_BYTES, "the compat table (imagekit/data/compat.yaml)")
    except ImagekitError as exc:
        raise RefreshError(exc.message) from None
    except OSError as exc:  # none there
        raise RefreshError(f"{path}: {type(exc).__name__}: {one_line(exc, ERROR_CHARS)}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RefreshError(f"{path}: {type(exc).__name__}: {one_line(exc, ERROR_CHARS)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("torch") or {}, dict):
        raise RefreshError(f"{path}: no compat table (a mapping with a torch section)")
    return text, data.get("torch") or {}


def validate(releases: dict[str, dict[str, Any]]) -> None:
    """Every release as imagekit reads it (``imagekit.facts.compat.TorchRelease``): a refresh that would
    write what imagekit refuses ends here, with nothing written. A key the record does not know (one
    this tool keeps without refreshing it) is left to whoever added it."""
    for minor, entry in releases.items():
        TorchRelease(minor=minor, **{k: v for k, v in entry.items() if k in TorchRelease.model_fields})


def rebuild(args: argparse.Namespace, source: Source, notes: list[str]) -> tuple[str, str, Refresh]:
    """(the file's text, its refreshed text, the refresh); RefreshError or an exception of the
    kinds main reports when an answer has an unexpected shape."""
    text, table = load_table(args.compat)
    result = refresh(table, source, args.since, notes)
    validate(result.releases)
    new_text = splice(text, emit_section(result.releases, args.today))
    reread = yaml.safe_load(new_text)["torch"]
    if reread["releases"] != result.releases or reread["checked_on"] != args.today:
        raise AssertionError("the written section does not read back as built")  # a bug here, not input
    toolkits = toolkit_releases(source.listing(TOOLKIT_PROJECT))
    if not toolkits:
        raise RefreshError(f"the index lists no {TOOLKIT_PROJECT} release")
    new_text = refresh_toolkits(new_text, toolkits, result.kept, result.notes)
    validate_cuda(new_text, toolkits)
    return text, new_text, result


def say(line: str) -> None:
    """A line on stderr, a login in it masked: --index-url and --torch-index may carry one, and the
    index URL is repeated in the source's description, its notes and its errors."""
    print(printable(redact(line)), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    notes: list[str] = []
    source = make_source(args, notes)
    try:
        text, new_text, result = rebuild(args, source, notes)
    except ImagekitError as exc:  # a RefreshError, or a recording that cannot be saved
        say(f"{PROG}: {exc}")
        return int(exc.exit_code)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        # Every recording and registry answer is untrusted: one of an unexpected shape ends the
        # run in one line, with nothing written.
        detail = f"{type(exc).__name__}: {one_line(exc, ERROR_CHARS)}"
        say(f"{PROG}: {source.describe()}: an answer of unexpected shape ({detail})")
        return 2

    say(f"{PROG}: read {source.describe()}")
    for line in result.kept:
        say(f"  kept: {line}")
    for line in result.notes:
        say(f"  note: {line}")
    name = label(args.compat)
    diff = list(
        difflib.unified_diff(text.splitlines(True), new_text.splitlines(True), f"a/{name}", f"b/{name}")
    )
    sys.stdout.writelines(diff)
    if not diff:
        print(f"{PROG}: no change", file=sys.stderr)
    elif args.write:
        try:
            atomic_write(args.compat, new_text)
        except ImagekitError as exc:  # a link, a directory, a full disk: one line, nothing half-written
            say(f"{PROG}: {exc}")
            return int(exc.exit_code)
        print(f"{PROG}: wrote {args.compat}", file=sys.stderr)
    return 1 if (args.check and diff) else 0


if __name__ == "__main__":
    sys.exit(main())
