"""The verification record: what an image's checks said (each check, the GEMM figures and GPU
telemetry, what the image holds) and the one rule deriving a verdict from them; and the figures of
a record (``gemm_figures``): the timed GEMM's TFLOP/s and per GPU telemetry, read from what the
check printed.

``imagekit.verify.harness`` runs the checks and makes these records; ``imagekit.report.store`` keeps
them in the report, each field checked when read. Text from an image is clipped and its logins
masked. The timed GEMM's detail is whatever the image printed: every value is checked (a finite
number within FIGURE_BOUND, a string cut short) before it becomes a typed record, so a report
written from any output is one imagekit reads back. The figures of an emulated run are QEMU's:
marked emulated (``gemm_perf.emulated``) and held without floors or a status against them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from imagekit.core import naming
from imagekit.core.limits import MAX_GPUS, MAX_ITEMS, SHORT_CHARS, TEXT_CHARS
from imagekit.core.safetypes import (
    RECORD_CONFIG,
    CellId,
    Count,
    GpuText,
    ImageDigest,
    InputDigest,
    Items,
    JsonScalars,
    Number,
    PathText,
    SafeString,
    Seconds,
    ShortText,
    Text,
    Timestamp,
    VerifiedImage,
    validate_json,
)
from imagekit.core.text import redact
from imagekit.facts.emulation import Placement, uname, where_it_ran
from imagekit.probe import protocol
from imagekit.probe.protocol import FAIL, GEMM_PERF, PASS, SKIP, Status
from imagekit.report.sonames import Duplicates

Verdict = Literal["validated", "checked", "failed"]
# The GPU checks a validated verdict needs, each present and passed.
GPU_CHECKS = protocol.VALIDATING_GPU_CHECKS
FIGURE_BOUND = 1e12
Figure = Annotated[float, Number(-FIGURE_BOUND, FIGURE_BOUND)]  # a measured value, finite and bounded


def clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 14] + " ... (clipped)"


def _seconds(value: object) -> float:
    """A duration the check script reported, as a number the report can hold (else 0)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 10**9:
        return float(value)
    return 0.0


def json_or_text(text: str | None) -> Any:
    """A check's ``actual`` or ``detail`` as the probe wrote it: JSON when it parses, else the text."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class CheckRecord:
    __pydantic_config__ = RECORD_CONFIG

    name: ShortText
    status: ShortText  # pass | fail | skip; any other word counts as a failure
    required: bool
    reason: Text | None = None
    expected: Text | None = None
    actual: Text | None = None
    detail: Text | None = None
    cause: Text | None = None
    fix: Text | None = None
    duration_s: Seconds = 0.0

    @classmethod
    def from_script(cls, raw: Mapping[str, Any]) -> CheckRecord:
        """A check as the in-image script reported it. The image may print anything: each value
        is cut to what a report holds, so the report written is always one imagekit can read."""

        def text(key: str) -> str | None:
            value = raw.get(key)
            if value is None:
                return None
            return clipped(value if isinstance(value, str) else json.dumps(value, sort_keys=True), TEXT_CHARS)

        return cls(
            name=clipped(str(raw.get("name", "?")), SHORT_CHARS),
            status=clipped(str(raw.get("status", FAIL)), SHORT_CHARS),
            required=bool(raw.get("required", True)),
            reason=text("reason"),
            expected=text("expected"),
            actual=text("actual"),
            detail=text("detail"),
            cause=text("cause"),
            fix=text("fix"),
            duration_s=_seconds(raw.get("duration_s")),
        )


@dataclass(frozen=True)
class Span:
    """A telemetry figure sampled while the timed GEMM ran."""

    __pydantic_config__ = RECORD_CONFIG

    min: Figure | None = None
    max: Figure | None = None
    mean: Figure | None = None


@dataclass(frozen=True)
class GpuFigures:
    """One GPU of the timed GEMM: its TFLOP/s against its floor and what the GPU did meanwhile,
    so a low figure can be told apart from a throttled device."""

    __pydantic_config__ = RECORD_CONFIG

    index: Count | None = None
    device: ShortText | None = None
    tflops: Figure | None = None
    floor_tflops: Figure | None = None
    status: ShortText | None = None
    sm_clock_mhz: Span | None = None
    power_w: Span | None = None
    temperature_c: Span | None = None
    utilization_pct: Span | None = None
    memory_used_mib: Span | None = None
    # throttle reason -> samples it was active in; throttled_samples: samples any limited the clock
    throttle: Annotated[Mapping[ShortText, Count], Items(MAX_ITEMS)] = field(default_factory=dict)
    throttled_samples: Count | None = None


def _short(value: object) -> str:
    return clipped(redact(str(value)), SHORT_CHARS)


@dataclass(frozen=True)
class Package:
    """One installed package an image's inventory names (a Python distribution, a Debian package)."""

    __pydantic_config__ = RECORD_CONFIG

    name: ShortText
    version: ShortText
    arch: ShortText | None = None


