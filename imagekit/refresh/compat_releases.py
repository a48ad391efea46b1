"""The torch section of the compat table, rebuilt release by release from what the registries say:
each release's patches and CPythons (PyPI's file list), the CUDA build and libraries of PyPI's wheel
(pip's reports), the variants (PyTorch's index), the torchvision / torchaudio release paired with
each patch; what they cannot say is kept from the table and listed as kept."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from imagekit.core.versions import compare, minor_of, version_key
from imagekit.refresh.compat_metadata import (
    AARCH64,
    X86_64,
    admits,
    by_cuda,
    cuda_build,
    exact_pin,
    index_variants,
    libraries_from,
    parse_time,
    parse_wheel,
    plain,
    report_item,
    report_wheel,
    torch_requirement,
    variant_of,
)
from imagekit.refresh.compat_sources import Source
from imagekit.refresh.compat_table import RELEASE_KEYS, flow
from imagekit.refresh.pip_report import RefreshError

COMPANIONS = ("torchvision", "torchaudio")
# A companion whose torch requirement is not an exact pin pairs with the torch patch it was
# uploaded with: within this many days of that patch's first upload.
RELEASE_WINDOW = dt.timedelta(days=3)
# Python the dry runs resolve for, when the patch has a wheel for it.
DEFAULT_PYTHON = "3.12"


@dataclass
class Patch:
    version: str
    uploaded: dt.datetime | None
    pythons: set[tuple[int, int]] = field(default_factory=set)


def releases_in(
    files: list[dict[str, Any]], *, cpython_only: bool, machine: str = X86_64
) -> dict[str, Patch]:
    """Final releases with a manylinux wheel for ``machine`` (a CPython-specific one when
    `cpython_only`), with the CPythons of their cpXY wheels and their first upload."""
    patches: dict[str, Patch] = {}
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or machine not in wheel.machines or not plain(wheel.version) or entry.get("yanked"):
            continue
        if cpython_only and wheel.python is None:
            continue
        patch = patches.setdefault(wheel.version, Patch(wheel.version, None))
        if wheel.python:
            patch.pythons.add(wheel.python)
        uploaded = parse_time(entry.get("upload-time"))
        if uploaded and (patch.uploaded is None or uploaded < patch.uploaded):
            patch.uploaded = uploaded
    return patches


@dataclass
class Companion:
    version: str
    uploaded: dt.datetime | None
    torch: str | None  # its torch specifier; None: it names no torch
    stable_abi: bool = False  # only py3-none / abi3 wheels: no operator compiled against one torch


# torchvision 0.(m+15) and torchaudio 2.m with CPython-specific wheels are built for torch 2.m:
# their C++ operators are compiled against that release, so one of another minor is no pair,
# whatever its metadata admits. Stable-ABI companions (a single py3-none or abi3 wheel, as from
# torch 2.15 on: torchvision 0.29.2 requires torch>=2.14.0, torchaudio 2.11.1 torch>=2.11, both
# uploaded with torch 2.15.0) state the torch range they accept themselves: their requirement
# decides, not version arithmetic.
COMPANION_MINOR_OFFSET = {"torchvision": 15, "torchaudio": 0}


def built_for(name: str, companion: str, torch: str) -> bool:
    """Whether ``companion``'s release line is the one for torch's minor."""
    torch_key, companion_key = version_key(torch), version_key(companion)
    if len(torch_key) < 2 or len(companion_key) < 2 or name not in COMPANION_MINOR_OFFSET:
        return True
    return companion_key[1] == torch_key[1] + COMPANION_MINOR_OFFSET[name]


def pair(patch: Patch, companions: list[Companion], name: str) -> str | None:
    """The companion release that goes with a torch patch: the newest that pins it exactly, else
    the newest uploaded with it (within RELEASE_WINDOW) whose torch requirement admits it and that
    is of the release line built for its minor, or of stable ABI."""
    exact = [
        c for c in companions if exact_pin(c.torch) and compare(exact_pin(c.torch) or "0", patch.version) == 0
    ]
    if exact:
        return max(exact, key=lambda c: version_key(c.version)).version
    near = [
        c
        for c in companions
        if c.uploaded
        and patch.uploaded
        and abs(c.uploaded - patch.uploaded) <= RELEASE_WINDOW
        and (c.torch is None or admits(c.torch, patch.version))
        and (c.stable_abi or built_for(name, c.version, patch.version))
    ]
    if near:
        return max(near, key=lambda c: version_key(c.version)).version
    return None


def python_for(patch: Patch) -> str:
    """The CPython a dry run resolves for: DEFAULT_PYTHON, else the newest below it with a wheel."""
    wanted = tuple(int(p) for p in DEFAULT_PYTHON.split("."))
    if not patch.pythons or wanted in patch.pythons:
        return DEFAULT_PYTHON
    below = [p for p in patch.pythons if p <= wanted]
    major, minor = max(below) if below else min(patch.pythons)
    return f"{major}.{minor}"


@dataclass
class Refresh:
    releases: dict[str, dict[str, Any]]
    kept: list[str]
    notes: list[str]


def by_minor(patches: Iterable[Patch]) -> dict[str, list[Patch]]:
    """Patches grouped by their release (minor), oldest first."""
    minors: dict[str, list[Patch]] = {}
    for patch in sorted(patches, key=lambda p: version_key(p.version)):
        minors.setdefault(minor_of(patch.version), []).append(patch)
    return minors


def refresh(existing: dict[str, Any], source: Source, since: str | None, notes: list[str]) -> Refresh:
    old_releases: dict[str, dict[str, Any]] = {
        str(k): dict(v) for k, v in existing.get("releases", {}).items()
    }
    kept: list[str] = []
    listing = source.listing("torch")
    minors = by_minor(releases_in(listing, cpython_only=True).values())
    if not minors:
        raise RefreshError("the index lists no torch wheels for manylinux x86_64")
    arm = by_minor(releases_in(listing, cpython_only=True, machine=AARCH64).values())
    # default: re-read from the newest release the table has (all of the index for an empty table)
    floor = since or (max(old_releases, key=version_key) if old_releases else min(minors, key=version_key))
    chosen = sorted((m for m in minors if compare(m, floor) >= 0), key=version_key)
    if not chosen:
        raise RefreshError(f"the index has no torch release from {floor} on")
    first_upload = min((p.uploaded for m in chosen for p in minors[m] if p.uploaded), default=None)
    builder = ReleaseBuilder(
        source,
        read_companions(source, first_upload, notes),
        {project: source.torch_index_files(project) for project in ("torch", "torchvision")},
        kept,
        notes,
    )
    releases = {m: v for m, v in old_releases.items() if compare(m, floor) < 0}
    for minor in chosen:
        releases[minor] = builder.release(
            minor, minors[minor], arm.get(minor, []), old_releases.get(minor) or {}
        )
    for minor, entry in releases.items():
        if "checked" not in entry:
            entry["checked"] = True
            if compare(minor, floor) < 0:
                kept.append(f"{minor}: not re-read (older than {floor}); checked: true assumed (no mark)")
    return Refresh(dict(sorted(releases.items(), key=lambda kv: version_key(kv[0]))), kept, notes)


def read_companions(
    source: Source, first_upload: dt.datetime | None, notes: list[str]
) -> dict[str, list[Companion]]:
    """Every torchvision / torchaudio release uploaded since the first chosen torch patch, with the
    torch requirement its metadata states."""
    companions: dict[str, list[Companion]] = {}
    for project in COMPANIONS:
        versions = releases_in(source.listing(project), cpython_only=False)
        if first_upload is not None:
            wanted = [
                v
                for v, r in versions.items()
                if r.uploaded is None or r.uploaded >= first_upload - RELEASE_WINDOW
            ]
        else:
            wanted = sorted(versions, key=version_key)[-12:]
            notes.append(f"{project}: the index gives no upload times; reading its 12 newest releases")
        companions[project] = []
        for version in sorted(wanted, key=version_key):
            release = versions[version]
            report = source.report(
                f"{project}-{version}", [f"{project}=={version}"], deps=False, python=python_for(release)
            )
            meta = report_item(report, project)
            requirement = torch_requirement(meta.get("requires_dist"))
            # no cpXY wheel among its files: one wheel for every CPython (stable ABI)
            companions[project].append(Companion(version, release.uploaded, requirement, not release.pythons))
    return companions


@dataclass
class ReleaseBuilder:
    """Rebuilds one release's entry from what the registries say, keeping (and listing in `kept`)
    what they cannot say."""

    source: Source
    companions: dict[str, list[Companion]]
    torch_index: dict[str, list[str] | None]  # file names on PyTorch's index; None: not read
    kept: list[str]
    notes: list[str]

    def release(
        self, minor: str, patches: list[Patch], arm_patches: list[Patch], old: dict[str, Any]
    ) -> dict[str, Any]:
        """``patches``: the x86_64 ones, oldest first; ``arm_patches`` those with an aarch64 wheel."""
        libs = self.pypi_libraries(minor, patches)
        pypi_default = variant_of(libs["cudart"])
        variants, checked = self.variants(minor, patches, pypi_default, old)
        entry: dict[str, Any] = {"variants": variants, "pypi_default": pypi_default}
        cudnn = libs.get("cudnn")
        if cudnn:
            entry["cudnn_major"] = version_key(cudnn)[0]
        elif "cudnn_major" in old:
            entry["cudnn_major"] = old["cudnn_major"]
            self.kept.append(f"{minor}: cudnn_major {old['cudnn_major']} (PyPI's wheel pins no cuDNN)")
        entry["python"] = self.python(minor, patches)
        if "numpy" in old:
            entry["numpy"] = old["numpy"]
            self.kept.append(f"{minor}: numpy {old['numpy']!r} (no registry states it)")
        entry["libraries"] = self.libraries(minor, patches, variants, pypi_default, libs, old)
        entry["patches"] = self.pairs(minor, patches, old)
        entry["checked"] = checked
        entry["aarch64"] = self.aarch64(minor, arm_patches, old)
        for key, value in old.items():
            if key not in RELEASE_KEYS:
                entry[key] = value
                self.kept.append(f"{minor}: {key} (a key this tool does not refresh)")
        return entry

    def pypi_libraries(self, minor: str, patches: list[Patch]) -> dict[str, str]:
        """What PyPI's wheel of the newest patch pulls (cuDNN, NCCL, cudart); every patch is read
        and a patch that pins otherwise is noted."""
        per_patch: dict[str, dict[str, str]] = {}
        for patch in patches:
            report = self.source.report(
                f"torch-{patch.version}", [f"torch=={patch.version}"], deps=True, python=python_for(patch)
            )
            meta = report_item(report, "torch")
            if meta["version"] != patch.version:
                raise RefreshError(f"the report for torch=={patch.version} installs torch {meta['version']}")
            self.requires_python_note(minor, patch, meta.get("requires_python"))
            libs = libraries_from(report)
            if "cudart" not in libs:
                raise RefreshError(
                    f"torch {patch.version} ({report_wheel(report, 'torch')}) pulls no CUDA runtime"
                )
            per_patch[patch.version] = libs
        newest = patches[-1].version
        libs = per_patch[newest]
        for version, other in per_patch.items():
            if other != libs:
                self.notes.append(
                    f"{minor}: torch {version} pins {fmt_libs(other)}, {newest} {fmt_libs(libs)}; "
                    f"the table follows {newest}"
                )
        return libs

    def requires_python_note(self, minor: str, patch: Patch, requires_python: str | None) -> None:
        floor = re.match(r">=\s*(\d+)\.(\d+)", requires_python or "")
        if floor and (int(floor.group(1)), int(floor.group(2))) != min(patch.pythons):
            self.notes.append(
                f"{minor}: torch {patch.version} says Requires-Python {requires_python} "
                f"but its oldest wheel is for CPython {min(patch.pythons)[0]}.{min(patch.pythons)[1]}"
            )

    def index_variants(self, minor: str, patches: list[Patch], machine: str) -> list[str] | None:
        """The variants of these patches on PyTorch's index (torch, and the paired torchvision where
        one exists); None when the index was not read or lists none."""
        if self.torch_index["torch"] is None:
            return None
        found = index_variants(self.torch_index["torch"], "torch", {p.version for p in patches}, machine)
        visions = {v for p in patches if (v := pair(p, self.companions["torchvision"], "torchvision"))}
        if found and visions and self.torch_index["torchvision"] is not None:
            with_vision = index_variants(self.torch_index["torchvision"], "torchvision", visions, machine)
            for variant in by_cuda(found - with_vision):
                self.notes.append(
                    f"{minor}: PyTorch's index has torch+{variant} but no torchvision+{variant} "
                    f"for {machine}; not listed"
                )
            found &= with_vision
        return by_cuda(found) if found else None

    def variants(
        self, minor: str, patches: list[Patch], pypi_default: str, old: dict[str, Any]
    ) -> tuple[list[str], bool]:
        """The x86_64 CUDA variants and whether they were read: PyTorch's index, else the table."""
        read = self.index_variants(minor, patches, X86_64)
        if read:
            variants, checked = read, True
        elif old.get("variants"):
            variants, checked = list(old["variants"]), bool(old.get("checked", True))
            self.kept.append(f"{minor}: variants {', '.join(variants)} (PyTorch's index not read)")
        else:
            variants, checked = [pypi_default], False
            self.kept.append(
                f"{minor}: variants unknown, only PyPI's {pypi_default} listed "
                "(PyTorch's index not read): checked: false"
            )
        if pypi_default not in variants:
            self.notes.append(
                f"{minor}: PyPI's wheel is {pypi_default}, which the variant list lacked; added"
            )
            variants = by_cuda([*variants, pypi_default])
        return variants, checked

    def python(self, minor: str, patches: list[Patch]) -> list[str]:
        """The oldest and newest CPython every patch has a wheel for."""
        lowest = max(min(p.pythons) for p in patches)
        highest = min(max(p.pythons) for p in patches)
        for patch in patches:
            if (min(patch.pythons), max(patch.pythons)) != (lowest, highest):
                span = f"{min(patch.pythons)}-{max(patch.pythons)}"
                self.notes.append(
                    f"{minor}: torch {patch.version} has wheels for CPython {span}; "
                    "the table keeps what all patches have"
                )
        return [f"{lowest[0]}.{lowest[1]}", f"{highest[0]}.{highest[1]}"]

    def libraries(
        self,
        minor: str,
        patches: list[Patch],
        variants: list[str],
        pypi_default: str,
        libs: dict[str, str],
        old: dict[str, Any],
    ) -> dict[str, dict[str, str]]:
        """Per variant: PyPI's from its report, the others from PyPI's index or the table."""
        libraries: dict[str, dict[str, str]] = {}
        old_libraries = old.get("libraries") or {}
        for variant in variants:
            if variant == pypi_default:
                libraries[variant] = libs
                continue
            read = None
            if self.torch_index["torch"] is not None:
                version = f"{patches[-1].version}+{variant}"
                read_report = self.source.torch_index_report(
                    f"torch-{version}", f"torch=={version}", variant, python_for(patches[-1])
                )
                read = libraries_from(read_report) if read_report else None
            if read:
                libraries[variant] = read
            elif variant in old_libraries:
                libraries[variant] = dict(old_libraries[variant])
                self.kept.append(f"{minor}: libraries of {variant} (not read from PyTorch's index)")
        return libraries

    def pairs(self, minor: str, patches: list[Patch], old: dict[str, Any]) -> dict[str, list[str | None]]:
        """torch patch -> [torchvision, torchaudio]; a patch the index no longer lists is kept."""
        pairs: dict[str, list[str | None]] = {}
        for patch in patches:
            pairs[patch.version] = [pair(patch, self.companions[project], project) for project in COMPANIONS]
        for version, value in (old.get("patches") or {}).items():
            if str(version) not in pairs:
                pairs[str(version)] = list(value) if value is not None else [None, None]
                self.kept.append(f"{minor}: patch {version} (not on the index any more)")
        return dict(sorted(pairs.items(), key=lambda kv: version_key(kv[0])))

    def aarch64(self, minor: str, patches: list[Patch], old: dict[str, Any]) -> dict[str, Any]:
        """PyPI's aarch64 build in effect (None: no aarch64 wheel) and the aarch64 variants of
        PyTorch's index, else the table's, else PyPI's alone (checked: false)."""
        pypi = self.pypi_aarch64(minor, patches)
        old_arm = old.get("aarch64") or {}
        read = self.index_variants(minor, patches, AARCH64) if patches else None
        if read:
            variants, checked = read, True
        elif old_arm.get("variants") is not None:
            variants, checked = list(old_arm["variants"]), bool(old_arm.get("checked", False))
            self.kept.append(f"{minor}: aarch64 variants {flow(variants)} (PyTorch's index not read)")
        else:
            variants, checked = [pypi] if pypi else [], False
            self.kept.append(
                f"{minor}: aarch64 variants unknown, only PyPI's {pypi or '(none)'} listed "
                "(PyTorch's index not read): checked: false"
            )
        if pypi and pypi not in variants:
            self.notes.append(
                f"{minor}: PyPI's aarch64 wheel is {pypi}, which the variant list lacked; added"
            )
            variants = by_cuda([*variants, pypi])
        return {"pypi": pypi, "variants": variants, "checked": checked}

    def pypi_aarch64(self, minor: str, patches: list[Patch]) -> str | None:
        """The build PyPI's aarch64 wheel of the newest patch is in effect (its Requires-Dist for
        Linux aarch64); every patch is read and one that differs is noted."""
        builds: dict[str, str] = {}
        for patch in patches:
            python = python_for(patch)
            report = self.source.report(
                f"torch-{patch.version}-{AARCH64}",
                [f"torch=={patch.version}"],
                deps=False,
                python=python,
                machine=AARCH64,
            )
            meta = report_item(report, "torch")
            if meta["version"] != patch.version:
                raise RefreshError(
                    f"the aarch64 report for torch=={patch.version} installs {meta['version']}"
                )
            builds[patch.version] = cuda_build(meta.get("requires_dist"), python, AARCH64)
        if not builds:
            return None
        newest = patches[-1].version
        for version, build in builds.items():
            if build != builds[newest]:
                self.notes.append(
                    f"{minor}: PyPI's aarch64 torch {version} is {build}, {newest} {builds[newest]}; "
                    f"the table follows {newest}"
                )
        return builds[newest]


def fmt_libs(libs: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in libs.items())
