"""Checked values: the types every string, number and list read from a file passes through.

The matrix schema (``imagekit.plan.schema``) and the readers of imagekit's own state files (the report,
``images.lock.json``, bake metadata) share them: a value that reaches a Dockerfile, a tag, a label,
a shell or a terminal is typed by what it is, bounded in length, printable ASCII and free of
credentials, whichever file it came from.

Each type is ``Annotated`` metadata that pydantic calls while it validates; ``problem()`` answers
the same question without pydantic. pydantic is imported only when a file is validated, so the
modules that merely hold records (``imagekit verify IMAGE`` imports the report's records) start
without it.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

from imagekit.core import naming
from imagekit.core.cdi import CDI_REQUEST_PATTERN
from imagekit.core.clock import time_problem
from imagekit.core.errors import InputError
from imagekit.core.limits import (
    GPUS_TEXT_CHARS,
    LOGIN_CHARS,
    MAX_ITEMS,
    NAME_CHARS,
    PATH_BYTES,
    PORT_MAX,
    SECRET_ID_CHARS,
    SHORT_CHARS,
    TEXT_CHARS,
    URL_CHARS,
)
from imagekit.core.text import SHOWN_CHARS, URL_WITH_USER, redact, shown

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

# Words that name a secret: in a build argument's name (the classic builder keeps build arguments
# in the image history) or a URL's query parameter.
SECRET_WORDS = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "KEY", "CREDENTIAL", "AUTH")

CREDENTIALS_FIX = (
    "imagekit never writes a credential into a Dockerfile, label, log or report (the classic builder"
    " keeps them in the image history): fill a wheelhouse on the host (`pip download`, then"
    " sources.pip.find_links) or give the build host credential-free access to the index (a"
    " read-only mirror allowed by IP, a local caching proxy); README: 'Private mirrors'"
)

_HOSTILE: tuple[tuple[str, str], ...] = (
    ("\n", "a newline"),
    ("\r", "a carriage return"),
    ("\t", "a tab"),
    (" ", "a space"),
    ('"', "a quote"),
    ("'", "a quote"),
    ("`", "a backtick"),
    ("$(", "'$('"),
    ("$", "'$'"),
    ("\\", "a backslash"),
)


def character_name(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: a character named so that an invisible one is seen."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'a control character')}"


def _credentials(value: str) -> str | None:
    if "://" not in value:
        return None
    if URL_WITH_USER.search(value):
        return f"{shown(value)} holds credentials (a login before the @ of a URL); {CREDENTIALS_FIX}"
    query = urlsplit(value).query if value[:1].isalpha() else ""
    for name, _ in parse_qsl(query, keep_blank_values=True):
        if any(word in name.upper() for word in SECRET_WORDS):
            return f"a URL's query parameter {name[:40]!r} looks like a credential; {CREDENTIALS_FIX}"
    return None


def _unsafe_character(value: str) -> str | None:
    for needle, name in _HOSTILE:
        if needle in value:
            return (
                f"{shown(value)} holds {name}; values that reach a Dockerfile, tag, label or shell"
                " command may not hold spaces, quotes, newlines, '$', backticks or backslashes"
            )
    for char in value:
        if not " " < char < "\x7f":
            return (
                f"{shown(value)} holds {character_name(char)}; values that reach a Dockerfile, tag,"
                " label or terminal are printable ASCII (an invisible or look-alike character"
                " would make them read as something they are not)"
            )
    return None


def port_problem(value: str) -> str | None:
    """A ``host:port``'s port past 65535 (the text pattern cannot say that)."""
    _, sep, port = value.rpartition(":")
    if sep and "/" not in port and port.isdigit() and int(port[:6]) > PORT_MAX:
        return f"{shown(value)}: port {port[:6]} is past {PORT_MAX}"
    return None


def host_port_problem(name: str) -> str | None:
    """``port_problem`` of the registry host that leads a repository name (``host:port/path``)."""
    return port_problem(name.split("/", 1)[0])


