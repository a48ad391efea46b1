"""The extension check's build-time modules (``imagekit.probe.prebuilt``): when verification may load
one, and the manifest read as untrusted input. A mismatch of any kind means the check builds the
module itself and says why; nothing here may read as usable unless everything matches. No torch:
a stand-in says what torch build the image holds, and the libraries are opaque bytes."""

from __future__ import annotations

import json
import stat
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.probe import extension, prebuilt

TORCH = SimpleNamespace(
    __version__="2.5.1+cu121", version=SimpleNamespace(cuda="12.1", git_version="a8e7c98")
)
ENV = {"TORCH_CUDA_ARCH_LIST": "5.0;8.0;9.0+PTX"}


def install(
    root: Path, tmp_path: Path, key: prebuilt.BuildKey, kinds: tuple[str, ...] = prebuilt.KINDS
) -> None:
    """What build-extensions leaves in an image, for libraries of made-up bytes."""
    built = {}
    for kind in kinds:
        library = tmp_path / f"built-{kind}.so"
        library.write_bytes(b"\x7fELF not really " + kind.encode())
        built[kind] = (str(library), 12.5)
    prebuilt.install(str(root), key, built)


def found(root: Path, key: prebuilt.BuildKey | None = None) -> dict[str, prebuilt.Usable | str]:
    env = {**ENV, prebuilt.DIRECTORY_ENV: str(root)}
    return prebuilt.usable(env, key or prebuilt.current_key(TORCH, env))


@pytest.fixture
def here() -> prebuilt.BuildKey:
    return prebuilt.current_key(TORCH, ENV)


def test_the_image_s_own_modules_are_usable(tmp_path: Path, here: prebuilt.BuildKey) -> None:
    root = tmp_path / "ext"
    install(root, tmp_path, here)
    result = found(root)
    for kind in prebuilt.KINDS:
        usable = result[kind]
        assert isinstance(usable, prebuilt.Usable), usable
        assert (
            usable.path == str(root / f"imagekit_check_{kind}.so") and usable.name == f"imagekit_check_{kind}"
        )
        assert usable.module.build_s == 12.5
    # readable by any uid verification runs as; nothing but the libraries and the manifest
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert sorted(p.name for p in root.iterdir()) == [
        "imagekit_check_cpu.so",
        "imagekit_check_cuda.so",
        "manifest.json",
    ]
    assert {stat.S_IMODE(p.stat().st_mode) for p in root.iterdir()} == {0o644}
    assert here.source_sha256 == extension.source_digest() and here.arch_list == "5.0;8.0;9.0+PTX"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("source_sha256", "0" * 64, "built from other sources than this probe's"),
        ("torch", "2.5.0+cu121", "built for torch 2.5.0+cu121, this is 2.5.1+cu121"),
        ("torch_cuda", "11.8", "built for torch's CUDA 11.8, this is 12.1"),
        ("torch_git", "ffffff0", "built for torch's commit ffffff0, this is a8e7c98"),
        ("python", "3.10", "built for Python 3.10"),
        ("machine", "aarch64", "built for machine aarch64"),
    ],
)
def test_a_module_built_for_anything_else_is_stale(
    tmp_path: Path, here: prebuilt.BuildKey, field: str, value: str, reason: str
) -> None:
    root = tmp_path / "ext"
    install(root, tmp_path, replace(here, **{field: value}))
    for kind, why in found(root).items():
        assert isinstance(why, str) and why.startswith("stale: ") and reason in why, (kind, why)


def test_another_arch_list_makes_only_the_cuda_module_stale(tmp_path: Path, here: prebuilt.BuildKey) -> None:
    root = tmp_path / "ext"
    install(root, tmp_path, replace(here, arch_list="8.0"))
    result = found(root)
    assert isinstance(result["cpu"], prebuilt.Usable)
    assert result["cuda"] == (
        "stale: built for TORCH_CUDA_ARCH_LIST '8.0', the environment says '5.0;8.0;9.0+PTX'"
    )


