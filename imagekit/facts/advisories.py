"""Security advisories against what imagekit's images install: the facts of ``imagekit/data/advisories.yaml``.

Each advisory names one package a cell's versions say it installs (torch, and the pip and
setuptools of its venv), the versions it affects as a PEP 440 range of a lower and an upper bound,
the first fixed version, a severity and a source note. ``imagekit.plan.advisories`` holds each
cell's versions against them. The file also names what every venv holds once the render has
upgraded it (``venv_tools``): the templates pin exactly those, so the plan knows.

The file is validated strictly when it is read (an empty or inverted range, a fixed version inside
or below the range, an unknown severity or package, an ID listed twice, a venv tool an advisory
affects): a broken shipped file is a bug (``AdvisoryDataError``, which a fast test catches); a
matrix's own advisories file (``advisories.file``) is a person's input, so its first problem is
one InputError line naming the entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagekit.core.errors import InputError
from imagekit.core.limits import MATRIX_BYTES, VERSION_CHARS
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import RECORD_CONFIG, SafeString, ShortText
from imagekit.core.text import printable, shown
from imagekit.core.yamlsource import PathKey, SourceDocument, format_path, parse_yaml
from imagekit.facts.compat import read_data

DATA_FILE = "advisories.yaml"
Severity = Literal["low", "medium", "high", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)  # mildest first: a threshold is "this or worse"
Package = Literal["torch", "pip", "setuptools"]
PACKAGES: tuple[Package, ...] = get_args(Package)
VENV_TOOLS: tuple[Package, ...] = ("pip", "setuptools")  # what the render pins in every venv
SUMMARY_CHARS = 200  # one line in a refusal, a report row and a job summary
ADVISORY_ID = SafeString(
    r"(CVE-[0-9]{4}-[0-9]{4,7}|GHSA(-[23456789cfghjmpqrvwx]{4}){3}|PYSEC-[0-9]{4}-[0-9]{1,7})",
    "an advisory ID (CVE-, GHSA- or PYSEC-)",
    "CVE-2025-32434",
    max_length=32,
)
AdvisoryId = Annotated[str, ADVISORY_ID]
VersionText = Annotated[
    str, SafeString(r"[0-9][0-9A-Za-z.+!-]*", "a version", "2.5.1", numeric_ok=True, max_length=VERSION_CHARS)
]
_QUOTE_IT = "write it quoted, like '2.6.0'"
_ENTRY_KEYS = frozenset({"id", "aliases", "package", "affected", "fixed", "severity", "summary", "source"})


class AdvisoryDataError(ValueError):
    """An advisories file that cannot be used: ``path`` is where in it, ``problem`` what is wrong."""

    def __init__(self, path: PathKey, problem: str, entry: str | None = None) -> None:
        named = f" ({entry})" if entry else ""
        super().__init__(f"{format_path(path)}{named}: {problem}")
        self.path = path
        self.problem = problem


def version_of(text: str) -> Version | None:
    """``text`` as a PEP 440 version; None when it is not one (a torch build named freely under
    allow_unknown cannot be held against a range, and is not)."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class VersionRange:
    """The affected versions: above ``lower`` (None: every older version) and below ``upper``."""

    text: str  # as written: "<2.6.0", ">=2.0,<=2.5.1"
    lower: Version | None
    lower_inclusive: bool
    upper: Version
    upper_inclusive: bool

    def contains(self, version: Version) -> bool:
        if self.lower is not None and (
            version < self.lower or (version == self.lower and not self.lower_inclusive)
        ):
            return False
        return version < self.upper or (version == self.upper and self.upper_inclusive)


