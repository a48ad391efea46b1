"""Where a run's builder is chosen, once: ``BACKENDS``, keyed by ``BuilderKind``
(``imagekit.core.build_kinds``, the one spelling of the builders), and ``backend_for``.

Apart from the package's ``__init__``, so that importing one backend module imports no other.
"""

from __future__ import annotations

from collections.abc import Mapping

from imagekit.builds.backends.base import BuildBackend, Setup
from imagekit.builds.backends.buildkit import BuildkitBackend
from imagekit.builds.backends.classic import ClassicBackend
from imagekit.core.build_kinds import BuilderKind

BACKENDS: Mapping[BuilderKind, type[BuildBackend]] = {
    "classic": ClassicBackend,
    "buildkit": BuildkitBackend,
}


def backend_for(kind: BuilderKind, setup: Setup) -> BuildBackend:
    """The backend of builder ``kind``, opened for the run (an unfit engine or buildx refused here)."""
    return BACKENDS[kind](setup)