def _url_problem(value: str) -> str | None:
    try:
        port = urlsplit(value).port
    except ValueError:
        return f"{shown(value)} names no valid port (at most {PORT_MAX})"
    del port
    return None


def _raise(kind: str, detail: str) -> Any:
    from pydantic_core import PydanticCustomError

    raise PydanticCustomError(kind, "{detail}", {"detail": detail})


@dataclass(frozen=True)
class SafeString:
    """A string that is not empty, at most ``max_length`` long, free of credentials, printable
    ASCII without shell or Dockerfile syntax, and fully matched by ``regex`` (then ``extra``).

    The regex and the bound also land in the JSON Schema, so editors flag the same values.
    """

    regex: str
    what: str
    example: str
    # Versions may be written unquoted (imagekit's YAML reader keeps them as written), so the
    # JSON Schema must not make an editor flag `cuda: [11.8]`.
    numeric_ok: bool = False
    max_length: int = NAME_CHARS
    extra: Callable[[str], str | None] | None = None

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not one of these, or None."""
        if not value:
            return "must not be empty"
        found = _credentials(value) or _unsafe_character(value)
        if found:
            return found
        if len(value) > self.max_length:
            return f"is {len(value):,} characters long; {self.what} has at most {self.max_length:,}"
        if not re.fullmatch(self.regex, value):
            return f"{shown(value)} is not {self.what} (like {self.example!r})"
        return self.extra(value) if self.extra else None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        def check(value: str) -> str:
            found = self.problem(value)
            return _raise("unsafe_value", found) if found else value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = f"^{self.regex}$"
        json_schema["maxLength"] = self.max_length
        if self.numeric_ok:
            return {"anyOf": [json_schema, {"type": "number"}]}
        return json_schema


@dataclass(frozen=True)
class FreeText:
    """Text a person reads (an error, a log line, a check's detail), at most ``max_length`` long.

    It may hold anything else: it is escaped for whatever shows it (terminal, Markdown, HTML). A
    login in a URL is masked as it is read, so no view of an edited or merged report shows one.
    """

    max_length: int = TEXT_CHARS

    def problem(self, value: str) -> str | None:
        if len(value) > self.max_length:
            return f"is {len(value):,} characters long; at most {self.max_length:,}"
        return None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        def check(value: str) -> str:
            found = self.problem(value)
            return _raise("too_long", found) if found else redact(value)

        return core_schema.no_info_after_validator_function(check, handler(source))


@dataclass(frozen=True)
class Number:
    """An int (``integer``) or a finite float within [minimum, maximum]; a bool is neither."""

    minimum: float
    maximum: float
    integer: bool = False

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        if self.integer:
            return core_schema.int_schema(ge=int(self.minimum), le=int(self.maximum), strict=True)
        return core_schema.float_schema(ge=self.minimum, le=self.maximum, allow_inf_nan=False, strict=True)


_SIZE = re.compile(r"([0-9]{1,15})\s*(B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?")
_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class ByteSize:
    """A byte count within [1, ``maximum``], written as an integer or as ``8GiB``, ``500 MB``."""

    maximum: int

    def parse(self, value: Any) -> int:
        if type(value) is int:
            size = value
        elif isinstance(value, str) and (found := _SIZE.fullmatch(value.strip())):
            size = int(found[1]) * _UNITS[found[2] or "B"]
        else:
            return cast(int, _raise("byte_size", f"{shown(str(value))} is no size; write bytes or 8GiB"))
        if not 1 <= size <= self.maximum:
            return cast(int, _raise("byte_size", f"{size:,} bytes is not between 1 and {self.maximum:,}"))
        return size

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(self.parse)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": self.maximum},
                {"type": "string", "pattern": f"^{_SIZE.pattern}$"},
            ]
        }


@dataclass(frozen=True)
class Items:
    """At most ``limit`` items in a list, tuple or mapping."""

    limit: int = MAX_ITEMS

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        schema = handler(source)
        if schema.get("type") in ("list", "tuple", "dict"):
            # these schemas stop at the limit while they validate, before the items past it
            return {**schema, "max_length": self.limit}

        def check(value: Any) -> Any:
            if len(value) > self.limit:
                return _raise("too_long", f"holds {len(value):,} items; at most {self.limit:,}")
            return value

        return core_schema.no_info_after_validator_function(check, schema)


_FIGURE_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def _json_scalar(value: Any) -> Any:
    """A JSON scalar that every reader can show: a 64-bit integer (10**400 parses, then overflows
    a float where it is formatted), a finite float, a short string, a boolean or null."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            return _raise("too_large", "is an integer past 64 bits")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _raise("not_finite", "is not a finite number")
    if isinstance(value, str):
        if len(value) > SHORT_CHARS:
            return _raise("too_long", f"is {len(value):,} characters long; at most {SHORT_CHARS:,}")
        return value
    return _raise("not_scalar", f"is {type(value).__name__}; a number, a short string, true/false or null")


@dataclass(frozen=True)
class JsonScalars:
    """A mapping of figure names (letters, digits, '_', '.', '-') to JSON scalars (numbers, short
    strings, booleans, null)."""

    limit: int = MAX_ITEMS

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        scalar = core_schema.no_info_plain_validator_function(_json_scalar)
        return core_schema.dict_schema(
            # a key names a figure ("gemm_perf.tflops"): printed as it is, so plain names only
            keys_schema=core_schema.str_schema(strict=True, max_length=SHORT_CHARS, pattern=_FIGURE_KEY),
            values_schema=scalar,
            max_length=self.limit,
            strict=True,
        )


# -- the types ---------------------------------------------------------------------------------------

CellId = Annotated[
    str,
    SafeString(
        r"[A-Za-z0-9][A-Za-z0-9._-]*",
        "a cell id",
        "cuda-ubuntu22.04-torch2.1.2-cuda12.1-py3.10-devel",
        # it names a directory and files (<id>.verify.log): under a file name's 255 bytes; the
        # longest a matrix can make (bounded base name and versions) is about 220
        max_length=240,
    ),
]
IMAGE_DIGEST = SafeString(naming.DIGEST.pattern, "a digest", "sha256:<64 hex>", max_length=71)
ImageDigest = Annotated[str, IMAGE_DIGEST]
INPUT_DIGEST = SafeString(r"[0-9a-f]{64}", "an input digest", "<64 hex>", max_length=64)
InputDigest = Annotated[str, INPUT_DIGEST]
IMAGE_REFERENCE = SafeString(
    naming.REFERENCE.pattern,
    "an image reference",
    "ghcr.io/acme/pytorch:2.1.2",
    # a name (255) with its tag (128) and digest (71): what a report's tags and pins hold
    max_length=naming.MAX_REFERENCE + 1 + naming.MAX_TAG + 1 + 71,
    extra=lambda value: host_port_problem(naming.split_reference(value)[0]),
)
ImageReference = Annotated[str, IMAGE_REFERENCE]
# A label added with --label (it lands in the image config, through the API, not a Dockerfile).
LABEL_KEY = SafeString(r"[A-Za-z0-9][A-Za-z0-9._/-]*", "a label key", "org.example.team")
LABEL_VALUE = SafeString(r"[^\s]+", "a label value", "ml-platform", max_length=4_096)
# docker buildx bake's target names
BAKE_TARGET = SafeString(r"[A-Za-z0-9_-]+", "a bake target name", "cuda-torch2_1_2")
# What a verification ran on: a reference, an image id, or "-" when there was nothing to run.
VerifiedImage = Annotated[
    str,
    SafeString(
        r"-|" + naming.REFERENCE.pattern,
        "an image reference or id",
        "sha256:<64 hex>",
        max_length=naming.MAX_REFERENCE,
    ),
]
ImageTag = Annotated[
    str, SafeString(naming.TAG.pattern, "an image tag", "2.1.2-cuda12.1", max_length=naming.MAX_TAG)
]
# A registry host: DNS labels (each starts and ends with a letter or digit) joined by single dots,
# then an optional port; ".", "..", "-x", "a..b" name no host (and ".." in a URL path is a hop).
_HOST = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::[0-9]{1,5})?"
Registry = Annotated[str, SafeString(_HOST, "a registry host[:port]", "ghcr.io", extra=port_problem)]
RepositoryName = Annotated[
    str,
    SafeString(
        rf"(?:{_HOST}/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*",
        "a repository",
        "ghcr.io/acme/pytorch",
        max_length=naming.MAX_REFERENCE,
        extra=host_port_problem,
    ),
]
Timestamp = Annotated[
    str,
    SafeString(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})?",
        "an ISO 8601 time",
        "2026-11-30T12:00:00Z",
        max_length=40,
        # a recorded time (a verdict, a publication, a run's start) has happened: one bound for all
        extra=time_problem,
    ),
]
GpuText = Annotated[
    str,
    SafeString(
        rf"all|none|-1|[0-9]{{1,4}}|device=[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*|{CDI_REQUEST_PATTERN}",
        "a --gpus value",
        "all",
        max_length=GPUS_TEXT_CHARS,
    ),
]
# The check script inside an image: an absolute path; no component starts with '.' (so no '..').
SCRIPT_PATH = SafeString(
    r"(/[A-Za-z0-9_][A-Za-z0-9._-]*)+", "an absolute path in the image", "/opt/imagekit/check.py"
)
ScriptPath = Annotated[str, SCRIPT_PATH]
# What an image promises its check script (a version, a flavour, or an arch list "8.0;9.0+PTX": its
# ';' is safe, a Job's command is an argument list that no shell reads).
EXPECTATION = SafeString(
    r"[A-Za-z0-9][A-Za-z0-9._+;-]*", "a version, flavour or arch list", "2.1.2", max_length=64
)
Expectation = Annotated[str, EXPECTATION]
ExpectationName = Annotated[
    str, SafeString("|".join(naming.EXPECTED_LABELS), "an expectation", "torch", max_length=16)
]
FREE_SHORT = FreeText(SHORT_CHARS)
Text = Annotated[str, FreeText()]
ShortText = Annotated[str, FREE_SHORT]
PathText = Annotated[str, FreeText(PATH_BYTES)]  # a path imagekit wrote (a log, the matrix)
Seconds = Annotated[float, Number(0, 10**9)]
Count = Annotated[int, Number(0, 2**63 - 1, integer=True)]
Url = Annotated[
    str,
    SafeString(
        r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!%+,=-]+",
        "a URL",
        "https://host/x",
        max_length=URL_CHARS,
        extra=_url_problem,
    ),
]
UrlPattern = Annotated[
    str,
    SafeString(
        r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!%+,={}-]+",
        "a URL",
        "https://host/whl/{variant}",
        max_length=URL_CHARS,
        extra=lambda value: _url_problem(value.replace("{variant}", "variant")),
    ),
]