@dataclass(frozen=True)
class Inventory:
    """What the probe read inside the image while it was verified: the SBOM's source. Each list
    holds at most ``MAX_ITEMS`` (``clipped`` says when the image held more)."""

    __pydantic_config__ = RECORD_CONFIG

    python: ShortText | None = None
    os_release: Annotated[Mapping[ShortText, ShortText], Items(MAX_ITEMS)] = field(default_factory=dict)
    python_packages: Annotated[tuple[Package, ...], Items(MAX_ITEMS)] = ()
    os_packages: Annotated[tuple[Package, ...], Items(MAX_ITEMS)] | None = None  # None: no dpkg
    # cudnn, nccl, cuda_runtime -> the version the loaded torch reported
    cuda_libraries: Annotated[Mapping[ShortText, ShortText], Items(MAX_ITEMS)] = field(default_factory=dict)
    loaded_libraries: Annotated[tuple[ShortText, ...], Items(MAX_ITEMS)] = ()  # CUDA .so files mapped
    probe_schema: Count | None = None
    probe_sha256: ImageDigest | None = None  # the zipapp's sha256: the probe's sources exactly
    clipped: bool = False
    # The sonames the image holds twice (libraries_once); None: not scanned, or an earlier probe.
    duplicates: Duplicates | None = None

    @classmethod
    def from_script(cls, raw: object) -> Inventory | None:
        """The probe's ``inventory`` as the image printed it: anything odd is left out, never
        a reason to lose the verification."""
        if not isinstance(raw, Mapping):
            return None

        def packages(value: object) -> tuple[Package, ...]:
            items = [p for p in (value if isinstance(value, list) else []) if isinstance(p, Mapping)]
            return tuple(
                Package(
                    _short(p.get("name")),
                    _short(p.get("version", "")),
                    _short(p["arch"]) if p.get("arch") else None,
                )
                for p in items[:MAX_ITEMS]
                if p.get("name")
            )

        def pairs(value: object) -> dict[str, str]:
            found = value if isinstance(value, Mapping) else {}
            return {
                _short(k): _short(v) for k, v in list(found.items())[:MAX_ITEMS] if isinstance(v, str | int)
            }

        found = raw.get("probe")
        probe: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        schema = probe.get("schema")
        sha = probe.get("sha256")
        loaded = raw.get("loaded_libraries")
        listed = [raw.get("packages"), raw.get("os_packages"), loaded]
        return cls(
            python=_short(raw["python"]) if isinstance(raw.get("python"), str) else None,
            os_release=pairs(raw.get("os_release")),
            python_packages=packages(raw.get("packages")),
            os_packages=packages(raw.get("os_packages"))
            if isinstance(raw.get("os_packages"), list)
            else None,
            cuda_libraries=pairs(raw.get("cuda_libraries")),
            loaded_libraries=tuple(
                _short(p) for p in (loaded if isinstance(loaded, list) else [])[:MAX_ITEMS]
            ),
            probe_schema=schema if type(schema) is int and 0 <= schema < 2**31 else None,
            probe_sha256=sha if isinstance(sha, str) and naming.DIGEST.fullmatch(sha) else None,
            clipped=bool(raw.get("problems"))
            or any(isinstance(x, list) and len(x) > MAX_ITEMS for x in listed),
            duplicates=Duplicates.from_script(raw.get("duplicate_libraries")),
        )


