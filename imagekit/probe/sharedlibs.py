"""libraries_once: the shared libraries the image holds twice (the same DT_SONAME at two real paths,
read from its filesystem: no GPU needed), and the CUDA libraries this process loaded twice.

A duplicate on disk is a figure (pull bytes spent twice), never a failure: a devel base and torch's
wheels both carry cuBLAS, and which copy runs is the loader's choice. Two copies of one CUDA library
*mapped into one process* (torch's from the wheel, another from /usr/local/cuda) is a real bug:
two cuBLAS handles, two allocators; that fails the check.

The filesystem is untrusted: directory symlinks are never followed, each directory is visited once
(by device and inode: no loop, no bind mount twice), mount points other than / are skipped (the
NVIDIA container toolkit injects the driver's libraries as mounts: they are not the image's), and
files visited, bytes read per file and seconds are bounded (the constants below); a bound hit says
so in one line. A file that is not a well-formed ELF shared object is skipped, never a crash.
Names are reported with control characters and undecodable bytes escaped. Standard library only.
"""

from __future__ import annotations

import os
import re
import struct
import time
from typing import Any, BinaryIO

from .context import Context
from .inventory import loaded_cuda_libraries
from .libraries import site_dirs
from .proc import read_text
from .results import CheckResult, failed, passed

SCAN_ROOTS = ("/usr", "/opt", "/lib", "/lib32", "/lib64", "/libx32")
# Not the image's files: the kernel's, and where the NVIDIA toolkit mounts the driver at run time.
SCAN_SKIP = frozenset({"/proc", "/sys", "/dev", "/usr/local/nvidia"})
SCAN_MAX_ENTRIES = 1_000_000  # directory entries: a CUDA devel image with torch holds ~150,000
SCAN_MAX_LIBRARIES = 50_000  # *.so files read: such an image holds ~5,000
SCAN_SECONDS = 60.0  # reading ~5,000 ELF headers takes a few seconds; a huge tree stops here
ELF_MAX_PROGRAM_HEADERS = 256  # real shared objects have about 10
ELF_DYNAMIC_BYTES = 64 << 10  # the dynamic section: a few hundred entries of 16 bytes
ELF_SONAME_BYTES = 256  # a soname is a short file name
REPORT_SONAMES = 200  # sonames listed (the count is always whole)
REPORT_PATHS = 8  # paths listed per soname
MOUNTINFO_BYTES = 1 << 20
# The CUDA libraries one process must map once (libtorch_cuda's DT_NEEDED, the extension's).
CUDA_SONAME = re.compile(
    r"lib(?:cublas|cublasLt|cudnn[a-z_]*|nccl|cufft|curand|cusparse|cusolver|nvrtc|cudart)\.so(?:\.\d+)?"
)

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_SONAME = 0, 5, 14