# -- reading a state file ----------------------------------------------------------------------------

# The records of imagekit's own files (report, lock, bake metadata) are stdlib dataclasses typed
# with the types above; pydantic validates them with this configuration (and strict=True: a string
# is never read as a number, nor 1 as true). Keys imagekit does not read (derived ones like the
# report's counts, or a newer version's) are ignored, never trusted.
RECORD_CONFIG: dict[str, Any] = {"extra": "ignore"}

T = TypeVar("T")


_ADAPTERS: dict[Any, Any] = {}


def _adapter(kind: Any) -> Any:
    """One pydantic TypeAdapter per record type and process (building one takes tens of ms)."""
    if kind not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def parse_json(raw: bytes | str) -> Any:
    """JSON text as Python values: strict JSON (no NaN or Infinity, no key given twice, where the
    last would silently win), nesting bounded (json.loads alone would recurse to RecursionError);
    ValueError when it is not such JSON."""
    from pydantic_core import from_json

    value = from_json(raw, allow_inf_nan=False)  # bounds the nesting before json.loads recurses
    json.loads(raw, object_pairs_hook=_refuse_repeated_keys)  # a check: it keeps no tree
    return value


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> None:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key {shown(key)} is given twice")
        seen.add(key)


def parse_json_object(
    raw: bytes, source: str, what: str, fix: str, version: int | None = None
) -> dict[str, Any]:
    """A state file's bytes as a JSON object (of ``version``, when given): the first look at a
    report, a lock or bake's metadata, before its records are counted and built. Each problem is
    one InputError: ``<source>: <problem>; <fix>``."""
    try:
        data = parse_json(raw)
    except ValueError as exc:
        raise InputError(f"{source}: not a readable {what} ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise InputError(
            f"{source}: (top level): a {what} is a JSON object, not {type(data).__name__}; {fix}"
        )
    if version is not None:
        found = data.get("version")
        if type(found) is not int or found != version:  # true and 1.0 equal 1 too
            raise InputError(f"{source}: {what} version {found!r:.40}; expected {version}; {fix}")
    return data


