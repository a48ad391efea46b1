"""CDI (Container Device Interface) device names: the grammar, owned here for the ``--gpus`` parser
and the report's record of it alike.

A fully qualified CDI device name is ``vendor/class=name`` (the CDI specification's parser,
cncf-tags/container-device-interface pkg/parser): vendor and class start with a letter, end with a
letter or digit, and hold letters, digits, ``_``, ``-`` and ``.`` in between; the device name
starts and ends with a letter or digit and may also hold ``:`` (NVIDIA's MIG devices, ``0:1``).
NVIDIA's spec (``nvidia-ctk cdi generate``) names each GPU by index (``nvidia.com/gpu=0``), by UUID
(``nvidia.com/gpu=GPU-...``), each MIG device as ``GPU:MIG`` index or ``MIG-...`` UUID, and all of
them ``nvidia.com/gpu=all``. No part holds a comma, so a comma separates names.
"""

from __future__ import annotations

import re

# what `--gpus` takes before CDI names, and how a run records them (cdi:NAME,NAME)
CDI_PREFIX = "cdi:"
NVIDIA_GPU_KIND = "nvidia.com/gpu"  # NVIDIA's CDI vendor/class
ALL_DEVICES = "all"  # the device NVIDIA's spec defines as every GPU of the node

_VENDOR_OR_CLASS = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_DEVICE = r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"
KIND_PATTERN = rf"{_VENDOR_OR_CLASS}/{_VENDOR_OR_CLASS}"
QUALIFIED_NAME_PATTERN = rf"{KIND_PATTERN}={_DEVICE}"
# a recorded CDI request: the prefix and one or more qualified names
CDI_REQUEST_PATTERN = rf"{CDI_PREFIX}{QUALIFIED_NAME_PATTERN}(?:,{QUALIFIED_NAME_PATTERN})*"

_QUALIFIED = re.compile(rf"({KIND_PATTERN})=({_DEVICE})")
_DEVICE_ONLY = re.compile(_DEVICE)


def is_qualified_name(text: str) -> bool:
    """Whether ``text`` is one fully qualified CDI device name (``vendor/class=name``)."""
    return _QUALIFIED.fullmatch(text) is not None


def kind_of(name: str) -> str:
    """``vendor/class`` of a qualified name."""
    return name.partition("=")[0]


def device_of(name: str) -> str:
    """The device part of a qualified name (``0``, ``GPU-...``, ``all``)."""
    return name.partition("=")[2]


def qualified_names(text: str) -> tuple[str, ...] | None:
    """The comma-separated names of ``text`` as fully qualified names, in order, each once; a part
    without a kind takes the kind of the name before it (``nvidia.com/gpu=0,1``). None when a part
    is not a CDI name (or the first one has no kind)."""
    names: list[str] = []
    kind: str | None = None
    for part in text.split(","):
        found = _QUALIFIED.fullmatch(part)
        if found is not None:
            kind = found.group(1)
            name = part
        elif kind is not None and _DEVICE_ONLY.fullmatch(part):
            name = f"{kind}={part}"
        else:
            return None
        if name not in names:
            names.append(name)
    return tuple(names)
