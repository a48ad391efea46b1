"""CDI (Container Device Interface) device names: the grammar, owned here for the ``--gpus`` parser
and the report's record of it alike.

A fully qualified CDI device name is ``vendor/class=name``. Each part is held to what both the CDI
specification and its reference parser admit (cncf-tags/container-device-interface, SPEC.md
"Kind" and "CDI Devices", and pkg/parser/parser.go ValidateVendorName, ValidateClassName and
ValidateDeviceName): a name either forbids is refused here (exit 2), never sent to the engine.

- vendor (the kind's prefix): a DNS subdomain (SPEC.md), labels of letters, digits and ``-`` that
  start and end with a letter or digit, at most 63 characters each and 253 in all, with no empty
  label; and it starts with a letter (the parser).
- class (the kind's name segment): at most 63 characters (SPEC.md); starts with a letter (the
  parser) and ends with a letter or digit, with letters, digits, ``_``, ``-`` and ``.`` between.
- device: starts and ends with a letter or digit, with letters, digits, ``_``, ``-``, ``.`` and
  ``:`` between (the parser's ``:`` is what NVIDIA's MIG devices take, ``0:1``); no length bound.

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

VENDOR_CHARS = 253  # SPEC.md: the prefix is a DNS subdomain, "not longer than 253 characters"
LABEL_CHARS = 63  # RFC 1123: one DNS label of the vendor
CLASS_CHARS = 63  # SPEC.md: the name segment "must be 63 characters or less"

# Patterns without a look-behind or a nested repeat of overlapping parts: each runs in linear time
# (a report's --gpus text is matched against them too, ``imagekit.core.safetypes.GpuText``).
_LABEL = rf"[A-Za-z0-9](?:[A-Za-z0-9-]{{0,{LABEL_CHARS - 2}}}[A-Za-z0-9])?"
_FIRST_LABEL = rf"[A-Za-z](?:[A-Za-z0-9-]{{0,{LABEL_CHARS - 2}}}[A-Za-z0-9])?"
# the look-ahead bounds the whole vendor, which ends at the kind's one '/'
_VENDOR = rf"(?=[^/]{{1,{VENDOR_CHARS}}}/){_FIRST_LABEL}(?:\.{_LABEL})*"
_CLASS = rf"[A-Za-z](?:[A-Za-z0-9_.-]{{0,{CLASS_CHARS - 2}}}[A-Za-z0-9])?"
_DEVICE = r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"
KIND_PATTERN = rf"{_VENDOR}/{_CLASS}"
QUALIFIED_NAME_PATTERN = rf"{KIND_PATTERN}={_DEVICE}"
# a recorded CDI request: the prefix and one or more qualified names
CDI_REQUEST_PATTERN = rf"{CDI_PREFIX}{QUALIFIED_NAME_PATTERN}(?:,{QUALIFIED_NAME_PATTERN})*"

_QUALIFIED = re.compile(rf"({KIND_PATTERN})=({_DEVICE})")
_DEVICE_ONLY = re.compile(_DEVICE)


def is_qualified_name(text: str) -> bool:
    """Whether ``text`` is one fully qualified CDI device name (``vendor/class=name``)."""
    return _QUALIFIED.fullmatch(text) is not None


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
