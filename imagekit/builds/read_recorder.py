"""What a full run read: the files it opened for reading and the directories it listed, from
Python's audit events, and whether it started a process (whose reads nobody sees).

The no-change record (``imagekit.builds.no_change``) lists a stat of each of them, so nothing is
listed by hand and a reader added later is not forgotten; ``ReadRecorder.mark_plan`` names which
of them the plan read.
"""

# Paths here are the plain strings audit events hand over; thousands of stats a run go without Path.
# ruff: noqa: PTH100, PTH120

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.builds.run_key import stat_key
from imagekit.core.paths import INPUT_EVENT, FileKey

# Kernel files change under a reader and say nothing about a build's inputs.
_KERNEL = ("/proc/", "/sys/", "/dev/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass
class ReadRecorder:
    """The files a run opens for reading and the directories it lists, from Python's audit events
    (every thread of the process); whether it started a process, whose reads nobody sees."""

    ignored: tuple[str, ...]  # real paths of directories whose files are not inputs (the state dir)
    files: set[str] = field(default_factory=set)
    directories: set[str] = field(default_factory=set)
    started_process: bool = False
    plan: frozenset[str] = frozenset()  # what was read up to ``mark_plan``: the plan's inputs

    def mark_plan(self) -> None:
        """What was read so far decided the plan: a record must name every one of them."""
        self.plan = frozenset(self.files | self.directories)

    def __enter__(self) -> ReadRecorder:
        if not _Hook.installed:  # an audit hook stays for the life of the process: one, idle when unused
            sys.addaudithook(_Hook.audit)
            _Hook.installed = True
        _Hook.recording = self
        return self

    def __exit__(self, *_: object) -> None:
        _Hook.recording = None

    def note(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                if any(c in mode for c in "wax+"):
                    return
            elif isinstance(flags, int) and flags & _WRITE_FLAGS:
                return
            into = self.files
        elif event == INPUT_EVENT:
            path = args[0]
            into = self.files
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args[0] is not None else "."
            into = self.directories
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork"):
            self.started_process = True
            return
        else:
            return
        if isinstance(path, int):  # an open descriptor: its name was recorded when it was opened
            return
        try:
            name = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if not name.startswith(_KERNEL) and not name.startswith(self.ignored):
            into.add(name)

    def inputs(self, named: set[str]) -> list[FileKey]:
        """A stat of every input, of the directory of each file (a file added beside it) and of
        every path ``named`` (all the matrix names, ``named_inputs.matrix_inputs``)."""
        paths = self.files | self.directories | {os.path.dirname(f) for f in self.files} | named
        return [stat_key(p) for p in sorted(paths)]


class _Hook:
    installed = False
    recording: ReadRecorder | None = None

    @staticmethod
    def audit(event: str, args: tuple[Any, ...]) -> None:
        recorder = _Hook.recording
        if recorder is not None:
            recorder.note(event, args)


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Reads and processes that choose how cells would be built, not what they are (the BuildKit
    builder's discovery: `docker buildx version|inspect`), kept out of the recording: a no-change
    run builds nothing with them. Only where no other thread reads (before the build pool)."""
    recorder, _Hook.recording = _Hook.recording, None
    try:
        yield
    finally:
        _Hook.recording = recorder


def ignored_dirs(*paths: Path) -> tuple[str, ...]:
    out: list[str] = []
    for path in paths:
        for name in {os.path.abspath(path), os.path.realpath(path)}:
            out.append(name.rstrip(os.sep) + os.sep)
    return tuple(out)