def validate_json(kind: type[T], raw: bytes | str, source: str, fix: str) -> T:
    """``raw`` JSON read as ``kind`` with every field checked by its type; the first wrong field
    is one InputError: ``<source>: <field path>: <problem>; <fix>``."""
    from pydantic import ValidationError

    try:
        return cast(T, _adapter(kind).validate_json(raw, strict=True))
    except ValidationError as exc:
        raise InputError(f"{source}: {describe_validation(exc)}; {fix}") from None


def describe_error(error: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """(field path, problem) of one pydantic error, the bad value repeated through ``shown``.

    pydantic marks a failing mapping key with a "[key]" step; the path names the key itself."""
    loc = tuple(part for part in error["loc"] if part != "[key]")
    ctx = error.get("ctx") or {}
    message = str(ctx.get("detail") or error["msg"])
    value = error.get("input")
    if error["type"] == "missing":
        message = "is required"
    elif not ctx.get("detail") and not isinstance(value, dict | list):
        message += f" (got {shown(value) if isinstance(value, str) else repr(value)[:SHOWN_CHARS]})"
    return loc, message


def more_problems(count: int) -> str:
    """The tail of a line that names the first of ``count`` problems."""
    return f" (and {count - 1} more problem{'s' if count > 2 else ''})" if count > 1 else ""


def describe_validation(exc: Any) -> str:
    """``<field path>: <problem>`` of the first error of a pydantic ValidationError."""
    from imagekit.core.yamlsource import format_path

    errors = exc.errors(include_url=False)
    loc, message = describe_error(errors[0])
    return f"{format_path(loc)}: {message}{more_problems(len(errors))}"


# -- build secrets ---------------------------------------------------------------------------------
# A matrix names a secret, never holds one: the value reaches the build from the environment or a
# file at build time (BuildKit's `--secret`), and so stays out of the matrix, the Dockerfile, the
# input digest and the image.

SECRET_ENV_PREFIX = "IMAGEKIT_SECRET_"
SECRET_ID = SafeString(
    rf"[a-z][a-z0-9-]{{0,{SECRET_ID_CHARS - 1}}}",
    "a secret's id (a name: its value comes at build time)",
    "pip-index",
    max_length=SECRET_ID_CHARS,
)
# What netrc and pip's authentication read as one token: no space, quote, '#', ':' or '/'.
LOGIN = SafeString(r"[A-Za-z0-9._@+-]+", "a login (user name)", "ci-reader", max_length=LOGIN_CHARS)


def secret_env_name(secret_id: str) -> str:
    """The environment variable that gives secret ``secret_id`` its value at build time:
    ``pip-index`` -> ``IMAGEKIT_SECRET_PIP_INDEX``."""
    return SECRET_ENV_PREFIX + secret_id.upper().replace("-", "_")
