"""The classic path of ``imagekit build``: one image through the engine's own build endpoint.

docker-py's build API (``imagekit.engine.client.BuildStream``), read line by line into the job's
log; the step's error ends it. ``Builder`` keeps everything else, as for the BuildKit path
(``imagekit.build.buildkit``).
"""

from __future__ import annotations

import contextlib
import re
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

import docker
import requests
from docker.errors import APIError

from imagekit.build.jobs import TAIL_LINES, JobFailed
from imagekit.core.errors import ImagekitError
from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.secret_values import Lines
from imagekit.core.text import elided
from imagekit.engine.client import BuildRequest, BuildStream
from imagekit.report.store import BuildReport

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the classic builder colours a step's stderr
Running = Callable[[BuildStream], contextlib.AbstractContextManager[None]]


def build_image(
    api: docker.APIClient,
    request: BuildRequest,
    context: IO[bytes],
    write: Callable[[str], None],
    running: Running,
) -> str:
    """Run one build to its image id; raises JobFailed with the step's error (``running`` makes
    it stoppable: BuildAborted then)."""
    stream = BuildStream(api, request, context)
    image_id: str | None = None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    # The engine sends a step's output in chunks as the step wrote it: whole lines are written, so
    # that a secret value split over two chunks is masked (by ``write``, by JobFailed) whole.
    output = Lines()

    def written(lines: list[str]) -> None:
        for part in lines:
            plain = _ANSI.sub("", part)
            write(plain)
            tail.append(plain)

    with running(stream):
        for line in stream.lines():
            if "stream" in line:
                written(output.feed(str(line["stream"])))
            if "error" in line:
                written(output.flush())
                failed = JobFailed(" ".join(str(line["error"]).split()), tuple(tail))
                write(elided(f"ERROR: {failed.message}"))
                raise failed
            aux = line.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = str(aux["ID"])
    written(output.flush())
    if image_id is None:
        raise JobFailed("the engine ended the build without an image id", tuple(tail))
    return image_id


_RUNNING_IN = re.compile(r"---> Running in ([0-9a-f]{12,64})\s*$", re.MULTILINE)


def sweep_crashed_steps(api: docker.APIClient, previous: BuildReport | None, logs: Path) -> list[str]:
    """Remove the build-step containers that an engine crash left in the previous run.

    The classic builder removes a step's container itself (forcerm), unless the engine dies under
    it; then the container is still there when the engine comes back. It carries none of
    imagekit's labels (they land on the image at the end), but the cell's log names it
    (``---> Running in <id>``) and the report says which cells the engine failed under.
    """
    if previous is None:
        return []
    removed: list[str] = []
    for result in (*previous.bases, *previous.cells):
        if result.status != "failed" or "stopped answering" not in (result.error or ""):
            continue
        try:  # a regular file, and not past the report's own size limit: never a FIFO to block on
            raw = read_regular_file(logs / f"{result.id}.log", STATE_BYTES, "the build log")
        except (OSError, ImagekitError):
            continue
        text = raw.decode("utf-8", errors="replace")
        for container in _RUNNING_IN.findall(text):
            try:
                if api.inspect_container(container)["State"].get("Running"):
                    continue  # not a crash's leftover: something is using it
                api.remove_container(container, force=True)
            except (APIError, requests.RequestException):
                continue  # gone already (the usual case), or refused: nothing of ours to do
            removed.append(container)
    return removed
