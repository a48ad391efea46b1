"""libraries_once (imagekit/probe/sharedlibs.py): the ELF soname reader on ELF files built here
with struct, the filesystem scan on hostile trees, and the loaded-twice rule."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.probe import protocol, sharedlibs
from imagekit.probe.run import CHECKS


def elf(
    soname: bytes = b"libfoo.so.1", wide: bool = True, little: bool = True, dynamic: bool = True
) -> bytes:
    """A minimal ELF shared object: one PT_LOAD over the whole file, one PT_DYNAMIC holding
    DT_STRTAB, DT_SONAME and DT_NULL, and the string table."""
    order = "<" if little else ">"
    ehsize, phent, dynent = (64, 56, 16) if wide else (52, 32, 8)
    phnum = 2 if dynamic else 1
    dyn_off = ehsize + phnum * phent
    str_off = dyn_off + 3 * dynent
    strtab = b"\0" + soname + b"\0"
    total = str_off + len(strtab)
    base = 0x10000
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1]) + bytes(9)
    if wide:
        header = struct.pack(
            order + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phent, phnum, 64, 0, 0
        )
        load = struct.pack(order + "IIQQQQQQ", 1, 5, 0, base, base, total, total, 4096)
        dyn = struct.pack(order + "IIQQQQQQ", 2, 6, dyn_off, base + dyn_off, 0, 3 * dynent, 3 * dynent, 8)
    else:
        header = struct.pack(
            order + "HHIIIIIHHHHHH", 3, 3, 1, 0, ehsize, 0, 0, ehsize, phent, phnum, 40, 0, 0
        )
        load = struct.pack(order + "IIIIIIII", 1, 0, base, base, total, total, 5, 4096)
        dyn = struct.pack(order + "IIIIIIII", 2, dyn_off, base + dyn_off, 0, 3 * dynent, 3 * dynent, 6, 4)
    layout = order + ("qQ" if wide else "iI")
    entries = struct.pack(layout, 5, base + str_off) + struct.pack(layout, 14, 1) + struct.pack(layout, 0, 0)
    data = ident + header + load + (dyn if dynamic else b"") + entries + strtab
    assert len(data) == total
    return data


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def hostile_tree(root: Path) -> None:
    write(root / "usr/lib/libdup.so.1", elf(b"libdup.so.1"))
    write(root / "opt/venv/nvidia/lib/libdup.so.1", elf(b"libdup.so.1"))  # the duplicate
    write(root / "usr/lib/libone.so.2", elf(b"libone.so.2"))
    os.link(root / "usr/lib/libone.so.2", root / "usr/lib/libone-hard.so.2")  # one file, two names
    (root / "usr/lib/libone.so").symlink_to(root / "usr/lib/libone.so.2")  # a symlink: one file
    (root / "usr/lib/loop").symlink_to(root)  # a directory symlink loop: never followed
    write(root / "usr/lib/notes.txt", b"not a library")
    write(root / "usr/lib/garbage.so", os.urandom(512))
    write(root / "usr/local/nvidia/lib64/libdup.so.1", elf(b"libdup.so.1"))  # the driver's: skipped
    write(root / "mnt/libdup.so.1", elf(b"libdup.so.1"))  # a mount: skipped


def run_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loaded: list[str]) -> Any:
    monkeypatch.setattr(sharedlibs, "scan_roots", lambda: [str(tmp_path)])
    monkeypatch.setattr(sharedlibs, "loaded_cuda_libraries", lambda: loaded)
    ctx = SimpleNamespace(duplicate_libraries=None)
    return ctx, sharedlibs.check_libraries_once(ctx)  # type: ignore[arg-type]


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("little", [True, False])
def test_reads_the_soname_of_each_elf_class_and_byte_order(tmp_path: Path, wide: bool, little: bool) -> None:
    path = write(tmp_path / "lib.so", elf(b"libcublas.so.12", wide=wide, little=little))
    assert sharedlibs.read_soname(str(path)) == "libcublas.so.12"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x7fEL",
        b"not an elf at all" * 10,
        b"\x7fELF\x03\x01" + bytes(58),  # an ELF class that does not exist
        elf()[:70],  # truncated inside the program headers
        elf()[:-8],  # truncated inside the string table: no NUL after the name
        elf(dynamic=False),  # no dynamic section (a static executable)
        elf(soname=b""),  # an empty soname
        os.urandom(4096),
    ],
    ids=[
        "empty",
        "short",
        "text",
        "bad-class",
        "cut-phdrs",
        "cut-strtab",
        "no-dynamic",
        "empty-name",
        "random",
    ],
)
def test_anything_else_is_no_soname_never_a_crash(tmp_path: Path, data: bytes) -> None:
    assert sharedlibs.read_soname(str(write(tmp_path / "x.so", data))) is None


def test_absurd_program_header_counts_and_offsets_are_skipped(tmp_path: Path) -> None:
    data = bytearray(elf())
    struct.pack_into("<H", data, 56, 65535)  # e_phnum
    assert sharedlibs.read_soname(str(write(tmp_path / "many.so", bytes(data)))) is None
    data = bytearray(elf())
    struct.pack_into("<Q", data, 32, 2**63 + 5)  # e_phoff far past the end (and past a signed seek)
    assert sharedlibs.read_soname(str(write(tmp_path / "far.so", bytes(data)))) is None


def test_a_soname_with_control_characters_is_escaped(tmp_path: Path) -> None:
    path = write(tmp_path / "evil.so", elf(b"lib\x1b[31mevil\n.so\xff"))
    assert sharedlibs.read_soname(str(path)) == "lib\\x1b[31mevil\\x0a.so\\xff"


def test_scan_reports_each_soname_at_two_files_once(tmp_path: Path) -> None:
    hostile_tree(tmp_path)
    skip = {str(tmp_path / "usr/local/nvidia"), str(tmp_path / "mnt")}
    # a root given twice and one inside another are each walked once
    found = sharedlibs.scan([str(tmp_path), str(tmp_path / "usr"), str(tmp_path)], skip)
    assert found["count"] == 1 and found["bound"] is None
    assert found["duplicates"] == {
        "libdup.so.1": [
            str(tmp_path / "opt/venv/nvidia/lib/libdup.so.1"),
            str(tmp_path / "usr/lib/libdup.so.1"),
        ]
    }
    assert found["extra_bytes"] == len(elf(b"libdup.so.1"))
    assert found["libraries"] == 5  # libdup x2, libone, its hard link, garbage.so; not the symlink


def test_scan_without_the_skips_finds_the_driver_copies(tmp_path: Path) -> None:
    hostile_tree(tmp_path)
    found = sharedlibs.scan([str(tmp_path)], set())
    assert len(found["duplicates"]["libdup.so.1"]) == 4


def test_scan_escapes_control_characters_in_paths(tmp_path: Path) -> None:
    write(tmp_path / "a/libx.so.1", elf(b"libx.so.1"))
    write(tmp_path / "b\n\x1b[2J/libx.so.1", elf(b"libx.so.1"))
    write(tmp_path / os.fsdecode(b"c\xff") / "libx.so.1", elf(b"libx.so.1"))  # not UTF-8
    found = sharedlibs.scan([str(tmp_path)], set())
    paths = found["duplicates"]["libx.so.1"]
    assert len(paths) == 3
    assert all(p.isprintable() for p in paths)
    assert any("b\\x0a\\x1b[2J/" in p for p in paths) and any("c\\xff/" in p for p in paths)


@pytest.mark.parametrize(
    ("bounds", "said"),
    [
        ({"max_entries": 3}, "stopped after 3 directory entries"),
        ({"max_libraries": 2}, "stopped after 2 shared objects read"),
        ({"seconds": -1.0}, "stopped after -1 s"),
    ],
)
def test_a_bound_hit_says_so_in_one_line(tmp_path: Path, bounds: dict[str, Any], said: str) -> None:
    for index in range(5):
        write(tmp_path / f"d{index}/libx.so.1", elf(b"libx.so.1"))
    found = sharedlibs.scan([str(tmp_path)], set(), **bounds)
    assert found["bound"].startswith(said) and "\n" not in found["bound"]


def test_the_duplicate_list_is_bounded_and_the_count_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharedlibs, "REPORT_SONAMES", 2)
    monkeypatch.setattr(sharedlibs, "REPORT_PATHS", 1)
    for name in ("a", "b", "c"):
        for place in ("x", "y"):
            write(tmp_path / place / f"lib{name}.so", elf(f"lib{name}.so".encode()))
    found = sharedlibs.scan([str(tmp_path)], set())
    assert found["count"] == 3 and list(found["duplicates"]) == ["liba.so", "libb.so"]
    assert all(len(paths) == 1 for paths in found["duplicates"].values())


def test_mount_points_are_read_from_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "1 0 0:1 / / rw - overlay overlay rw\n"
        "2 1 0:2 / /proc rw - proc proc rw\n"
        "3 1 8:1 /lib/libcuda.so.535 /usr/lib/x86_64-linux-gnu/libcuda.so.535.1 ro - ext4 /dev/sda1 ro\n"
        "4 1 8:1 /x /opt/with\\040space ro - ext4 /dev/sda1 ro\n"
        "garbage\n"
    )
    assert sharedlibs.mount_points(str(info)) == {
        "/proc",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1",
        "/opt/with space",
    }


def test_a_cuda_library_loaded_from_two_files_is_named(tmp_path: Path) -> None:
    wheel = write(tmp_path / "site/nvidia/cublas/lib/libcublas.so.12", elf(b"libcublas.so.12"))
    base = write(tmp_path / "cuda/lib64/libcublas.so.12.1.3.1", elf(b"libcublas.so.12"))
    other = [write(tmp_path / f"{p}/libfoo.so.1", elf(b"libfoo.so.1")) for p in ("a", "b")]
    cudnn = write(tmp_path / "libcudnn_ops_infer.so.8.9.2", b"unreadable")  # soname from its name
    paths = [str(p) for p in (wheel, base, *other, cudnn)]
    assert sharedlibs.loaded_twice(paths) == {"libcublas.so.12": sorted([str(wheel), str(base)])}
    assert sharedlibs.loaded_twice([str(wheel), str(cudnn)]) == {}


def test_the_check_passes_with_duplicates_on_disk_and_records_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = write(tmp_path / "a/libcublas.so.12", elf(b"libcublas.so.12"))
    write(tmp_path / "b/libcublas.so.12", elf(b"libcublas.so.12"))
    ctx, result = run_check(tmp_path, monkeypatch, [str(one)])
    assert result.status == "pass" and result.actual == "1 duplicate sonames"
    assert ctx.duplicate_libraries["count"] == 1 and result.detail["loaded_twice"] == {}


def test_the_check_fails_when_a_cuda_library_is_loaded_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = write(tmp_path / "a/libcublasLt.so.12", elf(b"libcublasLt.so.12"))
    two = write(tmp_path / "b/libcublasLt.so.12.1", elf(b"libcublasLt.so.12"))
    _ctx, result = run_check(tmp_path, monkeypatch, [str(one), str(two)])
    assert result.status == "fail" and result.required
    assert "libcublasLt.so.12" in result.cause and "\n" not in result.cause


def test_the_check_is_declared_and_needs_no_gpu() -> None:
    assert protocol.LIBRARIES_ONCE in protocol.CHECK_NAMES
    assert [name for name, _fn in CHECKS] == list(protocol.CHECK_NAMES)
    assert protocol.LIBRARIES_ONCE not in protocol.NOT_REQUIRED
