"""The extension check's modules built at image build time, and when verification may use them.

``check.py build-extensions`` (a devel image's Dockerfile runs it, with no GPU, as every `docker
build`) builds the check's own module (``extension``) on the CPU always, and the CUDA one where torch
is a CUDA build and nvcc exists, then copies only the finished libraries and a manifest into
``DIRECTORY``: load_inline's build directory holds absolute paths (build.ninja) and takes a lock
file, and verification may run as another uid on a read-only root, so nothing is built, locked or
written there at verify time. Verification (a GPU runner's minutes) then only loads and runs them.

The manifest is input like any other (a derived image may have edited it): read bounded and
strictly, and a module is used only when everything it was built from matches this probe and this
image (the sources' digest, torch's build, the Python, the machine, for CUDA the arch list) and the
library is the one the manifest names (sha256). Anything else means the check builds as before and
says why; it never means a pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import extension

DIRECTORY = "/opt/imagekit/extensions"
# Where the modules are looked for and built into instead (tests; an image keeps the default).
DIRECTORY_ENV = "IMAGEKIT_EXTENSIONS_DIR"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
MANIFEST_MAX_BYTES = 16 * 1024
MODULE_MAX_BYTES = 512 * 1024 * 1024
KINDS = ("cpu", "cuda")
_TEXT = re.compile(r"^[A-Za-z0-9 ._+;:/()-]{0,200}$")  # a version, an arch list, a machine name
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """The manifest is missing, unreadable or not what build-extensions writes."""


@dataclass(frozen=True)
class BuildKey:
    """What a built module depends on; a module is used only where the key is this image's own."""

    source_sha256: str  # extension.source_digest() of the probe that built it
    torch: str  # torch.__version__
    torch_cuda: str | None  # torch.version.cuda
    torch_git: str | None  # torch.version.git_version: one version string, two builds (stacks)
    python: str  # "3.11"
    machine: str  # platform.machine()
    arch_list: str | None  # TORCH_CUDA_ARCH_LIST (the CUDA module's architectures)


@dataclass(frozen=True)
class BuiltModule:
    kind: str  # cpu | cuda
    sha256: str  # of the library file
    build_s: float  # what building it took at image build time: what loading it saves


@dataclass(frozen=True)
class Usable:
    """A module verification may load: where it is, and what the manifest says of it."""

    path: str
    module: BuiltModule
    name: str


def directory(env: dict[str, str]) -> str:
    return env.get(DIRECTORY_ENV) or DIRECTORY


def module_name(kind: str) -> str:
    """The module's import name: load_inline wrote PyInit_<name> into it, so it is fixed."""
    return f"imagekit_check_{kind}"


def module_path(root: str, kind: str) -> str:
    return os.path.join(root, module_name(kind) + ".so")


def current_key(torch: Any, env: dict[str, str]) -> BuildKey:
    version = getattr(torch, "version", None)
    arch_list = (env.get("TORCH_CUDA_ARCH_LIST") or "").strip() or None
    return BuildKey(
        source_sha256=extension.source_digest(),
        torch=str(torch.__version__),
        torch_cuda=getattr(version, "cuda", None),
        torch_git=getattr(version, "git_version", None),
        python="{}.{}".format(*sys.version_info[:2]),
        machine=platform.machine(),
        arch_list=arch_list,
    )


# -- the manifest --------------------------------------------------------------------------------


