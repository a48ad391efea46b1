"""Version strings as imagekit compares them: numerically, component by component.

``"12.10" > "12.9"``, ``"2.1.0a0+32f93b1"`` is 2.1.0 followed by a local part. Every module that
orders or buckets versions (compatibility rules, the HTML grid, tags) asks here.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Versions longer than this are no versions: refusing them keeps int() away from Python's
# 4300-digit conversion limit and keeps sort keys small.
MAX_COMPONENT_DIGITS = 9


# A plan asks about the same few versions for every cell: the answers are cached (bounded).
@lru_cache(maxsize=4096)
def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key of a dotted version; stops at the first component that is not all digits
    (keeping that component's leading digits: ``"0a0" -> 0``)."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits[:MAX_COMPONENT_DIGITS]))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def compare(left: str, right: str) -> int:
    """-1, 0 or 1, numerically; a missing component counts as 0 (``"2.10" == "2.10.0"``), which
    tuples of ``version_key`` alone would order ``(2, 10) < (2, 10, 0)``."""
    a, b = version_key(left), version_key(right)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def display_key(version: str) -> tuple[tuple[int, ...], str]:
    """Sort key for showing versions in order: numeric first, the text breaks ties."""
    return version_key(version), version


@lru_cache(maxsize=4096)
def minor_of(version: str) -> str:
    """``"2.1.2" -> "2.1"``, ``"12.1.1" -> "12.1"``, ``"2.1.0a0+32f93b1" -> "2.1"``."""
    return ".".join(str(n) for n in version_key(version)[:2])


@lru_cache(maxsize=4096)
def cuda_variant(cuda: str) -> str:
    """The wheel variant of a CUDA minor: ``"12.1" -> "cu121"``; ``"cpu"`` stays ``"cpu"``."""
    if cuda == "cpu":
        return "cpu"
    return "cu" + "".join(str(n) for n in version_key(cuda)[:2])


def variant_cuda(variant: str) -> str:
    """The CUDA minor of a wheel variant: ``"cu121" -> "12.1"``, ``"cu130" -> "13.0"``."""
    digits = variant.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def project_key(name: str) -> str:
    """A project name as pip compares it (PEP 503): runs of ``-``, ``_`` and ``.`` are one ``-``,
    case does not matter (``Torch_Vision`` and ``torch.vision`` are ``torch-vision``)."""
    return re.sub(r"[-_.]+", "-", name).lower()