@dataclass(frozen=True)
class RunPlatform:
    """Where the checks ran (the probe's ``platform``, the host's knowledge added): the machine inside
    the container, the engine host's, and whether the run was emulated (QEMU user emulation)."""

    __pydantic_config__ = RECORD_CONFIG

    machine: ShortText | None = None  # platform.machine() inside the container, as the probe said
    host_machine: ShortText | None = None  # the engine's Architecture (docker info)
    emulated: bool = False

    @property
    def is_emulated(self) -> bool:
        """Emulated as recorded, or by its own machines (a record saying a native aarch64 run on an
        x86_64 host contradicts itself: it counts as emulated)."""
        if self.emulated:
            return True
        if not self.machine or not self.host_machine:
            return False
        return uname(self.machine) != uname(self.host_machine)

    @property
    def text(self) -> str:
        """``aarch64 (emulated on x86_64)``, ``x86_64``: what a report shows."""
        return where_it_ran(self.machine, self.host_machine, self.is_emulated)

    @classmethod
    def of_run(cls, found: object, placed: Placement) -> RunPlatform:
        """Where a check container ran: the probe's word for its machine (``found``, the document's
        ``platform`` as the image printed it; the image config's machine when it said none), the
        engine's machine (the host's knowledge, not the image's word), and emulated when either the
        host or the probe says so."""
        raw: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        machine = raw.get("machine")
        return cls(
            machine=_short(machine) if isinstance(machine, str) and machine else placed.machine,
            host_machine=_short(placed.host_machine) if placed.host_machine else None,
            emulated=placed.emulated or raw.get("emulated") is True,
        )


def derive_verdict(
    checks: Sequence[CheckRecord],
    gpu_requested: bool,
    gpu_visible: bool,
    error: str | None = None,
    emulated: bool = False,
) -> Verdict:
    """The verdict that a verification's own content supports: the one rule, applied when the
    image's checks come back and again to every record read (a report may have been edited, or come
    from another machine: its ``verdict`` field is never trusted on its own).

    ``validated`` only when the run itself succeeded, not every check was skipped, every required
    check passed, and a GPU was asked for, visible, and proved by each of ``GPU_CHECKS``; without a
    GPU asked for, at most ``checked``. Any status other than pass or skip counts as a failure.
    An emulated run is never ``validated``: an emulated process cannot use a GPU, so one asked for
    is ``failed`` whatever its checks say.
    """
    if error is not None or not checks or all(c.status == SKIP for c in checks):
        return "failed"
    if any(c.status not in (PASS, SKIP) and c.required for c in checks):
        return "failed"
    if not gpu_requested:
        return "checked"
    if emulated:
        return "failed"
    status = {c.name: c.status for c in checks}
    if gpu_visible and all(status.get(name) == PASS for name in GPU_CHECKS):
        return "validated"
    # Asked for a GPU, and none visible or its checks absent or skipped: nothing proved the GPU works.
    return "failed"