def parse_range(text: object) -> VersionRange:
    """An affected range: a PEP 440 specifier set of at most one lower bound (>=, >) and exactly
    one upper bound (<, <=), which must hold at least one version. ValueError says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("must be a range like '<2.6.0' or '>=2.0,<=2.5.1'")
    try:
        specifiers = list(SpecifierSet(text))
    except InvalidSpecifier:
        raise ValueError(f"{shown(text)} is not a PEP 440 specifier set (like '>=2.0,<2.6.0')") from None
    lower: tuple[Version, bool] | None = None
    upper: tuple[Version, bool] | None = None
    for spec in specifiers:
        if spec.operator not in (">=", ">", "<=", "<") or spec.version.endswith(".*"):
            raise ValueError(f"{spec} is not a bound: a range takes >=, >, <= and < only")
        bound = (Version(spec.version), spec.operator.endswith("="))
        if spec.operator.startswith("<"):
            if upper is not None:
                raise ValueError(f"{shown(text)} has two upper bounds; keep one")
            upper = bound
        else:
            if lower is not None:
                raise ValueError(f"{shown(text)} has two lower bounds; keep one")
            lower = bound
    if upper is None:
        raise ValueError(
            f"{shown(text)} has no upper bound (< the fixed version, or <= the last affected one)"
        )
    low, low_inclusive = lower if lower is not None else (None, False)
    high, high_inclusive = upper
    if low is not None and (low > high or (low == high and not (low_inclusive and high_inclusive))):
        raise ValueError(f"{shown(text)} is empty: its lower bound is not below its upper bound")
    return VersionRange(text, low, low_inclusive, high, high_inclusive)


@dataclass(frozen=True)
class Advisory:
    id: str
    aliases: tuple[str, ...]
    package: Package
    affected: VersionRange
    fixed: str
    severity: Severity
    summary: str
    source: str

    def affects(self, version: str) -> bool:
        parsed = version_of(version)
        return parsed is not None and self.affected.contains(parsed)

    def at_least(self, threshold: Severity) -> bool:
        return SEVERITIES.index(self.severity) >= SEVERITIES.index(threshold)


@dataclass(frozen=True)
class AdvisoryFinding:
    """One advisory that affects what a cell installs: on the cell, in the report, the lock and the
    signed statement. ``waived`` holds the matrix's reason where it waives the advisory for this
    cell (a refusal otherwise, at or above the threshold); None for a finding that is only listed."""

    __pydantic_config__ = RECORD_CONFIG

    id: AdvisoryId
    package: Package
    version: VersionText  # what the cell installs
    fixed: VersionText
    severity: Severity
    summary: ShortText = ""
    waived: ShortText | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """``CVE-2025-32434 (critical): torch 2.5.1, fixed in 2.6.0; waived: <reason>``."""
        line = f"{self.id} ({self.severity}): {self.package} {self.version}, fixed in {self.fixed}"
        return line + (f"; waived: {self.waived}" if self.waived is not None else "")


@dataclass(frozen=True)
class Advisories:
    entries: tuple[Advisory, ...]
    venv_tools: Mapping[str, str]  # pip, setuptools -> the version every venv holds
    checked_on: str = ""

    def get(self, advisory_id: str) -> Advisory | None:
        return next((a for a in self.entries if a.id == advisory_id), None)

    def by_alias(self, alias: str) -> Advisory | None:
        return next((a for a in self.entries if alias in a.aliases), None)

    def affecting(self, installed: Mapping[str, str]) -> tuple[tuple[Advisory, str], ...]:
        """Each advisory that affects a version in ``installed`` (package -> version), with it,
        the most severe first (the file's order among equals)."""
        found = [
            (a, installed[a.package])
            for a in self.entries
            if a.package in installed and a.affects(installed[a.package])
        ]
        return tuple(sorted(found, key=lambda f: -SEVERITIES.index(f[0].severity)))

    def venv_requirements(self) -> tuple[str, ...]:
        """``pip==26.2.1``, ``setuptools==81.0.0``: what the templates install into every venv."""
        return tuple(f"{tool}=={self.venv_tools[tool]}" for tool in VENV_TOOLS)

    def extended(self, more: Advisories) -> Advisories:
        """These and a matrix's own (their IDs checked against these when they were read)."""
        return Advisories((*self.entries, *more.entries), self.venv_tools, self.checked_on)


def _text(path: PathKey, value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AdvisoryDataError(path, f"set {what} (text)")
    return value


def _version(path: PathKey, value: object) -> str:
    if not isinstance(value, str) or version_of(value) is None:
        raise AdvisoryDataError(
            path, f"{shown(str(value))} is not a PEP 440 version; write it quoted, like '2.6.0'"
        )
    return value


def _identifier(path: PathKey, value: object) -> str:
    problem = ADVISORY_ID.problem(value) if isinstance(value, str) else "is not text"
    if problem:
        raise AdvisoryDataError(path, problem)
    assert isinstance(value, str)
    return value


def _known_keys(path: PathKey, raw: Mapping[Any, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise AdvisoryDataError((*path, unknown[0]), f"unknown key; {what} has {', '.join(sorted(allowed))}")


# How a check names a problem at a key of the entry it checks (``_Entry.fail``).
Fail = Callable[..., AdvisoryDataError]


def _aliases(value: object, fail: Fail) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail("expected a list of advisory IDs", "aliases")
    for index, alias in enumerate(value):
        problem = ADVISORY_ID.problem(alias) if isinstance(alias, str) else "is not text"
        if problem:
            raise fail(problem, "aliases", index)
    return tuple(value)


def _one_of(value: object, allowed: tuple[str, ...], key: str, fail: Fail) -> Any:
    if value not in allowed:
        raise fail(f"{shown(str(value))} is not one of {', '.join(allowed)}", key)
    return value


def _fixed(value: object, affected: VersionRange, fail: Fail) -> str:
    """The first fixed version: above every affected one."""
    parsed = version_of(value) if isinstance(value, str) else None
    if parsed is None:
        raise fail(f"{shown(str(value))} is not a PEP 440 version; {_QUOTE_IT}", "fixed")
    if affected.contains(parsed):
        raise fail(f"{value} is inside the affected range {affected.text}", "fixed")
    if affected.lower is not None and parsed <= affected.lower:
        raise fail(f"{value} is older than the affected range {affected.text}", "fixed")
    return str(value)


def _summary(value: object, fail: Fail) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail("set a one-line summary", "summary")
    if printable(value) != value or len(value) > SUMMARY_CHARS:
        raise fail(f"must be one printable line of at most {SUMMARY_CHARS} characters", "summary")
    return value


def _entry(path: PathKey, raw: object) -> Advisory:
    if not isinstance(raw, Mapping):
        raise AdvisoryDataError(path, "expected a mapping (id, package, affected, fixed, severity, ...)")
    _known_keys(path, raw, _ENTRY_KEYS, "an entry")
    advisory_id = _identifier((*path, "id"), raw.get("id"))

    def fail(problem: str, *key: str | int) -> AdvisoryDataError:
        """The problem at ``key`` of this entry, naming the entry by its ID."""
        return AdvisoryDataError((*path, *key), problem, advisory_id)

    try:
        affected = parse_range(raw.get("affected"))
    except ValueError as exc:
        raise fail(str(exc), "affected") from None
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise fail("set a source note: where the facts were read", "source")
    return Advisory(
        id=advisory_id,
        aliases=_aliases(raw.get("aliases"), fail),
        package=_one_of(raw.get("package"), PACKAGES, "package", fail),
        affected=affected,
        fixed=_fixed(raw.get("fixed"), affected, fail),
        severity=_one_of(raw.get("severity"), SEVERITIES, "severity", fail),
        summary=_summary(raw.get("summary"), fail),
        source=source,
    )


def _venv_tools(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise AdvisoryDataError(("venv_tools",), "expected a mapping: pip, setuptools and a source note")
    _known_keys(("venv_tools",), raw, frozenset({*VENV_TOOLS, "source"}), "venv_tools")
    _text(("venv_tools", "source"), raw.get("source"), "a source note (why these versions)")
    return {tool: _version(("venv_tools", tool), raw.get(tool)) for tool in VENV_TOOLS}


def _entries(listed: object, known: Advisories | None) -> tuple[Advisory, ...]:
    """The ``advisories`` list, each ID and alias once (and new to ``known``)."""
    if not isinstance(listed, list):
        raise AdvisoryDataError(("advisories",), "expected a list of advisories")
    entries: list[Advisory] = []
    seen = {name: a.id for a in (known.entries if known else ()) for name in (a.id, *a.aliases)}
    for index, item in enumerate(listed):
        entry = _entry(("advisories", index), item)
        for name in (entry.id, *entry.aliases):
            if name in seen:
                twin = "imagekit's own " if known and known.get(seen[name]) else ""
                problem = f"{name} is listed twice (also {twin}{seen[name]})"
                raise AdvisoryDataError(("advisories", index), problem, entry.id)
            seen[name] = entry.id
        entries.append(entry)
    return tuple(entries)


# The advisories a venv tool may still carry, each listed as a finding of every cell, and why. Only
# this one: setuptools 82 removed pkg_resources, which torch's own C++ extension and inductor code
# in the older releases the matrix keeps import (torch 2.1.2's torch.compile failed in the image
# with setuptools 84), so setuptools stays at 81, whose one advisory (an sdist's MANIFEST.in
# exclusions on macOS file systems, medium) touches no image.
VENV_TOOL_TOLERATED = frozenset({"CVE-2026-59890"})


def _tools_unaffected(advisories: Advisories) -> None:
    """The venv tools' versions are fixed for every advisory but VENV_TOOL_TOLERATED: else the
    render pins an affected one."""
    for tool, version in advisories.venv_tools.items():
        found = advisories.affecting({tool: version})
        hit = next((a for a, _ in found if a.id not in VENV_TOOL_TOLERATED), None)
        if hit is not None:
            problem = f"{tool} {version} is affected by {hit.id}; pin {hit.fixed} or later"
            raise AdvisoryDataError(("venv_tools", tool), problem)


def parse_advisories(raw: object, *, shipped: bool, known: Advisories | None = None) -> Advisories:
    """The file's mapping as records. ``shipped``: imagekit's own file, which also names the venv
    tools and the date it was checked; otherwise a matrix's own file, whose IDs must be new to
    ``known``. AdvisoryDataError names the first problem."""
    if not isinstance(raw, Mapping):
        raise AdvisoryDataError((), "expected a mapping with an `advisories` list")
    allowed = {"advisories", "source"} | ({"checked_on", "venv_tools"} if shipped else set())
    _known_keys((), raw, frozenset(allowed), "this file")
    entries = _entries(raw.get("advisories"), known)
    if not shipped:
        return Advisories(entries, known.venv_tools if known else {})
    advisories = Advisories(entries, _venv_tools(raw.get("venv_tools")), str(raw.get("checked_on") or ""))
    _tools_unaffected(advisories)
    return advisories


@cache
def load_advisories() -> Advisories:
    """The packaged advisories (read once per process, when first asked for). A broken file
    raises AdvisoryDataError: a bug in imagekit's data, which its fast tests catch."""
    try:
        return parse_advisories(read_data(DATA_FILE), shipped=True)
    except AdvisoryDataError as exc:
        raise AdvisoryDataError(exc.path, f"imagekit/data/{DATA_FILE}: {exc}") from None


def read_advisory_file(path: Path, where: str, known: Advisories) -> Advisories:
    """A matrix's own advisories (``advisories.file``), besides ``known``: every problem is one
    InputError line naming the file's entry (``where``: the matrix key that names the file)."""
    try:
        raw = read_regular_file(path, MATRIX_BYTES, "an advisories file (a few kB)")
    except FileNotFoundError:
        raise InputError(f"{where}: {path}: no such file; fix the path or remove the key") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    doc: SourceDocument = parse_yaml(text, str(path))
    try:
        return parse_advisories(doc.value, shipped=False, known=known)
    except AdvisoryDataError as exc:
        raise InputError(f"{doc.where(exc.path)}: {exc}") from None