def test_a_library_that_is_not_the_manifest_s_is_not_loaded(tmp_path: Path, here: prebuilt.BuildKey) -> None:
    root = tmp_path / "ext"
    install(root, tmp_path, here)
    cpu = root / "imagekit_check_cpu.so"
    cpu.chmod(0o644)
    cpu.write_bytes(cpu.read_bytes() + b"\0")
    cuda = root / "imagekit_check_cuda.so"
    cuda.unlink()
    cuda.symlink_to(tmp_path / "built-cuda.so")  # the very bytes, but not a file of the directory's own
    result = found(root)
    assert result["cpu"] == f"{cpu} is not the library the manifest names (sha256 differs)"
    assert result["cuda"] == f"unreadable: {cuda} is not a regular file"


def test_no_manifest_or_a_module_it_does_not_name(tmp_path: Path, here: prebuilt.BuildKey) -> None:
    missing = found(tmp_path / "nothing")
    assert set(missing.values()) == {
        f"manifest: no {tmp_path / 'nothing' / 'manifest.json'} (the image was built without "
        "`check.py build-extensions`)"
    }
    root = tmp_path / "ext"
    install(root, tmp_path, here, kinds=("cpu",))  # a CPU torch, or no nvcc
    result = found(root)
    assert isinstance(result["cpu"], prebuilt.Usable)
    assert result["cuda"] == "not built at image build time (the manifest names cpu)"


def manifest(here: prebuilt.BuildKey, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "schema": 1,
        "key": asdict(here),
        "modules": {"cpu": {"sha256": "a" * 64, "build_s": 30.0}},
    }
    raw.update(changes)
    return raw


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: {**m, "extra": 1}, "must have exactly schema, key, modules"),
        (lambda m: {**m, "schema": True}, "schema True, not 1"),
        (lambda m: {**m, "schema": 2}, "schema 2, not 1"),
        (lambda m: {**m, "modules": {}}, "modules must name some of cpu, cuda"),
        (lambda m: {**m, "modules": {"rocm": m["modules"]["cpu"]}}, "modules must name some of cpu, cuda"),
        (lambda m: {**m, "modules": {"cpu": {"sha256": "A" * 64, "build_s": 1}}}, "is not a sha256"),
        (
            lambda m: {**m, "modules": {"cpu": {"sha256": "a" * 64, "build_s": True}}},
            "not a number of seconds",
        ),
        (lambda m: {**m, "modules": {"cpu": {"sha256": "a" * 64, "build_s": -1}}}, "not a number of seconds"),
        (lambda m: {**m, "modules": {"cpu": {"sha256": "a" * 64}}}, "must have exactly build_s, sha256"),
        (lambda m: {**m, "key": {**m["key"], "torch": "2.5.1\nX"}}, "key.torch is not a short plain string"),
        (lambda m: {**m, "key": {**m["key"], "python": 3.11}}, "key.python is not a short plain string"),
        (lambda m: {**m, "key": {**m["key"], "torch": "x" * 201}}, "key.torch is not a short plain string"),
        (
            lambda m: {**m, "key": {**m["key"], "source_sha256": "../../x"}},
            "key.source_sha256 is not a sha256",
        ),
        (lambda m: {**m, "key": {k: v for k, v in m["key"].items() if k != "arch_list"}}, "key must have"),
        (lambda m: [m], "must have exactly schema, key, modules"),
    ],
)
def test_the_manifest_is_read_strictly(here: prebuilt.BuildKey, edit: Any, message: str) -> None:
    prebuilt.parse_manifest(json.dumps(manifest(here)).encode())  # the unedited one parses
    with pytest.raises(prebuilt.ManifestError) as raised:
        prebuilt.parse_manifest(json.dumps(edit(manifest(here))).encode())
    assert message in str(raised.value)


def test_an_oversized_or_garbled_manifest_is_refused(tmp_path: Path, here: prebuilt.BuildKey) -> None:
    with pytest.raises(prebuilt.ManifestError, match="over 16384 bytes"):
        prebuilt.parse_manifest(b" " * 16385)
    with pytest.raises(prebuilt.ManifestError, match="not JSON"):
        prebuilt.parse_manifest(b"\xff\xfe")
    root = tmp_path / "ext"
    install(root, tmp_path, here)
    (root / "manifest.json").chmod(0o644)
    (root / "manifest.json").write_text(json.dumps(manifest(here)) + " " * 20000)
    assert all("over 16384 bytes" in str(why) for why in found(root).values())