@dataclass(frozen=True)
class Verification:
    __pydantic_config__ = RECORD_CONFIG

    target: CellId
    image: VerifiedImage
    gpus: GpuText
    verdict: Verdict
    gpu_requested: bool
    gpu_visible: bool
    checks: Annotated[tuple[CheckRecord, ...], Items(MAX_ITEMS)]
    duration_s: Seconds
    error: Text | None = None  # one line: why the run itself failed (timeout, no JSON, ...)
    exit_code: Annotated[int, Number(-(2**31), 2**32, integer=True)] | None = None
    log: PathText | None = None
    metrics: Annotated[Mapping[str, Any], JsonScalars()] = field(default_factory=dict)  # the timed GEMM's
    gpu_figures: Annotated[tuple[GpuFigures, ...], Items(MAX_GPUS)] = ()  # per GPU: figure and telemetry
    finished_at: Timestamp | None = None  # ISO 8601 UTC; when the verdict was reached
    # The manifest digest of the image the checks ran on, when it came from a registry (verify
    # --pull runs the staged repo@digest; otherwise the engine's RepoDigests name it, if at all).
    image_digest: ImageDigest | None = None
    # What the image holds, as the probe read it (its SBOM); None from an earlier release's probe.
    inventory: Inventory | None = None
    # Where it ran: the CI runner (RUNNER_NAME, CI_RUNNER_DESCRIPTION) or the host's name.
    runner: ShortText | None = None
    # The machine it ran on and whether emulated; None from an earlier release (a native run).
    platform: RunPlatform | None = None
    # The GPUs its check containers were given (nvidia-smi indexes; empty when none or not known),
    # and GPU-seconds: each container's time from creation to removal times the GPUs it held.
    # None: `--gpus all` on a runner whose GPUs could not be counted, or a record of an earlier release.
    devices: Annotated[tuple[ShortText, ...], Items(MAX_GPUS)] = ()
    gpu_seconds: Seconds | None = None
    # The inputs the verified image was built from (its imagekit.input-digest label): publish
    # refuses a cell whose record names other inputs, or none (no such label, an earlier release):
    # a verification that cannot be bound to the cell's inputs is no verification.
    input_digest: InputDigest | None = None

    @property
    def emulated(self) -> bool:
        return self.platform is not None and self.platform.is_emulated

    @property
    def label(self) -> str:
        return {"validated": "validated", "checked": "checked without GPU", "failed": "failed"}[self.verdict]

    def failed_checks(self) -> tuple[CheckRecord, ...]:
        return tuple(c for c in self.checks if c.status not in (PASS, SKIP))

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status == status)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["checks"] = [asdict(c) for c in self.checks]
        data["metrics"] = dict(self.metrics)
        data["gpu_figures"] = [asdict(g) for g in self.gpu_figures]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        """A verification as ``as_json`` wrote it, every field checked (InputError otherwise)."""
        return validate_json(cls, json.dumps(data), "verification", "record it again")


# GPU feature discovery's `nvidia.com/gpu.product` node label (the driver's product name with its
# spaces as '-': NVIDIA-H100-80GB-HBM3), a Kubernetes label value; and a cluster's name as its
# operators call it (a kubeconfig context, a region): what a validation on a cluster records.
GpuProduct = Annotated[
    str,
    SafeString(
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?",
        "a nvidia.com/gpu.product label",
        "NVIDIA-L40S",
        max_length=63,
    ),
]
ClusterName = Annotated[
    str, SafeString(r"[A-Za-z0-9][A-Za-z0-9._-]*", "a cluster name", "prod-east", max_length=253)
]
DnsLabel = Annotated[  # a Job's or a namespace's name
    str, SafeString(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", "a DNS label", "imagekit-validate-x", max_length=63)
]


@dataclass(frozen=True)
class ClusterValidation:
    """The image's probe as a validate-on Job ran it on one GPU product of a Kubernetes cluster
    (``imagekit k8s --validate-on``, read back by ``imagekit k8s-results``): the cluster, the product
    the Job was pinned to, the manifest digest it pulled, and the run's record, whose verdict is
    derived again on every read like any verification's. One per (cluster, product, digest)."""

    __pydantic_config__ = RECORD_CONFIG

    cluster: ClusterName
    product: GpuProduct
    digest: ImageDigest  # the cell's own manifest digest: what the Job pulled and ran
    job: DnsLabel
    recorded_at: Timestamp
    verification: Verification
    index_digest: ImageDigest | None = None  # the index the cell is a platform of, when published in one

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cluster, self.product, self.digest)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "verification": self.verification.as_json()}


@dataclass(frozen=True)
class VerifyRun:
    """One ``imagekit verify`` of a matrix's cells as a whole: what it cost in GPU time."""

    __pydantic_config__ = RECORD_CONFIG

    started: Timestamp
    wall_s: Seconds
    jobs: Count  # cells verified at once
    gpus: GpuText
    cells: Count
    gpu_seconds: Seconds | None  # its cells' sum; None when one cell's could not be counted
    devices: Annotated[tuple[ShortText, ...], Items(MAX_GPUS)] = ()  # the GPUs cells were pinned to
    runner: ShortText | None = None

    @classmethod
    def of(
        cls,
        started: str,
        wall_s: float,
        jobs: int,
        gpus: str,
        devices: Sequence[str],
        results: Sequence[Verification],
        runner: str | None = None,
    ) -> VerifyRun:
        spent = [r.gpu_seconds for r in results]
        total = None if any(s is None for s in spent) else round(sum(s or 0.0 for s in spent), 3)
        return cls(started, round(wall_s, 3), jobs, gpus, len(results), total, tuple(devices), runner)


