"""The schema of ``matrix.yaml``: pydantic models, their JSON Schema, and one-line errors.

Every string that can reach a Dockerfile, an image tag, a label or a shell command is checked
here, once, by a type that says what it is (``TorchVersion``, ``Requirement``, ``SafeText``...).
The renderer can then trust its input; a hostile value never gets as far as a template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from imagekit.core import naming
from imagekit.core.build_kinds import BuilderKind, Compression, default_compression
from imagekit.core.errors import InputError
from imagekit.core.limits import (
    DEFAULT_MAX_LAYER_BYTES,
    LAYER_BYTES_MAX,
)
from imagekit.core.safetypes import (
    LOGIN,
    SECRET_ID,
    ByteSize,
    Registry,
    Url,
    UrlPattern,
    describe_error,
    more_problems,
)
from imagekit.core.text import shown
from imagekit.core.yamlsource import SourceDocument, format_path
from imagekit.facts.advisories import AdvisoryId, Severity
from imagekit.plan.schema_values import (
    AptPackage,
    BuildArgName,
    CudaFullVersion,
    CudaVersion,
    Flavour,
    Frontend,
    Host,
    ImageEnvName,
    ImagePattern,
    ImagePrefix,
    Name,
    OsName,
    PackageVersion,
    PlatformName,
    PublishPolicy,
    PythonVersion,
    RelativePath,
    Repository,
    Requirement,
    SafeText,
    StrictModel,
    TagPattern,
    TorchVersion,
    WaiverReason,
    non_empty_unique,
    unique,
)


class CellSpec(StrictModel):
    """The keys of one matrix cell: the axes, plus per-cell settings (``include`` adds these)."""

    torch: TorchVersion | None = Field(None, description="torch release: 2.1.2, or 2.1 for its latest patch")
    cuda: CudaVersion | None = Field(None, description="CUDA minor (12.1), or cpu")
    base: Name | None = Field(None, description="a key of `bases`")
    flavour: Flavour | None = Field(None, description="devel (with nvcc) or runtime")
    frontend: Frontend | None = Field(
        None, description="none, or a jupyter / ssh image built FROM the cell's image"
    )
    platform: PlatformName | None = Field(
        None, description="linux/amd64 (the default) or linux/arm64 (Grace: GH200, GB200)"
    )
    python: PythonVersion | None = Field(None, description="Python minor installed where the base lacks one")
    torchvision: PackageVersion | None = Field(
        None, description="override the paired version; 'none' skips it"
    )
    torchaudio: PackageVersion | None = Field(
        None, description="override the paired version; 'none' skips it"
    )
    cuda_full: CudaFullVersion | None = Field(
        None, description="nvidia/cuda tag version for a CUDA minor imagekit does not know"
    )
    pip_packages: list[Requirement] | None = Field(
        None, description="extra pip requirements, installed with torch pinned"
    )
    apt_packages: list[AptPackage] | None = Field(None, description="extra OS packages")
    env: dict[ImageEnvName, SafeText] | None = Field(
        None, description="environment variables set in the image (never a secret: see README)"
    )
    build_args: dict[BuildArgName, SafeText] | None = Field(
        None, description="docker build arguments (declared as ARG)"
    )
    allow_unknown: bool | None = Field(
        None, description="admit versions newer than imagekit's compatibility table"
    )

    def set_keys(self) -> dict[str, Any]:
        """The keys this entry actually sets (``include``/``exclude`` semantics need that)."""
        return {key: getattr(self, key) for key in self.model_fields_set if getattr(self, key) is not None}


AXIS_KEYS: tuple[str, ...] = ("torch", "cuda", "base", "flavour", "python", "frontend", "platform")


def _axis(description: str) -> Any:
    return Field(None, description=description, json_schema_extra={"minItems": 1, "uniqueItems": True})


class Axes(StrictModel):
    """The values crossed into cells. Each axis is optional; ``torch`` and ``base`` usually exist."""

    torch: list[TorchVersion] | None = _axis("torch releases")
    cuda: list[CudaVersion] | None = _axis("CUDA minors (or cpu)")
    base: list[Name] | None = _axis("keys of `bases`")
    flavour: list[Flavour] | None = _axis("devel and/or runtime")
    python: list[PythonVersion] | None = _axis("Python minors")
    frontend: list[Frontend] | None = _axis("none, jupyter and/or ssh")
    platform: list[PlatformName] | None = _axis(
        "linux/amd64 and/or linux/arm64; the platforms of one cell publish one image index"
    )

    @field_validator("*")
    @classmethod
    def _check_axis(cls, value: list[Any] | None) -> list[Any] | None:
        return None if value is None else non_empty_unique(value)

    def as_dict(self) -> dict[str, list[Any]]:
        return {key: getattr(self, key) for key in AXIS_KEYS if getattr(self, key) is not None}


class LocalBuild(StrictModel):
    """A base built from a Dockerfile context next to the matrix (air-gapped sites, tests)."""

    context: RelativePath = Field(description="directory, relative to the matrix file")
    dockerfile: RelativePath = Field("Dockerfile", description="relative to the context")
    args: dict[BuildArgName, SafeText] = Field(default_factory=dict)


class BaseSpec(StrictModel):
    """A base image: a pattern crossed with the axes, a fixed stack (NGC), or a local build."""

    image: ImagePattern | None = Field(
        None,
        description="image reference; may use {cuda}, {cuda_full}, {cudnn}, {cudnn_tag},"
        " {flavour}, {os}, {python}, {arch} (amd64, arm64: a locally built or imported base holds"
        " one platform per tag)",
    )
    stack: Name | None = Field(None, description="a fixed stack from imagekit's data (ngc-pytorch-23.10)")
    os: OsName | None = Field(None, description="the base's OS, e.g. ubuntu22.04 (from the stack if set)")
    python: PythonVersion | None = Field(None, description="the Python the base brings, if any")
    cuda: bool | None = Field(
        None, description="whether the base carries CUDA (default: image uses {cuda...})"
    )
    nvcc: Literal["base", "wheels"] = Field(
        "base",
        description="a devel cell's nvcc: the base's toolkit, or NVIDIA's compiler wheels resolved with"
        " torch's own CUDA pins (each CUDA library once; CUDA 13+; on a -base or plain image)",
    )
    build: LocalBuild | None = None
    flavours: list[Flavour] | None = Field(None, description="flavours this base serves")
    tag: TagPattern | None = Field(None, description="readable tag pattern for this base's cells")

    @model_validator(mode="after")
    def _image_or_stack(self) -> BaseSpec:
        if self.image is None and self.stack is None:
            raise PydanticCustomError(
                "missing_image", "{detail}", {"detail": "set `image` (or `stack` for a fixed stack)"}
            )
        if self.stack is None and self.os is None:
            raise PydanticCustomError(
                "missing_os", "{detail}", {"detail": "set `os` (e.g. ubuntu22.04, debian12)"}
            )
        return self


SecretId = Annotated[str, SECRET_ID]
Login = Annotated[str, LOGIN]


class PipCredential(StrictModel):
    """A login for one index host; the password is a build secret, named here, never written."""

    host: Host = Field(description="the index host, as in its URL; its login goes to every port (netrc)")
    login: Login = Field(description="the user name pip sends to that host")
    secret: SecretId = Field(
        description="the id of the password, never the value: it comes at build time from the"
        " environment variable IMAGEKIT_SECRET_<ID upper-cased, '-' as '_'> or `imagekit build --secret"
        " ID=FILE`, through a BuildKit secret (never a layer); needs build.builder: buildkit"
    )


class PipSources(StrictModel):
    torch_index_url: UrlPattern | None = Field(
        "https://download.pytorch.org/whl/{variant}",
        description="index for torch/torchvision/torchaudio; {variant} becomes cu121, cpu, ...",
    )
    index_url: Url | None = Field(None, description="index for everything else (default: PyPI)")
    extra_index_urls: list[Url] = Field(default_factory=list)
    find_links: list[RelativePath] = Field(
        default_factory=list,
        description="wheelhouse directories relative to the matrix file, copied into the build",
    )
    no_index: bool = Field(False, description="install only from find_links (air-gapped)")
    trusted_hosts: list[Host] = Field(default_factory=list)
    credentials: list[PipCredential] = Field(
        default_factory=list, description="index logins, one per host (BuildKit builder only)"
    )

    @field_validator("extra_index_urls", "find_links", "trusted_hosts")
    @classmethod
    def _unique_list(cls, value: list[str]) -> list[str]:
        return unique(value)

    @field_validator("credentials")
    @classmethod
    def _one_login_per_host(cls, value: list[PipCredential]) -> list[PipCredential]:
        # one login per host name, whatever the port: the netrc pip reads keys on the name alone
        unique([credential.host.partition(":")[0] for credential in value])
        return value

    @field_validator("torch_index_url")
    @classmethod
    def _only_variant(cls, value: str | None) -> str | None:
        if value is not None and set(re.findall(r"\{([^{}]*)\}", value)) - {"variant"}:
            raise PydanticCustomError(
                "bad_placeholder",
                "{detail}",
                {"detail": f"{shown(value)} may use only the {{variant}} placeholder"},
            )
        return value

    @model_validator(mode="after")
    def _no_index_needs_a_wheelhouse(self) -> PipSources:
        if self.no_index and not self.find_links:
            raise PydanticCustomError(
                "no_wheelhouse",
                "{detail}",
                {"detail": "no_index: true installs only from find_links; list a wheelhouse directory"},
            )
        return self


class AptSources(StrictModel):
    mirror: Url | None = Field(None, description="replaces the OS's archive URLs during the build")


class Sources(StrictModel):
    pip: PipSources = PipSources()
    apt: AptSources = AptSources()


class TagScheme(StrictModel):
    readable: TagPattern = Field(
        "{torch}-{stack}-{flavour}-{os}",
        description="moving tag that says what is inside: {torch} {cuda} {cudnn} {stack} {flavour}"
        " {os} {python} {base}",
    )
    immutable: list[TagPattern] = Field(
        default_factory=lambda: ["{readable}-{date}", "{readable}-{digest}"],
        description="tags that never move: {date} (UTC, YYYYMMDD), {digest} (input digest, 12 hex)",
    )


class Staging(StrictModel):
    """Where `imagekit build --push` stages images before they are verified and promoted."""

    repository: Repository = Field(
        description="repository in the same registry for staging tags (staging-<input digest, 12 hex>)"
    )


class Publish(StrictModel):
    registry: Registry | None = Field(None, description="registry host[:port]; none = local names")
    repository: Repository = "imagekit/pytorch"
    staging: Staging | None = Field(
        None, description="where build --push stages images (default: `repository` itself)"
    )
    policy: PublishPolicy = "gpu-validated"
    signing: Literal["optional", "required"] = Field(
        "optional",
        description="required: publish refuses to run without a signing key (--signing-key or"
        " IMAGEKIT_SIGNING_KEY), so every published digest carries signed attestations",
    )
    tags: TagScheme = TagScheme()
    partial_index: bool = Field(
        False,
        description="publish a cell's image index from its validated platforms when another of its"
        " platforms is not validated (the lock and report list the missing ones); default: only"
        " when every platform is validated",
    )
    max_layer_size: Annotated[int, ByteSize(LAYER_BYTES_MAX)] = Field(
        DEFAULT_MAX_LAYER_BYTES,
        description="publish refuses a cell with a layer larger than this (bytes, or 8GiB, 500MB)",
    )

    @property
    def staging_repository(self) -> str:
        """The repository (without the registry) that holds staging tags."""
        return self.staging.repository if self.staging is not None else self.repository

    @property
    def tagging(self) -> naming.Tagging:
        """How this matrix names its cells' images: the one owner of a cell's tags."""
        return naming.Tagging(naming.repository(self.registry, self.repository), tuple(self.tags.immutable))


class Frontends(StrictModel):
    """What the front-end images install (exact versions: an image says what it holds)."""

    jupyterlab: PackageVersion = Field("4.6.6", description="JupyterLab, in the cell's environment")
    dumb_init: PackageVersion = Field("1.2.5.post1", description="the init that runs as PID 1")


class BuildSettings(StrictModel):
    """How the images are built; `imagekit build --builder`/`--compression` override these."""

    builder: BuilderKind = Field(
        "classic",
        description="classic (docker-py) or buildkit (`docker buildx build`: cache and secret mounts)",
    )
    compression: Compression | None = Field(
        None,
        description="layer compression of the staged images: default zstd with buildkit (Docker Engine"
        " >= 23, containerd >= 1.5, CRI-O and podman pull it), gzip with classic; gzip for an older"
        " consumer (zstd: buildkit only)",
    )

    @property
    def layer_compression(self) -> Compression:
        """The compression the images get: the matrix's, else the builder's default."""
        return self.compression or default_compression(self.builder)

    @property
    def on_buildkit(self) -> bool:
        """Whether the builder runs on BuildKit: its Dockerfiles take RUN --network/--mount (cache,
        secret and bind mounts), it takes index credentials and zstd. Every builder but the
        engine's classic one does, so a new one (a remote BuildKit) is rendered as ``buildkit``."""
        return self.builder != "classic"


