"""The inputs a matrix names, found from the matrix itself: what a no-change record must cover.

The no-change record (``imagekit.builds.no_change``) lists the files a full run read, and it lies in
the state directory, which anyone may edit: a record edited to leave out the template directory
would answer "nothing changed" after a template-only edit. So what it must cover is never taken
from the record. The matrix this run is given is read with the plan's own YAML reader (bounded,
each value as the plan reads it; no pydantic, no Jinja), the paths it names are taken from it
(``NAMED``: the template directory, else imagekit's own, whose front-end templates a matrix's own
directory may fall back to; each local base's build context; each wheelhouse of
``sources.pip.find_links``; the matrix's own advisories file; the lock of its bases' digests,
present or not), and each is walked: every
directory, file and link below it. A record answers only when it lists each of them, and its
stat check then covers them all; a full run adds the same walk to the record it leaves, so an
honest record always does.

What it costs an answer: PyYAML's import and a parse of a few kilobytes, and a listing of each
directory named (the stats are the record's own). The matrix's ``output`` is left out: the build
writes nothing there and reads nothing from it.
"""

# Paths here are plain strings, as the record keys them; a walk goes without Path objects.
# ruff: noqa: PTH100, PTH112, PTH118, PTH120

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from imagekit.core.errors import ImagekitError
from imagekit.core.paths import relative_path_is_inside
from imagekit.plan.pin_file import pins_path
from imagekit.render.template_dirs import default_templates_dir

# Entries one record may list (``imagekit.builds.no_change.MAX_FILES``): a walk past it is not
# finished, and a record cannot cover it.
MAX_ENTRIES = 200_000

# The keys of the matrix that name a path read by a build, relative to the matrix file, as the
# schema (``imagekit.plan.schema``) places them: ``*`` stands for every value of a mapping, ``[]``
# for every item of a list. A test holds this to every relative path of the schema but ``output``;
# a local base's ``dockerfile`` lies inside its ``context`` (a relative path stays inside its root).
NAMED: tuple[tuple[str, ...], ...] = (
    ("templates",),
    ("bases", "*", "build", "context"),
    ("sources", "pip", "find_links", "[]"),
    ("advisories", "file"),  # a matrix's own advisories: what the plan refuses or waives
)


class _NotAMatrix(Exception):
    """A value of another shape than the schema's: the full run's plan says what is wrong."""


def _values(value: Any, keys: Sequence[str]) -> Iterable[str]:
    """The strings at ``keys`` below ``value`` (absent keys name nothing)."""
    if not keys:
        if not isinstance(value, str):
            raise _NotAMatrix
        yield value
        return
    key, rest = keys[0], keys[1:]
    if key == "[]":
        if not isinstance(value, list):
            raise _NotAMatrix
        for item in value:
            yield from _values(item, rest)
    elif not isinstance(value, dict):
        raise _NotAMatrix
    elif key == "*":
        for item in value.values():
            yield from _values(item, rest)
    elif value.get(key) is not None:
        yield from _values(value[key], rest)


def named_paths(document: Mapping[str, Any]) -> list[str] | None:
    """The paths ``document`` (a matrix as read) names, relative to its file; None when one is not
    of the schema's shape or leaves the matrix directory (the plan refuses such a matrix)."""
    try:
        found = [path for keys in NAMED for path in _values(document, keys)]
    except _NotAMatrix:
        return None
    return found if all(relative_path_is_inside(path) for path in found) else None


def walk(paths: Iterable[str], ignored: tuple[str, ...]) -> set[str] | None:
    """Every path at or below ``paths`` (directories, files, links; links are not followed, as a
    context's walk does not), but those below ``ignored`` (the state directory); a path that is
    not there is listed too (its absence is an answer). None: more than ``MAX_ENTRIES``, or a
    directory that cannot be listed."""
    found: set[str] = set()

    def kept(path: str) -> bool:  # the state directory itself is left out too: each run writes there
        return not (path + os.sep).startswith(ignored)

    for top in filter(kept, paths):
        found.add(top)
        problem: list[OSError] = []
        for directory, dirnames, filenames in os.walk(top, onerror=problem.append):
            dirnames[:] = [name for name in dirnames if kept(os.path.join(directory, name))]
            found |= {os.path.join(directory, name) for name in (*dirnames, *filenames)}
            if len(found) > MAX_ENTRIES:
                return None
        if problem and os.path.isdir(top):  # a directory below it that cannot be listed
            return None
    return found


def matrix_inputs(matrix: str | Path, ignored: tuple[str, ...]) -> set[str] | None:
    """The absolute paths a no-change record of ``matrix`` must list: the matrix file, and all
    below the paths it names and imagekit's own templates. None when the matrix cannot be read as
    one, or a walk does not finish: no record then, the full run."""
    from imagekit.core.yamlsource import read_yaml_file  # PyYAML: only when a record is looked at

    try:
        document = read_yaml_file(Path(matrix)).value
    except (OSError, ImagekitError):
        return None
    named = named_paths(document) if isinstance(document, dict) else None
    if named is None:
        return None
    root = os.path.dirname(os.path.realpath(matrix))  # as the plan resolves it (``load_plan``)
    tops = [os.path.abspath(os.path.join(root, path)) for path in named]
    tops.append(os.path.abspath(default_templates_dir()))
    tops.append(str(pins_path(Path(root) / Path(matrix).name)))  # the bases' digests; absent or not
    found = walk(tops, ignored)
    return None if found is None else found | {os.path.abspath(matrix)}
