"""The compat table's text as the refresh writes it: the torch section (its note, one line per key
of a release), spliced in for the old one, and each CUDA row's `toolkit` set in the row's own form;
the rest of the file is left byte for byte as it was."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from imagekit.core.versions import version_key
from imagekit.facts.compat import Aarch64Wheels, CudaRelease, TorchRelease
from imagekit.refresh.compat_metadata import LIBRARY_KEYS, TOOLKIT_PROJECT, parse_wheel, plain
from imagekit.refresh.pip_report import RefreshError

# The keys of a release this tool writes, in the order imagekit's records declare them.
RELEASE_KEYS = tuple(k for k in TorchRelease.model_fields if k != "minor")  # variants ... aarch64, checked
AARCH64_KEYS = tuple(Aarch64Wheels.model_fields)  # pypi, variants, checked

SOURCE_NOTE = (
    "Refreshed by scripts/refresh-compat.py from registry metadata (no wheel downloaded). "
    "pypi_default, cudnn_major and the PyPI variant's libraries (the nvidia-cudnn-cuX, nvidia-nccl-cuX "
    "and nvidia-cuda-runtime versions a resolution of torch==<patch> installs): pip's dry-run report "
    "(--report) against PyPI. python: the oldest and newest CPython with a manylinux x86_64 wheel of "
    "every patch, from PyPI's file list. patches: torchvision's and torchaudio's Requires-Dist (the "
    "release pinning torch==<patch>, else the one uploaded with that patch whose torch requirement "
    "admits it; null: none). variants and the other variants' libraries: PyTorch's wheel index "
    "(download.pytorch.org/whl/<variant>) when reachable, otherwise kept from this table, which took "
    "them from that index, PyTorch's release announcements, pytorch/pytorch's RELEASE.md and "
    "pytorch/test-infra's release build matrix (see shared/FACTS.md); corrected in December 2026: "
    "2.9 has cu129 (torch-2.9.1+cu129 wheels for x86_64 and aarch64), 2.12 and 2.13 have none (CUDA "
    "12.9 dropped in 2.12, pytorch issue 187834), 2.15 has cu130 and cu132 (RFC 190385). numpy caps "
    "are kept as they are. A release with checked: false holds a fact not read from a source. "
    "aarch64 (linux/arm64, Grace): `pypi` is the build PyPI's manylinux aarch64 wheel is in effect, "
    "read from that wheel's Requires-Dist (2.10.0: every nvidia-*/triton requirement gated to x86_64, "
    "so CPU; 2.11-2.14: cuda-toolkit 13.0.x, cu130; 2.15.0: cuda-toolkit 13.2.2, cu132; before 2.10 "
    "PyPI's aarch64 wheels were CPU builds). `variants`: PyTorch's index's aarch64 wheels, which no "
    "machine of this project can reach: taken from PyTorch's release announcements (CUDA aarch64 "
    "wheels from 2.6, cu126 built for sm_80/sm_90 only; cu128/cu129/cu130 from 2.7-2.9), checked: "
    "false until the refresh reads the index."
)
NUMPY_COMMENT = (
    '  # numpy: releases compiled against NumPy 1.x break under NumPy 2 ("Numpy is not available",\n'
    '  # "A module that was compiled using NumPy 1.x cannot be run in NumPy 2"); torch 2.4 is the first\n'
    "  # release built against NumPy 2, so earlier ones get a cap (checked: false; kept by the refresh).\n"
)
PATCHES_COMMENT = "      # torch patch -> [torchvision, torchaudio] released with it; null: none\n"


# -- the CUDA section's `toolkit`: the newest cuda-toolkit release of each CUDA minor on the index ---

# One row of the cuda section's releases, as the table writes them:
#     "13.2": { image: "13.2.1", ..., checked: false }
CUDA_ROW = re.compile(r'^(?P<indent>\s+)"(?P<minor>\d+\.\d+)":\s*\{(?P<body>.*)\}\s*$')
TOOLKIT_KEY = re.compile(r'\btoolkit:\s*(?P<value>"[^"]*"|null)')


def toolkit_releases(files: list[dict[str, Any]]) -> dict[str, str]:
    """CUDA minor -> the newest final cuda-toolkit release of it in a listing, in the form pip
    matches it (PEP 440 ignores trailing zeros: the file 13.0.3.0 is release 13.0.3). Yanked files,
    pre-releases (13.4.0rc1) and the 0.0.0a0 placeholder are left out."""
    newest: dict[str, tuple[int, ...]] = {}
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or wheel.name != TOOLKIT_PROJECT or not plain(wheel.version) or entry.get("yanked"):
            continue
        key = version_key(wheel.version)
        while len(key) > 3 and key[-1] == 0:
            key = key[:-1]
        if len(key) < 2 or key[0] == 0:
            continue
        minor = f"{key[0]}.{key[1]}"
        newest[minor] = max(newest.get(minor, key), key)
    return {minor: ".".join(map(str, key)) for minor, key in newest.items()}


def cuda_rows(lines: list[str]) -> range:
    """The lines of the cuda section (from `cuda:` to the next top-level key)."""
    start = next((i for i, line in enumerate(lines) if re.match(r"cuda:\s*(#.*)?$", line)), None)
    if start is None:
        raise RefreshError("the compat file has no top-level `cuda:` key")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    return range(start + 1, end)


def with_toolkit(body: str, toolkit: str) -> str:
    """A row's flow mapping with its `toolkit` set: replaced where it is, else written before
    `checked` (the order imagekit's record declares), else at the end."""
    value = f'toolkit: "{toolkit}"'
    found = TOOLKIT_KEY.search(body)
    if found:
        return body[: found.start()] + value + body[found.end() :]
    if re.search(r"\bchecked:", body):
        return re.sub(r"\bchecked:", f"{value}, checked:", body, count=1)
    return f"{body.rstrip()}, {value} "


def refresh_toolkits(text: str, toolkits: dict[str, str], kept: list[str], notes: list[str]) -> str:
    """``text`` with every cuda row's `toolkit` set to the index's newest release of its minor; a
    minor the index has past the table's newest row is a note (its row needs facts from elsewhere)."""
    lines = text.splitlines(keepends=True)
    seen: set[str] = set()
    for i in cuda_rows(lines):
        row = CUDA_ROW.match(lines[i].rstrip("\n"))
        if row is None:
            continue
        minor, body = row.group("minor"), row.group("body")
        seen.add(minor)
        toolkit = toolkits.get(minor)
        if toolkit is None:
            old = TOOLKIT_KEY.search(body)
            if old and old.group("value") != "null":
                value = old.group("value")
                kept.append(f"CUDA {minor}: toolkit {value} (the index lists no cuda-toolkit {minor})")
            continue
        lines[i] = f'{row.group("indent")}"{minor}": {{{with_toolkit(body, toolkit)}}}\n'
    # a minor newer than the table's rows is news; older ones it leaves out (12.0, 12.3, 12.5: no
    # torch was built for them) are not
    newest = max(seen, key=version_key, default="0.0")
    for minor in sorted((m for m in toolkits if version_key(m) > version_key(newest)), key=version_key):
        notes.append(
            f"CUDA {minor}: cuda-toolkit {toolkits[minor]} is on the index but the table has no row for it;"
            " add one (its nvidia/cuda tag and drivers: NVIDIA's release notes and Docker Hub)"
        )
    return "".join(lines)


def validate_cuda(text: str, toolkits: dict[str, str]) -> None:
    """Every cuda row as imagekit reads it, each toolkit as written: a refresh that would write what
    imagekit refuses ends here, with nothing written."""
    rows = yaml.safe_load(text)["cuda"]["releases"]
    for minor, entry in rows.items():
        record = CudaRelease(minor=str(minor), **entry)
        if str(minor) in toolkits and record.toolkit != toolkits[str(minor)]:
            raise AssertionError(f"CUDA {minor}: the toolkit written does not read back")  # a bug here


# -- writing the torch section ---------------------------------------------------------------------


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    reserved = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) and text.lower() not in reserved:
        return text
    return json.dumps(text)


def flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return scalar(value)


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        if current and len(indent) + len(current) + 1 + len(word) > width:
            lines.append(indent + current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(indent + current)
    return lines


def emit_value(key: str, value: Any) -> list[str]:
    """One key of a release, as lines: libraries one flow mapping per variant, patches one pair
    per line, everything else (aarch64 too) on one line."""
    if key == "libraries":
        lines = ["      libraries:\n"] if value else []
        for variant, libs in value.items():
            ordered = {k: libs[k] for k in LIBRARY_KEYS if k in libs} | {
                k: v for k, v in libs.items() if k not in LIBRARY_KEYS
            }
            lines.append(f"        {scalar(variant)}: {flow(ordered)}\n")
        return lines
    if key == "patches":
        pairs = [f"        {json.dumps(str(version))}: {flow(pair_)}\n" for version, pair_ in value.items()]
        return [PATCHES_COMMENT, "      patches:\n", *pairs]
    if key == "aarch64" and isinstance(value, dict):
        ordered = {k: value[k] for k in AARCH64_KEYS if k in value} | {
            k: v for k, v in value.items() if k not in AARCH64_KEYS
        }
        return [f"      aarch64: {flow(ordered)}\n"]
    return [f"      {key}: {flow(value)}\n"]


def emit_section(releases: dict[str, dict[str, Any]], checked_on: str) -> str:
    out = ["torch:\n", "  source: >-\n"]
    out += [line + "\n" for line in wrap(SOURCE_NOTE, "    ")]
    out.append(f"  checked_on: {json.dumps(checked_on)}  # date of the last refresh\n")
    out.append(NUMPY_COMMENT)
    out.append("  releases:\n")
    for minor, entry in releases.items():
        out.append(f"    {json.dumps(minor)}:\n")
        order = [k for k in RELEASE_KEYS if k in entry] + [k for k in entry if k not in RELEASE_KEYS]
        for key in order:
            out += emit_value(key, entry[key])
    return "".join(out)


def splice(text: str, section: str) -> str:
    """Replace everything from `torch:` to the next top-level key (less the blank lines and
    top-level comments that lead into that key) with `section`."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"torch:\s*(#.*)?$", line)), None)
    if start is None:
        raise RefreshError("the compat file has no top-level `torch:` key")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + section + "".join(lines[end:])


# --------------------------------------------------------------------------------------------