class Waiver(StrictModel):
    """One advisory waived, with the reason, for the cells its keys select: each key a list of
    values; a key left out selects every value (``torch`` left out: every affected torch)."""

    id: AdvisoryId = Field(description="the advisory's ID as `imagekit plan` names it (CVE-2025-32434)")
    reason: WaiverReason = Field(
        description="why the cells are built anyway: the report, the lock, the job summary and the"
        " signed statement carry it"
    )
    torch: list[TorchVersion] | None = Field(None, description="torch versions (2.5.1, or 2.5: its latest)")
    cuda: list[CudaVersion] | None = Field(None, description="CUDA minors (or cpu)")
    base: list[Name] | None = Field(None, description="keys of `bases`")
    flavour: list[Flavour] | None = Field(None, description="devel and/or runtime")
    platform: list[PlatformName] | None = Field(None, description="linux/amd64 and/or linux/arm64")

    @field_validator("torch", "cuda", "base", "flavour", "platform")
    @classmethod
    def _check_selection(cls, value: list[Any] | None) -> list[Any] | None:
        return None if value is None else non_empty_unique(value)


class ScanSettings(StrictModel):
    """The vulnerability gate of `imagekit publish`: a scanner's findings (Trivy's or Grype's JSON,
    `--scan FILE`) for each staged digest, refused at or above the threshold unless waived."""

    required: bool = Field(
        False,
        description="refuse a cell that has no scanner findings for its staged digest (no --scan file"
        " names it); false: such a cell is published with a note",
    )
    threshold: Severity | None = Field(
        None,
        description="refuse a cell with an unwaived finding this severe or worse; default: the"
        " advisories' threshold. `imagekit publish --scan-threshold` overrides it",
    )


