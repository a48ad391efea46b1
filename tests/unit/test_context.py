"""Build contexts: deterministic tars of the files a cell or local base is built from."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import IO

import pytest

from imagekit.cells import LocalBase
from imagekit.context import FileHasher, local_base_context, local_base_digest, make_tar, walk_context
from imagekit.errors import InputError

# -- build contexts ---------------------------------------------------------------------------------------


def members(archive: IO[bytes]) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=archive, mode="r") as tar:
        return tar.getmembers()


def make_files(root: Path, modes: dict[str, int], mtime: int) -> list[tuple[str, Path]]:
    files = []
    for name, mode in modes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {name}\n")
        path.chmod(mode)
        os.utime(path, (mtime, mtime))
        files.append((name, path))
    return files


def test_make_tar_is_deterministic(tmp_path: Path) -> None:
    first = make_files(tmp_path / "a", {"run.sh": 0o755, "req.txt": 0o644, "sub/x.py": 0o600}, 1_000_000)
    # The same contents elsewhere, with other times, other non-executable modes, in another order.
    second = make_files(tmp_path / "b", {"sub/x.py": 0o664, "run.sh": 0o700, "req.txt": 0o640}, 2_000_000)
    dockerfile = ("Dockerfile", "FROM busybox\nCOPY . /app\n")
    with (
        make_tar(dockerfile, first) as one,
        make_tar(dockerfile, first) as again,
        make_tar(dockerfile, second) as other,
    ):
        data = one.read()
        assert data == again.read()
        assert data == other.read()
    with make_tar(("Dockerfile", "FROM busybox\n"), first) as changed:
        assert changed.read() != data


def test_make_tar_normalises_headers_and_keeps_the_executable_bit(tmp_path: Path) -> None:
    modes = {"run.sh": 0o700, "data.bin": 0o600, "tool": 0o750, "doc.md": 0o664, "shared": 0o645}
    files = make_files(tmp_path, modes, 1_700_000_000)
    with make_tar(("Dockerfile", "FROM busybox\n"), files) as archive:
        found = {m.name: m for m in members(archive)}
    assert list(found) == ["Dockerfile", "data.bin", "doc.md", "run.sh", "shared", "tool"]  # then sorted
    assert {name: m.mode for name, m in found.items()} == {
        "Dockerfile": 0o644,
        "data.bin": 0o644,
        "doc.md": 0o644,
        "run.sh": 0o755,
        "shared": 0o755,  # any execute bit counts
        "tool": 0o755,
    }
    for m in found.values():
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert m.isfile()
    assert found["run.sh"].size == len("content of run.sh\n")


def test_make_tar_holds_the_file_contents(tmp_path: Path) -> None:
    files = make_files(tmp_path, {"sub/dir/x.txt": 0o644}, 0)
    with make_tar(None, files) as archive, tarfile.open(fileobj=archive, mode="r") as tar:
        assert tar.getnames() == ["sub/dir/x.txt"]
        extracted = tar.extractfile("sub/dir/x.txt")
        assert extracted is not None
        assert extracted.read() == b"content of sub/dir/x.txt\n"


def test_make_tar_of_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*missing\.txt for the build context: No such file"):
        make_tar(None, [("missing.txt", tmp_path / "missing.txt")])


def test_local_base_context_holds_the_context_directory(tmp_path: Path) -> None:
    make_files(tmp_path / "ctx", {"Dockerfile": 0o644, "scripts/setup.sh": 0o755}, 5)
    base = LocalBase("b", "example/b:dev", tmp_path / "ctx", "Dockerfile", ())
    with local_base_context(base) as archive:
        found = {m.name: m.mode for m in members(archive)}
    assert found == {"Dockerfile": 0o644, "scripts/setup.sh": 0o755}


def test_a_link_loop_in_a_context_is_left_out_like_a_link_to_nothing(tmp_path: Path) -> None:
    make_files(tmp_path / "ctx", {"Dockerfile": 0o644}, 5)
    (tmp_path / "ctx" / "a").symlink_to(tmp_path / "ctx" / "b")
    (tmp_path / "ctx" / "b").symlink_to(tmp_path / "ctx" / "a")
    (tmp_path / "ctx" / "gone").symlink_to(tmp_path / "ctx" / "nothing")
    os.mkfifo(tmp_path / "ctx" / "fifo")
    assert [name for name, _ in walk_context(tmp_path / "ctx", tmp_path / "ctx", "base b")] == ["Dockerfile"]


def test_a_context_file_name_that_is_not_utf8_is_named_and_refused(tmp_path: Path) -> None:
    make_files(tmp_path / "ctx", {"Dockerfile": 0o644}, 5)
    (tmp_path / "ctx" / os.fsdecode(b"caf\xe9.txt")).write_text("x")
    base = LocalBase("b", "example/b:dev", tmp_path / "ctx", "Dockerfile", ())
    with pytest.raises(InputError, match=r"^base b: file name 'caf\\\\xe9\.txt' is not UTF-8; rename it$"):
        local_base_digest(base, FileHasher())


def test_an_unreadable_context_file_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_files(tmp_path / "ctx", {"Dockerfile": 0o644, "secret": 0o000}, 5)
    base = LocalBase("b", "example/b:dev", tmp_path / "ctx", "Dockerfile", ())
    real_open = Path.open

    def open_as_nobody(self: Path, *args: object, **kwargs: object) -> object:
        # root reads a file whatever its mode: refuse the way the kernel refuses anyone else
        if self.name == "secret":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", open_as_nobody)
    with pytest.raises(InputError, match=r"cannot read .*secret for the build context: Permission denied"):
        local_base_digest(base, FileHasher())
