"""Paths from the matrix and from flags: bounded reads of regular files, lengths, containment,
and no write through a symbolic link."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.limits import FILE_NAME_BYTES, PATH_BYTES
from imagekit.core.paths import (
    check_length,
    inside,
    os_problem,
    read_regular_file,
    read_regular_text,
    refuse_links,
)


def test_a_regular_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_regular_file(path, 10, "a file") == b"x" * 10
    with pytest.raises(InputError, match=rf"^{path}: larger than 9 bytes; a file is far smaller$"):
        read_regular_file(path, 9, "a file")
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "absent", 10, "a file")


def test_what_is_not_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a device"), (tmp_path, "a directory")):
        with pytest.raises(InputError, match=rf"^{path}: is {kind}, not a regular file; pass a file$"):
            read_regular_file(path, 1 << 30, "a file")


def test_a_link_is_refused_where_the_caller_refuses_links(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_regular_file(link, 1, "a file") == b"x"  # followed by default
    with pytest.raises(InputError, match=rf"^{link}: is a symbolic link, which imagekit does not read"):
        read_regular_file(link, 1, "a file", follow_links=False)


def test_text_is_utf8_or_one_line_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_bytes("é\n".encode())
    assert read_regular_text(path, 10, "a file") == "é\n"
    path.write_bytes(b"ok\xff")
    with pytest.raises(InputError, match=rf"^{path}: not UTF-8 text \(byte 2\); save it as UTF-8$"):
        read_regular_text(path, 10, "a file")


@settings(max_examples=50, deadline=2000, derandomize=True)
@given(st.integers(min_value=0, max_value=5_000), st.integers(min_value=0, max_value=5_000))
def test_no_file_is_read_past_its_limit(
    tmp_path_factory: pytest.TempPathFactory, size: int, limit: int
) -> None:
    path = tmp_path_factory.mktemp("sizes") / "f"
    path.write_bytes(b"y" * size)
    if size <= limit:
        assert len(read_regular_file(path, limit, "a file")) == size
    else:
        with pytest.raises(InputError, match="larger than"):
            read_regular_file(path, limit, "a file")


def test_over_long_names_are_input_errors() -> None:
    long_name = Path("/tmp") / ("a" * (FILE_NAME_BYTES + 1))
    with pytest.raises(InputError, match=r"^--out: 'a+'\.\.\. is longer than 255 bytes"):
        check_length(long_name, "--out")
    deep = Path("/".join(["d" * 200] * 25))
    with pytest.raises(InputError, match=rf"^--out: the path is longer than {PATH_BYTES} bytes"):
        check_length(deep, "--out")
    assert check_length(Path("a" * FILE_NAME_BYTES), "--out") == Path("a" * FILE_NAME_BYTES)


def test_os_errors_say_whose_problem_they_are() -> None:
    too_long = os_problem(OSError(errno.ENAMETOOLONG, "File name too long"), "x", "write")
    assert isinstance(too_long, InputError) and too_long.message == "x: cannot write: File name too long"
    full = os_problem(OSError(errno.ENOSPC, "No space left on device"), "x", "write")
    assert isinstance(full, EnvironmentProblem) and full.message == "cannot write x: No space left on device"


def test_a_link_leaving_the_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    (root / "real").mkdir(parents=True)
    outside.mkdir()
    (root / "out").symlink_to(outside)
    (root / "in").symlink_to(root / "real")
    assert inside(root / "in", root, "output") == (root / "real").resolve()
    assert inside(root / "not-yet" / "made", root, "output") == (root / "not-yet" / "made").resolve()
    with pytest.raises(InputError, match=rf"^output: {root / 'out'} leads to {outside.resolve()}, outside"):
        inside(root / "out", root, "output")
    with pytest.raises(InputError, match="outside"):
        inside(root / "out" / "deeper", root, "output")


def test_writes_never_go_through_a_link(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "cell").mkdir(parents=True)
    elsewhere.mkdir()
    refuse_links(out / "cell" / "Dockerfile", out)  # plain directories: fine
    refuse_links(out / "new" / "dir" / "Dockerfile", out)  # to be made: fine
    (out / "linked").symlink_to(elsewhere)
    with pytest.raises(InputError, match=rf"^{out / 'linked'} is a symbolic link; imagekit never writes"):
        refuse_links(out / "linked" / "Dockerfile", out)
    (out / "cell" / "Dockerfile").symlink_to(elsewhere / "target")
    with pytest.raises(InputError, match="is a symbolic link"):
        refuse_links(out / "cell" / "Dockerfile", out)
    with pytest.raises(InputError, match="outside the output directory"):
        refuse_links(tmp_path / "x", out)
