"""A build run's shared state: what is running, and the one reason it was stopped.

The scheduler and the workers share it; ``stop`` (Ctrl-C, --fail-fast, an engine gone) aborts every
build in flight, whichever builder runs it (an engine build stream, a buildx process).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from imagekit.builds.jobs import JobFailed
from imagekit.engine.client import BuildAborted


class Abortable(Protocol):
    def abort(self, reason: str) -> None: ...


@dataclass
class RunState:
    """Shared between the scheduler and the workers; guarded by ``lock``."""

    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    engine_error: str | None = None
    active: set[Abortable] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, reason: str, engine_error: str | None = None) -> None:
        with self.lock:
            if not self.cancel.is_set():
                self.cancel_reason = reason
                if engine_error:
                    self.engine_error = engine_error
            self.cancel.set()
            streams = list(self.active)
        for stream in streams:
            stream.abort(reason)

    @contextlib.contextmanager
    def running(self, build: Abortable, timeout_s: float | None) -> Iterator[None]:
        """``build`` stoppable by the run (Ctrl-C, --fail-fast) and by --timeout while inside; a
        timeout fails the job (its own fault), a cancellation does not."""
        with self.lock:
            if self.cancel.is_set():
                raise BuildAborted(self.cancel_reason)
            self.active.add(build)
        timer = None
        if timeout_s:
            timer = threading.Timer(timeout_s, build.abort, (f"timed out after {timeout_s:g}s",))
            timer.daemon = True
            timer.start()
        try:
            yield
        except BuildAborted as aborted:
            if timer is not None and str(aborted).startswith("timed out"):
                raise JobFailed(str(aborted)) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
            with self.lock:
                self.active.discard(build)
