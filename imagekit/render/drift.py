"""The committed generated Dockerfiles: write them, and check they equal what would be rendered.

docker-library style: ``dockerfiles/generated/`` is committed and carries a do-not-edit header;
``imagekit render --check`` fails CI when it drifts from the matrix and the templates.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.core.atomic import atomic_write_all
from imagekit.core.errors import DriftError, InputError
from imagekit.core.paths import open_regular_file, os_problem, read_regular_text, refuse_links
from imagekit.plan.cells import Cell, Plan
from imagekit.render.dockerfile import HEADER_MARK, Renderer


def output_dir(plan: Plan, out: Path | None) -> Path:
    if out is not None:
        return out
    return plan.root / plan.matrix.output


def dockerfile_path(out: Path, cell: Cell) -> Path:
    return out / cell.id / "Dockerfile"


def expected_files(plan: Plan, renderer: Renderer, out: Path) -> dict[Path, str]:
    return {dockerfile_path(out, cell): renderer.dockerfile(cell) for cell in plan.cells}


def _generated_files(out: Path) -> set[Path]:
    """Files under ``out`` that imagekit generated (they carry the header), for stale detection."""
    found: set[Path] = set()
    if not out.is_dir():
        return found
    mark = HEADER_MARK.encode()
    for path in out.glob("*/Dockerfile"):
        try:
            # only the mark's bytes, of a regular file: a FIFO would block the read, a directory
            # or a device is no file of ours
            with open_regular_file(path, "a Dockerfile `imagekit render` wrote") as (fd, _):
                if os.read(fd, len(mark)) == mark:
                    found.add(path)
        except (OSError, InputError):
            continue
    return found


@dataclass(frozen=True)
class Drift:
    changed: tuple[Path, ...]
    missing: tuple[Path, ...]
    stale: tuple[Path, ...]

    @property
    def clean(self) -> bool:
        return not (self.changed or self.missing or self.stale)

    def describe(self) -> str:
        parts = []
        for label, paths in (("differ", self.changed), ("missing", self.missing), ("stale", self.stale)):
            if paths:
                shown = ", ".join(str(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
                parts.append(f"{len(paths)} {label} ({shown})")
        return "; ".join(parts)


def check_drift(expected: Mapping[Path, str], out: Path) -> Drift:
    if os.path.lexists(out) and not out.is_dir():  # a file or a device: no output directory at all
        raise InputError(f"{out}: is not a directory; name the directory the Dockerfiles go to (--out)")
    changed, missing = [], []
    for path, text in sorted(expected.items()):
        try:
            # no more than the expected text's bytes: a larger file differs, unread; a FIFO, a
            # directory or a device is never read, only replaced
            current = read_regular_text(path, len(text.encode()), "the Dockerfile `imagekit render` writes")
        except FileNotFoundError:
            missing.append(path)
            continue
        except InputError:  # writing it says why, if it cannot be replaced
            changed.append(path)
            continue
        if current != text:
            changed.append(path)
    stale = sorted(_generated_files(out) - set(expected))
    return Drift(tuple(changed), tuple(missing), tuple(stale))


def write_rendered(expected: Mapping[Path, str], out: Path) -> Drift:
    """Bring ``out`` to the expected state; returns what had to change.

    Stale files go first: a stale file that cannot be removed stops the run before any Dockerfile
    is rewritten, so the directory never holds new Dockerfiles beside a cell that no longer exists.
    """
    drift = check_drift(expected, out)
    for path in drift.stale:
        refuse_links(path, out)  # a linked directory under out is no stale file of ours
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise os_problem(exc, path, "remove the stale generated Dockerfile") from None
        with contextlib.suppress(OSError):  # the directory holds something of the user's: keep it
            path.parent.rmdir()
    atomic_write_all({path: expected[path] for path in (*drift.changed, *drift.missing)}, out)
    return drift


def raise_on_drift(drift: Drift, matrix_name: str) -> None:
    if not drift.clean:
        raise DriftError(
            f"generated Dockerfiles are out of date: {drift.describe()};"
            f" run `imagekit render --matrix {matrix_name}` and commit the result"
        )