def _text(value: Any, what: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _TEXT.match(value):
        raise ManifestError(f"{what} is not a short plain string")
    return value


def _key(raw: Any) -> BuildKey:
    fields = set(BuildKey.__dataclass_fields__)
    if not isinstance(raw, dict) or set(raw) != fields:
        raise ManifestError(f"key must have exactly {', '.join(sorted(fields))}")
    if not isinstance(raw["source_sha256"], str) or not _SHA256.match(raw["source_sha256"]):
        raise ManifestError("key.source_sha256 is not a sha256")
    return BuildKey(
        source_sha256=raw["source_sha256"],
        torch=str(_text(raw["torch"], "key.torch")),
        torch_cuda=_text(raw["torch_cuda"], "key.torch_cuda", optional=True),
        torch_git=_text(raw["torch_git"], "key.torch_git", optional=True),
        python=str(_text(raw["python"], "key.python")),
        machine=str(_text(raw["machine"], "key.machine")),
        arch_list=_text(raw["arch_list"], "key.arch_list", optional=True),
    )


def _module(kind: str, raw: Any) -> BuiltModule:
    if not isinstance(raw, dict) or set(raw) != {"sha256", "build_s"}:
        raise ManifestError(f"modules.{kind} must have exactly build_s, sha256")
    digest, seconds = raw["sha256"], raw["build_s"]
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise ManifestError(f"modules.{kind}.sha256 is not a sha256")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e6:
        raise ManifestError(f"modules.{kind}.build_s is not a number of seconds")
    return BuiltModule(kind, digest, float(seconds))


def parse_manifest(data: bytes) -> tuple[BuildKey, dict[str, BuiltModule]]:
    """The manifest's key and modules, or ManifestError: nothing but what build-extensions writes."""
    if len(data) > MANIFEST_MAX_BYTES:
        raise ManifestError(f"over {MANIFEST_MAX_BYTES} bytes")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or set(raw) != {"schema", "key", "modules"}:
        raise ManifestError("must have exactly schema, key, modules")
    if raw["schema"] != MANIFEST_SCHEMA or isinstance(raw["schema"], bool):
        raise ManifestError(f"schema {raw['schema']!r}, not {MANIFEST_SCHEMA}")
    modules = raw["modules"]
    if not isinstance(modules, dict) or not modules or not set(modules) <= set(KINDS):
        raise ManifestError(f"modules must name some of {', '.join(KINDS)}")
    return _key(raw["key"]), {kind: _module(kind, value) for kind, value in modules.items()}


def read_manifest(root: str) -> tuple[BuildKey, dict[str, BuiltModule]]:
    path = os.path.join(root, MANIFEST)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MANIFEST_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(f"no {path} (the image was built without `check.py build-extensions`)") from None
    except OSError as exc:
        raise ManifestError(f"{path} unreadable: {exc}") from None
    try:
        return parse_manifest(data)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def file_sha256(path: str) -> str:
    """sha256 of a regular file no larger than MODULE_MAX_BYTES (OSError otherwise)."""
    info = os.stat(path, follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{path} is not a regular file")
    if info.st_size > MODULE_MAX_BYTES:
        raise OSError(f"{path} is over {MODULE_MAX_BYTES} bytes")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _key_difference(built: BuildKey, here: BuildKey, kind: str) -> str | None:
    """Why a module built under ``built`` is stale here, or None; the CPU module ignores the arch list."""
    if built.source_sha256 != here.source_sha256:
        return "built from other sources than this probe's (another imagekit version)"
    for field, what in (
        ("torch", "torch"),
        ("torch_cuda", "torch's CUDA"),
        ("torch_git", "torch's commit"),
        ("python", "Python"),
        ("machine", "machine"),
    ):
        if getattr(built, field) != getattr(here, field):
            return f"built for {what} {getattr(built, field)}, this is {getattr(here, field)}"
    if kind == "cuda" and built.arch_list != here.arch_list:
        return f"built for TORCH_CUDA_ARCH_LIST {built.arch_list!r}, the environment says {here.arch_list!r}"
    return None


def usable(env: dict[str, str], here: BuildKey) -> dict[str, Usable | str]:
    """Per kind, the module verification may load, or why it may not (missing, stale, foreign)."""
    root = directory(env)
    try:
        built, modules = read_manifest(root)
    except ManifestError as exc:
        return dict.fromkeys(KINDS, f"manifest: {exc}")
    found: dict[str, Usable | str] = {}
    for kind in KINDS:
        module = modules.get(kind)
        stale = _key_difference(built, here, kind)
        path = module_path(root, kind)
        if module is None:
            found[kind] = f"not built at image build time (the manifest names {', '.join(sorted(modules))})"
        elif stale:
            found[kind] = f"stale: {stale}"
        else:
            try:
                digest = file_sha256(path)
            except OSError as exc:
                found[kind] = f"unreadable: {exc}"
                continue
            found[kind] = (
                Usable(path, module, module_name(kind))
                if digest == module.sha256
                else f"{path} is not the library the manifest names (sha256 differs)"
            )
    return found


# -- building (the build step, ``buildsteps.build_extensions``) ---------------------------------


def build_one(cpp_extension: Any, kind: str, scratch: str) -> tuple[dict[str, Any], str | None]:
    """(a task-style result, the built library's path or None) for one module."""
    cuda = kind == "cuda"
    failed = extension.missing_ninja(cpp_extension)
    if failed is None and cuda:
        _, failed = extension.arch_flags(cpp_extension)
    if failed is not None:
        return failed, None
    build_dir = os.path.join(scratch, kind)
    os.makedirs(build_dir)
    started = time.monotonic()
    try:
        extension.build_module(cpp_extension, cuda, module_name(kind), build_dir)
    except Exception as exc:  # the compiler's own words are in the message: diagnose_build reads them
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[-4000:]}, None
    path = module_path(build_dir, kind)
    if not os.path.isfile(path):
        return {"ok": False, "error": f"load_inline built no {os.path.basename(path)}"}, None
    return {"ok": True, "build_s": round(time.monotonic() - started, 1)}, path


def install(root: str, key: BuildKey, built: dict[str, tuple[str, float]]) -> None:
    """Copy the libraries in, then the manifest last (each whole: a temporary name, then rename),
    readable by every uid verification may run as."""
    os.makedirs(root, exist_ok=True)
    os.chmod(root, 0o755)
    modules: dict[str, Any] = {}
    for kind, (library, seconds) in built.items():
        target = module_path(root, kind)
        shutil.copyfile(library, target + ".partial")
        os.chmod(target + ".partial", 0o644)
        os.replace(target + ".partial", target)
        modules[kind] = {"sha256": file_sha256(target), "build_s": seconds}
    manifest = {"schema": MANIFEST_SCHEMA, "key": asdict(key), "modules": modules}
    partial = os.path.join(root, MANIFEST + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
    os.chmod(partial, 0o644)
    os.replace(partial, os.path.join(root, MANIFEST))