class AdvisorySettings(StrictModel):
    """Security advisories (imagekit/data/advisories.yaml): a cell that installs an affected torch,
    pip or setuptools at or above the threshold is refused unless waived; others are listed."""

    threshold: Severity = Field(
        "critical",
        description="refuse cells with an unwaived advisory this severe or worse (critical, high,"
        " medium, low); milder findings are listed in the plan and the report",
    )
    file: RelativePath | None = Field(
        None,
        description="more advisories (the site's own), in imagekit/data/advisories.yaml's format,"
        " relative to the matrix file",
    )
    waive: list[Waiver] = Field(
        default_factory=list,
        description="advisories waived for some cells (a scanner's findings of the same ID too)",
    )
    scan: ScanSettings = Field(default_factory=ScanSettings, description="the vulnerability gate of publish")


class Matrix(StrictModel):
    """A build matrix: axes crossed into cells, GitHub-Actions-style include/exclude."""

    version: int = Field(1, ge=1, le=1, description="schema version (1)")
    axes: Axes
    include: list[CellSpec] = Field(default_factory=list, description="add or extend combinations")
    exclude: list[CellSpec] = Field(default_factory=list, description="remove matching combinations")
    defaults: CellSpec = Field(default_factory=CellSpec, description="settings of every cell")
    bases: dict[Name, BaseSpec]
    sources: Sources = Sources()
    publish: Publish = Publish()
    frontends: Frontends = Frontends()
    build: BuildSettings = BuildSettings()
    advisories: AdvisorySettings = AdvisorySettings()
    mirrors: dict[ImagePrefix, ImagePrefix] = Field(
        default_factory=dict,
        description="base image prefix -> replacement used when pulling and building, for"
        " air-gapped sites and deleted upstream tags (nvidia/cuda -> 127.0.0.1:5000/mirror/nvidia-cuda)",
    )
    allow_unknown: bool = Field(False, description="admit versions newer than the compatibility table")
    require_base_pins: bool = Field(
        False,
        description="refuse to plan without the lock of base digests beside the matrix"
        " (<matrix>.bases.lock.json, written by `imagekit pin-bases`); with the lock, bases are pinned"
        " whether this is set or not",
    )
    output: RelativePath = Field(
        "dockerfiles/generated", description="where `render` writes, relative to the matrix file"
    )
    templates: RelativePath | None = Field(
        None, description="template directory relative to the matrix file (default: imagekit's)"
    )

    @field_validator("version", mode="before")
    @classmethod
    def _version_is_a_number(cls, value: Any) -> Any:
        # `true` would pass as 1 (a bool is an int in Python): the version is a number, written so.
        if isinstance(value, bool):
            raise PydanticCustomError("bad_version", "{detail}", {"detail": "must be 1, not a boolean"})
        return value

    @field_validator("bases")
    @classmethod
    def _some_bases(cls, value: dict[str, BaseSpec]) -> dict[str, BaseSpec]:
        if not value:
            raise PydanticCustomError("empty_bases", "{detail}", {"detail": "define at least one base"})
        return value


def json_schema() -> dict[str, Any]:
    schema = Matrix.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "imagekit matrix"
    return schema


def _error_line(doc: SourceDocument, error: Mapping[str, Any]) -> str:
    loc, message = describe_error(error)
    if error["type"] == "unknown_key":
        loc = (*loc, str((error.get("ctx") or {})["key"]))
    elif loc == ("version",) and error["type"] not in ("bad_version", "missing"):
        message = "must be 1 (the only schema version)"
    return f"{doc.where(loc)}: {format_path(loc)}: {message}"


def validate_matrix(doc: SourceDocument) -> Matrix:
    """Validate a parsed document; the first problem becomes one InputError line."""
    try:
        return Matrix.model_validate(doc.value)
    except ValidationError as exc:
        errors = exc.errors()
        raise InputError(_error_line(doc, errors[0]) + more_problems(len(errors))) from None
