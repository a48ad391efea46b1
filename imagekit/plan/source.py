"""Where a matrix's images come from, as their OCI labels say it: when (created), which commit
(revision) and which repository (source).

Read from the matrix's git checkout, never made up: ``created`` is SOURCE_DATE_EPOCH when it is set
(the reproducible-builds variable; CI sets it to the commit's time), else the time of the commit
the checkout is at; ``revision`` is that commit only while no tracked file differs from it (an edited
tree was not built from it); ``source`` is the origin's URL without a login. Outside a checkout (or
without git) each is left out.

The label only: BuildKit's file times and build argument stay the fixed ``REPRODUCIBLE_EPOCH``.
SOURCE_DATE_EPOCH is a build argument every RUN step sees, so a time that moves with each commit
would miss the registry cache on every step of every cell, and layers that cells share (the venv,
the CUDA wheels) stay one blob only when their file times are equal, also across commits; labels
are given to the build (``--label``), in no step's cache key. None of the three is in a cell's
input digest: each changes with every commit, also one that changes
no input (a README), and a no-change run keeps the image built from equal inputs, whose labels
truly name the commit and time it was built from. ``rebuild-check`` rebuilds with the image's own
labels.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from imagekit.core import naming
from imagekit.core.clock import source_date_epoch, utc_seconds
from imagekit.core.errors import InputError
from imagekit.core.limits import EARLIEST_EPOCH, GIT_ANSWER_BYTES, GIT_QUERY_DEADLINE_S, URL_CHARS

CREATED_LABEL = f"{naming.OCI_PREFIX}created"
REVISION_LABEL = f"{naming.OCI_PREFIX}revision"
SOURCE_LABEL = f"{naming.OCI_PREFIX}source"
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 and SHA-256 repositories
_URL_SCHEMES = ("https", "http", "ssh", "git")
# What a label's value may not hold: it is written into `--label K=V` and bake files, and a
# rendered LABEL quotes it (imagekit.render.recipe's _LABEL_BREAKERS).
_BREAKERS = re.compile(r'["\\$\s]')


@dataclass(frozen=True)
class SourceState:
    epoch: int | None = None  # SOURCE_DATE_EPOCH, else the commit's time; None: neither is known
    revision: str | None = None  # the commit, when the checkout's tracked files are that commit's
    url: str | None = None  # the origin's URL, without a login

    def labels(self) -> dict[str, str]:
        """The OCI labels these give, only those known."""
        found = {
            CREATED_LABEL: utc_seconds(self.epoch) if self.epoch is not None else None,
            REVISION_LABEL: self.revision,
            SOURCE_LABEL: self.url,
        }
        return {key: value for key, value in found.items() if value}


def source_state(root: Path) -> SourceState:
    """What the checkout holding ``root`` (the matrix's directory) says. A malformed
    SOURCE_DATE_EPOCH is refused (InputError), as ``imagekit.core.clock.today`` refuses it."""
    epoch = source_date_epoch()
    if epoch is not None and epoch < EARLIEST_EPOCH:
        raise InputError(
            f"SOURCE_DATE_EPOCH={epoch} is before 1980-01-01 ({EARLIEST_EPOCH}), the earliest time"
            " zip and wheel tools accept, so no commit of a matrix is older; set it to the commit's time"
            " (`git log -1 --format=%ct`)"
        )
    found = _checkout(root.resolve())
    if epoch is None:
        return found
    return SourceState(epoch, found.revision, found.url)


@functools.lru_cache(maxsize=8)
def _checkout(root: Path) -> SourceState:
    head = _git(root, "log", "-1", "--format=%H %ct", "HEAD")
    if head is None:
        return SourceState()
    commit, _, seconds = head.strip().partition(" ")
    if not _COMMIT.fullmatch(commit) or not seconds.isdigit() or len(seconds) > 12:
        return SourceState()
    epoch = int(seconds) if int(seconds) >= EARLIEST_EPOCH else None
    # exit 0: no tracked file differs from HEAD (staged or not); 1: some do; else: unknown
    clean = _git(root, "diff", "--quiet", "HEAD", "--") is not None
    return SourceState(
        epoch, commit if clean else None, _public_url(_git(root, "remote", "get-url", "origin"))
    )


def _git(root: Path, *args: str) -> str | None:
    """git's answer in ``root``; None where git is missing, fails, is slow or answers too much."""
    env = {
        **os.environ,
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",  # a query, never a writer of the user's index
    }
    try:
        done = subprocess.run(
            # no fsmonitor hook: the query runs no program a repository's config names
            ["git", "-c", "core.fsmonitor=false", "-C", str(root), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=GIT_QUERY_DEADLINE_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or len(done.stdout) > GIT_ANSWER_BYTES:
        return None
    return done.stdout.decode("utf-8", "replace")


def _public_url(text: str | None) -> str | None:
    """A remote's URL as a label may name it: a URL of a network scheme, its login left out;
    None for a local path, an scp-like address or anything a label could not hold."""
    if text is None:
        return None
    url = text.strip()
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _URL_SCHEMES or not host:
        return None
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    netloc = host if port is None else f"{host}:{port}"
    public = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    if len(public) > URL_CHARS or _BREAKERS.search(public):
        return None
    return public
