"""Build contexts: deterministic tars of the files a cell or local base is built from."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import IO, Any

import pytest

from imagekit.core.errors import InputError
from imagekit.plan.cells import LocalBase
from imagekit.render import context
from imagekit.render.context import FileHasher, local_base_context, local_base_digest, make_tar, walk_context

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
    real_open = os.open

    def open_as_nobody(path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> int:
        # root reads a file whatever its mode: refuse the way the kernel refuses anyone else
        if Path(path).name == "secret":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_as_nobody)
    with pytest.raises(
        InputError, match=r"secret: cannot read: Permission denied; pass a file of the build context"
    ):
        local_base_digest(base, FileHasher())


# -- the state directory's hash cache -------------------------------------------------------------------


def sha256_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are seconds old at most: remember them all the same."""
    monkeypatch.setattr(context, "_SETTLE_NS", -1)


class CountingHasher(FileHasher):
    """A FileHasher that counts the bytes of the files it reads to hash."""

    read_bytes = 0

    def _hash(self, path: Path) -> str:
        self.read_bytes += path.stat().st_size
        return super()._hash(path)


def hashed(state: Path, path: Path) -> tuple[str, int]:
    """A fresh run's digest of ``path`` (knowing ``state``'s cache) and the bytes it read, saved."""
    hasher = CountingHasher.from_state(state)
    assert isinstance(hasher, CountingHasher)
    digest = hasher.digest(path)
    hasher.save(state)
    return digest, hasher.read_bytes


def test_a_file_hashed_once_is_not_read_again_while_its_stat_is_the_same(
    tmp_path: Path, settled: None
) -> None:
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"x" * 100_000)
    assert hashed(state, wheel) == (sha256_of(b"x" * 100_000), 100_000)
    assert (state / context.HASH_CACHE_NAME).is_file()
    assert hashed(state, wheel) == (sha256_of(b"x" * 100_000), 0)  # a stat, no read


def test_a_changed_file_of_the_same_size_is_hashed_again(tmp_path: Path, settled: None) -> None:
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"a" * 1000)
    os.utime(wheel, ns=(1_000_000_000_000, 1_000_000_000_000))
    hashed(state, wheel)
    # same size, rewritten in place, mtime touched: a new key, read again
    wheel.write_bytes(b"b" * 1000)
    os.utime(wheel, ns=(1_000_000_001_000, 1_000_000_001_000))
    assert hashed(state, wheel) == (sha256_of(b"b" * 1000), 1000)
    # same size, and the mtime set back to what the cache holds (touch -d): ctime still moved
    wheel.write_bytes(b"c" * 1000)
    os.utime(wheel, ns=(1_000_000_001_000, 1_000_000_001_000))
    assert hashed(state, wheel) == (sha256_of(b"c" * 1000), 1000)


def test_a_file_written_just_now_is_not_remembered(tmp_path: Path) -> None:
    """A write in the same timestamp tick after the hash would leave the stat unchanged."""
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"new")
    assert hashed(state, wheel) == (sha256_of(b"new"), 3)
    assert hashed(state, wheel) == (sha256_of(b"new"), 3)  # read again: it has not settled yet


@pytest.mark.parametrize(
    "cache",
    [
        b"not json",
        b"[]",
        b'{"version": 2, "files": []}',
        b'{"version": 1, "files": [], "extra": 1}',
        b'{"version": 1, "version": 1, "files": []}',  # a key given twice
        b'{"version": 1, "files": [["PATH", 3, NaN, 1, 1, "' + b"0" * 64 + b'"]]}',
        b'{"version": 1, "files": [["PATH", 3, 1, 1, 1, "not a digest"]]}',
        b'{"version": 1, "files": [["PATH", true, 1, 1, 1, "' + b"0" * 64 + b'"]]}',
        b'{"version": 1, "files": [["PATH", -3, 1, 1, 1, "' + b"0" * 64 + b'"]]}',
        b'{"version": 1, "files": [["PATH", 3, 1, 1, 1]]}',
        b"[" * 100_000,  # nesting deep enough to exhaust the parser
        b'{"version": 1, "files": []}' + b" " * context.HASH_CACHE_BYTES,  # over the bound
    ],
)
def test_a_corrupted_hash_cache_is_ignored(tmp_path: Path, settled: None, cache: bytes) -> None:
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"abc")
    (state / context.HASH_CACHE_NAME).write_bytes(cache.replace(b'"PATH"', json.dumps(str(wheel)).encode()))
    assert context.read_hash_cache(state / context.HASH_CACHE_NAME) == {}
    assert hashed(state, wheel) == (sha256_of(b"abc"), 3)  # hashed, and the cache rewritten
    assert hashed(state, wheel) == (sha256_of(b"abc"), 0)


def test_a_hash_cache_that_is_no_regular_file_is_ignored(tmp_path: Path, settled: None) -> None:
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"abc")
    os.mkfifo(state / context.HASH_CACHE_NAME)  # never opened for a blocking read
    assert FileHasher.from_state(state).digest(wheel) == sha256_of(b"abc")


def test_a_valid_cache_entry_is_used_and_nothing_is_written_when_nothing_changed(
    tmp_path: Path, settled: None
) -> None:
    state, wheel = tmp_path / "state", tmp_path / "torch.whl"
    state.mkdir()
    wheel.write_bytes(b"abc")
    hashed(state, wheel)
    cache = state / context.HASH_CACHE_NAME
    before = cache.stat().st_mtime_ns, cache.stat().st_ino
    hashed(state, wheel)
    assert (cache.stat().st_mtime_ns, cache.stat().st_ino) == before