# -- the figures a check reported (the timed GEMM, per GPU telemetry), as the report holds them --


def _scalar(value: object) -> float | str | None:
    """A figure as the report holds it: a finite number or a short string (the image printed it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer past a float's range (JSON has no bound on digits)
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return value[:SHORT_CHARS]
    return None


# Telemetry the check sampled during the timed GEMM (nvidia-smi's names -> the report's).
TELEMETRY = {
    "clocks_sm_mhz": "sm_clock_mhz",
    "power_draw_w": "power_w",
    "temperature_gpu_c": "temperature_c",
    "utilization_gpu_pct": "utilization_pct",
    "memory_used_mib": "memory_used_mib",
}


def _number(value: object) -> float | None:
    """A number a report holds (finite, within FIGURE_BOUND), or None."""
    found = _scalar(value)
    return found if isinstance(found, float) and abs(found) <= FIGURE_BOUND else None


def _count(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and 0 <= number < 2**63 else None


def _span(stats: object) -> Span | None:
    if not isinstance(stats, Mapping):
        return None
    low, high, mean = (_number(stats.get(k)) for k in ("min", "max", "mean"))
    return Span(low, high, mean)


def _gpu_figures(device: Mapping[str, Any], emulated: bool) -> GpuFigures:
    """One device of the timed GEMM as the image reported it, each figure checked (an emulated
    run's: no floor, never a status against one)."""
    telemetry = device.get("telemetry")
    telemetry = telemetry if isinstance(telemetry, Mapping) else {}
    sampled = telemetry.get("metrics")
    sampled = sampled if isinstance(sampled, Mapping) else {}
    reasons = telemetry.get("throttle_reasons")
    reasons = reasons if isinstance(reasons, Mapping) else {}
    counts = reasons.get("counts")
    throttle = {
        str(k)[:SHORT_CHARS]: n
        for k, v in (list(counts.items())[:MAX_ITEMS] if isinstance(counts, Mapping) else ())
        if (n := _count(v))
    }
    device_name = _scalar(device.get("device"))
    status = _scalar(device.get("status"))
    return GpuFigures(
        index=_count(device.get("index")),
        device=device_name if isinstance(device_name, str) else None,
        tflops=_number(device.get("tflops")),
        floor_tflops=None if emulated else _number(device.get("floor_tflops")),
        status=SKIP if emulated else status if isinstance(status, str) else None,
        throttle=throttle,
        throttled_samples=_count(reasons.get("perf_limiting_samples")),
        **{name: _span(sampled.get(source)) for source, name in TELEMETRY.items()},
    )


def gemm_figures(
    checks: tuple[CheckRecord, ...], emulated: bool = False
) -> tuple[dict[str, Any], tuple[GpuFigures, ...]]:
    """Figures worth a column in the report: the timed GEMM's TFLOP/s (the slowest device), device
    and floor; and per GPU its figure with the telemetry sampled while it ran. ``emulated``: the
    figures are marked so, with no floor."""
    out: dict[str, Any] = {}
    gpus: tuple[GpuFigures, ...] = ()
    for check in checks:
        if check.name != GEMM_PERF or check.actual is None:
            continue
        try:
            tflops = _scalar(float(check.actual))
            detail = json.loads(check.detail or "{}")
        except (ValueError, RecursionError):  # the image's output: any text, nested any depth
            continue
        if tflops is not None:
            out[f"{GEMM_PERF}.tflops"] = tflops
        if emulated:
            out[f"{GEMM_PERF}.emulated"] = True
        if isinstance(detail, dict):
            out[f"{GEMM_PERF}.device"] = _scalar(detail.get("device"))
            out[f"{GEMM_PERF}.floor_tflops"] = None if emulated else _scalar(detail.get("floor_tflops"))
            devices = detail.get("devices")
            if isinstance(devices, list):
                gpus = tuple(_gpu_figures(d, emulated) for d in devices[:MAX_GPUS] if isinstance(d, Mapping))
    return out, gpus
