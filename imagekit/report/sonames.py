"""The shared libraries an image holds twice, as a verification records them: the probe's
libraries_once scan (the inventory's ``duplicate_libraries``), read as untrusted input.

The image printed it: every name is made printable and cut short, the lists are bounded
(``MAX_DUPLICATE_SONAMES``, ``MAX_DUPLICATE_PATHS``), a count or byte figure that is not a
plain non-negative integer is left out, and a count smaller than the list it came with is
raised to the list's length. Anything odd is dropped, never a reason to lose the verification.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Annotated

from imagekit.core.limits import MAX_DUPLICATE_PATHS, MAX_DUPLICATE_SONAMES, SHORT_CHARS
from imagekit.core.safetypes import RECORD_CONFIG, Count, Items, ShortText
from imagekit.core.text import counted, printable

COUNT_BOUND = 2**63


def _name(value: object) -> str:
    text = printable(str(value))
    return text if len(text) <= SHORT_CHARS else text[: SHORT_CHARS - 3] + "..."


def _count(value: object) -> int | None:
    return value if type(value) is int and 0 <= value < COUNT_BOUND else None


@dataclass(frozen=True)
class DuplicateLibrary:
    """One soname found at more than one file in the image, and (some of) those files."""

    __pydantic_config__ = RECORD_CONFIG

    soname: ShortText
    paths: Annotated[tuple[ShortText, ...], Items(MAX_DUPLICATE_PATHS)] = ()


@dataclass(frozen=True)
class Duplicates:
    """The image's duplicate sonames: ``count`` whole, ``libraries`` the first of them, the bytes
    the extra copies take, and ``bound`` when the probe's scan stopped early (the figures may be short)."""

    __pydantic_config__ = RECORD_CONFIG

    count: Count
    libraries: Annotated[tuple[DuplicateLibrary, ...], Items(MAX_DUPLICATE_SONAMES)] = ()
    extra_bytes: Count | None = None
    bound: ShortText | None = None

    @property
    def text(self) -> str:
        """``2 sonames twice``, with ``(scan stopped early)`` when a bound was hit: what a report shows."""
        return counted(self.count, "soname") + " twice" + (" (scan stopped early)" if self.bound else "")

    @classmethod
    def from_script(cls, raw: object) -> Duplicates | None:
        """The probe's ``duplicate_libraries``; None when absent (the check did not run, or an
        earlier probe) or not a mapping with a count."""
        if not isinstance(raw, Mapping):
            return None
        count = _count(raw.get("count"))
        if count is None:
            return None
        found = raw.get("duplicates")
        listed = list(islice(found.items(), MAX_DUPLICATE_SONAMES)) if isinstance(found, Mapping) else []
        libraries = tuple(
            DuplicateLibrary(
                _name(soname),
                tuple(islice((_name(p) for p in paths if isinstance(p, str)), MAX_DUPLICATE_PATHS)),
            )
            for soname, paths in listed
            if isinstance(soname, str) and soname and isinstance(paths, list)
        )
        bound = raw.get("bound")
        return cls(
            count=max(count, len(libraries)),
            libraries=libraries,
            extra_bytes=_count(raw.get("extra_bytes")),
            bound=_name(bound) if isinstance(bound, str) and bound else None,
        )
