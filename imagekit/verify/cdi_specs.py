"""The device names an engine's CDI specs define, read from its spec directories.

``nvidia-ctk cdi generate`` names each GPU as ``--device-name-strategy`` says: ``index`` (its
default: ``0``, MIG ``0:1``), ``uuid`` (``GPU-<uuid>``, MIG ``MIG-<uuid>``) or ``type-index``
(``gpu0``, ``mig0:1``); several strategies give each device several names, and ``all`` is every GPU
(NVIDIA/nvidia-container-toolkit, pkg/nvcdi/namer.go). A name the spec does not define is
refused by the engine (``unresolvable CDI devices``), so a pass pinned to one GPU must name it the
way the spec does: :func:`spec_device_names` says which names that is.

Bounded: at most ``MAX_CDI_SPEC_FILES`` files a directory, each a regular file of at most
``CDI_SPEC_BYTES``, parsed by the matrix's bounded YAML reader (JSON is YAML); a spec that cannot
be read or parsed is passed over, as the names are a means to pin, never a verdict.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path

from imagekit.core.errors import InputError
from imagekit.core.limits import CDI_SPEC_BYTES, MAX_CDI_SPEC_FILES
from imagekit.core.paths import read_regular_text
from imagekit.core.yamlsource import parse_yaml

# CDI's default spec directories (cncf-tags/container-device-interface pkg/cdi/cache.go:
# DefaultStaticDir, DefaultDynamicDir), where an engine looks unless configured otherwise.
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_SUFFIXES = (".json", ".yaml", ".yml")  # the files CDI reads from a spec dir


def spec_paths(dirs: Iterable[str]) -> list[Path]:
    """The spec files in ``dirs``, a bounded look at each: a spec dir holds a spec per vendor."""
    paths: list[Path] = []
    for directory in dirs:
        try:
            found = itertools.islice(Path(directory).iterdir(), MAX_CDI_SPEC_FILES)
            paths += sorted(p for p in found if p.suffix in SPEC_SUFFIXES)
        except OSError:
            continue
    return paths


def _names_in(path: Path, kind: str) -> list[str] | None:
    """The device names of ``path``'s spec when it is of ``kind``; None otherwise."""
    try:
        spec = parse_yaml(read_regular_text(path, CDI_SPEC_BYTES, "a CDI spec"), str(path)).value
    except (OSError, InputError):
        return None
    if not isinstance(spec, dict) or spec.get("kind") != kind or not isinstance(spec.get("devices"), list):
        return None
    return [d["name"] for d in spec["devices"] if isinstance(d, dict) and isinstance(d.get("name"), str)]


def spec_device_names(dirs: Iterable[str], kind: str) -> frozenset[str] | None:
    """Every device name the specs of ``kind`` in ``dirs`` define (``0``, ``GPU-...``, ``all``);
    None when no spec of that kind could be read there."""
    names: set[str] = set()
    read = False
    for path in spec_paths(dirs):
        found = _names_in(path, kind)
        if found is not None:
            read = True
            names.update(found)
    return frozenset(names) if read else None