def shown(text: str) -> str:
    """A name fit for a report: control characters, undecodable bytes (surrogate escapes) and
    other unprintable characters as \\xNN / \\uNNNN, never raw."""
    out = []
    for char in text:
        code = ord(char)
        if char.isprintable() and char != "\\":
            out.append(char)
        elif char == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{code - 0xDC00:02x}")
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def _read_at(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    return handle.read(size)


def _program_headers(handle: BinaryIO, head: bytes) -> tuple[str, bool, list[tuple[int, int, int, int]]]:
    """(byte order, 64-bit, [(p_type, p_offset, p_vaddr, p_filesz)]); ValueError when malformed."""
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ValueError("not ELF")
    order, wide = ("<" if head[5] == 1 else ">"), head[4] == 2
    if wide:
        if len(head) < 64:
            raise ValueError("truncated header")
        phoff, phentsize, phnum = (
            *struct.unpack_from(order + "Q", head, 32),
            *struct.unpack_from(order + "HH", head, 54),
        )
        entry, layout = 56, order + "IIQQQQ"
    else:
        phoff, phentsize, phnum = (
            *struct.unpack_from(order + "I", head, 28),
            *struct.unpack_from(order + "HH", head, 42),
        )
        entry, layout = 32, order + "IIIIII"
    if phnum > ELF_MAX_PROGRAM_HEADERS or phentsize < entry:
        raise ValueError("implausible program headers")
    table = _read_at(handle, phoff, phentsize * phnum)
    headers = []
    for index in range(len(table) // phentsize):
        fields = struct.unpack_from(layout, table, index * phentsize)
        if wide:  # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz
            headers.append((fields[0], fields[2], fields[3], fields[5]))
        else:  # p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
            headers.append((fields[0], fields[1], fields[2], fields[4]))
    return order, wide, headers


def read_soname(path: str) -> str | None:
    """DT_SONAME of an ELF shared object (32/64-bit, either byte order), or None: not ELF, no
    dynamic section, no soname, truncated or garbage. Reads at most a few pages."""
    try:
        with open(path, "rb") as handle:
            order, wide, headers = _program_headers(handle, handle.read(64))
            dynamic = next(((off, size) for kind, off, _v, size in headers if kind == PT_DYNAMIC), None)
            if dynamic is None:
                return None
            data = _read_at(handle, dynamic[0], min(dynamic[1], ELF_DYNAMIC_BYTES))
            layout = order + ("qQ" if wide else "iI")
            step = struct.calcsize(layout)
            strtab = soname = None
            for at in range(0, len(data) - step + 1, step):
                tag, value = struct.unpack_from(layout, data, at)
                if tag == DT_NULL:
                    break
                strtab = value if tag == DT_STRTAB else strtab
                soname = value if tag == DT_SONAME else soname
            if strtab is None or soname is None:
                return None
            # DT_STRTAB is an address: the PT_LOAD segment holding it gives its place in the file
            base = next(
                (off + strtab - vaddr for kind, off, vaddr, size in headers
                 if kind == PT_LOAD and vaddr <= strtab < vaddr + size),
                None,
            )  # fmt: skip
            if base is None:
                return None
            raw = _read_at(handle, base + soname, ELF_SONAME_BYTES)
    except (OSError, ValueError, struct.error, OverflowError):
        return None
    name, nul, _ = raw.partition(b"\0")
    return shown(name.decode("utf-8", "surrogateescape")) if nul and name else None


def mount_points(path: str = "/proc/self/mountinfo") -> set[str]:
    """Every mount point but / (mountinfo's fifth field, octal escapes undone)."""
    found = set()
    for line in (read_text(path) or "")[:MOUNTINFO_BYTES].splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point != "/":
                found.add(point)
    return found


def _looks_shared(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


class _Walk:
    """One bounded scan's state: directories seen (device, inode), files per soname, the counts."""

    def __init__(self, skip: set[str] | frozenset[str], max_entries: int, max_libraries: int, seconds: float):
        self.skip, self.max_entries, self.max_libraries, self.seconds = (
            skip,
            max_entries,
            max_libraries,
            seconds,
        )
        self.deadline = time.monotonic() + seconds
        self.seen_dirs: set[tuple[int, int]] = set()
        self.by_soname: dict[str, dict[tuple[int, int], tuple[str, int]]] = {}
        self.entries = self.libraries = 0

    def visit(self, directory: str, stack: list[str]) -> str | None:
        """Read one directory: subdirectories onto ``stack``, libraries grouped; a bound hit's line."""
        info = os.lstat(directory)
        if (info.st_dev, info.st_ino) in self.seen_dirs:
            return None
        self.seen_dirs.add((info.st_dev, info.st_ino))
        with os.scandir(directory) as listing:
            for entry in listing:
                self.entries += 1
                if self.entries > self.max_entries:
                    return f"stopped after {self.max_entries} directory entries: the list may be short"
                if entry.path in self.skip:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and _looks_shared(entry.name):
                    bound = self.library(entry)
                    if bound is not None:
                        return bound
        return None

    def library(self, entry: os.DirEntry[str]) -> str | None:
        self.libraries += 1
        if self.libraries > self.max_libraries:
            return f"stopped after {self.max_libraries} shared objects read: the list may be short"
        if time.monotonic() > self.deadline:
            return f"stopped after {self.seconds:.0f} s: the list may be short"
        soname = read_soname(entry.path)
        if soname is not None:
            stat = entry.stat(follow_symlinks=False)
            files = self.by_soname.setdefault(soname, {})
            files.setdefault((stat.st_dev, stat.st_ino), (entry.path, stat.st_size))
        return None


def scan(
    roots: tuple[str, ...] | list[str],
    skip: set[str] | frozenset[str] = SCAN_SKIP,
    max_entries: int = SCAN_MAX_ENTRIES,
    max_libraries: int = SCAN_MAX_LIBRARIES,
    seconds: float = SCAN_SECONDS,
) -> dict[str, Any]:
    """Every regular ``*.so``/``*.so.*`` file under ``roots`` grouped by DT_SONAME; the sonames found
    at more than one file (hard links and symlinks are one file). Bounded as the module says."""
    walk = _Walk(skip, max_entries, max_libraries, seconds)
    bound = None
    stack = [r for r in reversed(roots) if os.path.isdir(r) and not os.path.islink(r)]
    while stack and bound is None:
        try:
            bound = walk.visit(stack.pop(), stack)
        except OSError:
            continue  # unreadable or vanished: not the image's to judge here
    twice = {name: sorted(files.values()) for name, files in walk.by_soname.items() if len(files) > 1}
    listed = sorted(twice)[:REPORT_SONAMES]
    return {
        "count": len(twice),
        "duplicates": {name: [shown(p) for p, _s in twice[name][:REPORT_PATHS]] for name in listed},
        "extra_bytes": sum(size for files in twice.values() for _p, size in files[1:]),
        "libraries": min(walk.libraries, max_libraries),
        "entries": min(walk.entries, max_entries),
        "bound": bound,
    }


def soname_of(path: str) -> str:
    """A loaded library's soname: its DT_SONAME, else its file name up to the major version."""
    found = read_soname(path)
    if found:
        return found
    name = os.path.basename(path)
    match = re.match(r"(.*?\.so(?:\.\d+)?)", name)
    return shown(match.group(1) if match else name)


def loaded_twice(paths: list[str]) -> dict[str, list[str]]:
    """The CUDA library sonames mapped from more than one file into this process."""
    groups: dict[str, set[str]] = {}
    for path in paths:
        name = soname_of(path)
        if CUDA_SONAME.fullmatch(name):
            groups.setdefault(name, set()).add(path)
    return {name: sorted(shown(p) for p in found) for name, found in sorted(groups.items()) if len(found) > 1}


def scan_roots() -> list[str]:
    return [*SCAN_ROOTS, *site_dirs()]


def check_libraries_once(ctx: Context) -> CheckResult:
    """The image's duplicate sonames (a figure) and the CUDA libraries this process loaded twice (a
    failure). Runs after torch's import and the GPU checks, so what they loaded is mapped."""
    found = scan(scan_roots(), SCAN_SKIP | mount_points())
    ctx.duplicate_libraries = found
    loaded = loaded_cuda_libraries()
    twice = loaded_twice(loaded)
    detail = {**found, "loaded": [shown(p) for p in loaded], "loaded_twice": twice}
    if twice:
        names = ", ".join(sorted(twice))
        return failed(
            "libraries_once",
            f"CUDA libraries loaded twice into one process: {names}",
            "keep one copy of each CUDA library: drop the base's toolkit libraries (a -base image plus "
            "the compiler packages) or take torch's from the wheels only; check LD_LIBRARY_PATH",
            expected="one path per CUDA library",
            actual=twice,
            detail=detail,
        )
    return passed(
        "libraries_once", "one path per CUDA library", f"{found['count']} duplicate sonames", detail
    )
