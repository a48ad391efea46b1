"""require: NVIDIA_REQUIRE_* evaluated as the NVIDIA container toolkit (nvidia-container-cli) does."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from .context import Context
from .proc import run_command
from .results import WSL_HINT, CheckResult, failed, passed, skipped
from .smi import host_cuda_version, host_driver_version, nvml_brands, parse_nvidia_smi_brands, toolkit_brand
from .versions import cuda_minor

REQUIRE_PROPERTIES = ("cuda", "driver", "arch", "brand")
REQUIRE_OPERATORS = ("=", "!=", "<", "<=", ">", ">=")  # dsl.c's table: `==` is not among them
_OPERATOR_CHARS = "<>=!"


class InvalidRequirement(ValueError):
    """A term nvidia-container-cli rejects ("invalid expression"): the container does not start."""


@dataclass(frozen=True)
class RequireTerm:
    prop: str
    op: str
    value: str


def parse_term(raw: str) -> RequireTerm:
    """One `[PROPERTY][OPERATOR][VALUE]` term, split as dsl.c's evaluate_rule splits it: the property
    runs to the first of <>=!, the operator is the whole run of those characters and must be one of
    = != < <= > >= exactly, the value is the rest and must not be empty."""
    prop_end = next((i for i, c in enumerate(raw) if c in _OPERATOR_CHARS), len(raw))
    if prop_end == 0 or prop_end == len(raw):
        raise InvalidRequirement(f"invalid expression {raw!r}: no property or no operator")
    op_end = prop_end
    while op_end < len(raw) and raw[op_end] in _OPERATOR_CHARS:
        op_end += 1
    op, value = raw[prop_end:op_end], raw[op_end:]
    if op not in REQUIRE_OPERATORS:
        raise InvalidRequirement(
            f"invalid expression {raw!r}: operator {op!r} is not one of {REQUIRE_OPERATORS}"
        )
    if not value:
        raise InvalidRequirement(f"invalid expression {raw!r}: empty value")
    return RequireTerm(raw[:prop_end].lower(), op, value)


def parse_require(expression: str) -> list[list[RequireTerm]]:
    """'cuda>=12.1 brand=tesla,driver>=470' -> OR-list of AND-groups. Raises InvalidRequirement
    (a ValueError) on a term that cannot be split; property names are not checked here (the toolkit
    only rejects an unknown one when evaluation reaches it: see evaluate_require_verdict)."""
    groups = []
    for alternative in expression.split(" "):
        terms = [parse_term(raw) for raw in alternative.split(",") if raw]
        if terms:
            groups.append(terms)
    return groups


def _compare_rests(op: str, rest1: str, rest2: str) -> bool:
    """The comparison once every shared component is equal: what is left of each side (trailing
    zero components already dropped) decides."""
    if op == "!=":
        return bool(rest1 or rest2)
    if op in ("=", "<=", ">=") and not rest1 and not rest2:
        return True
    if op == "=":
        return False
    if op in ("<", "<="):
        return not rest1 and bool(rest2)
    return bool(rest1) and not rest2


def dsl_compare_version(left: str, op: str, right: str) -> bool:
    """libnvidia-container's dsl_compare_version: digits and dots only (else InvalidRequirement),
    numeric component by component, trailing zero components ignored (12.1 == 12.1.0)."""
    for text in (left, right):
        if not text or any(c not in "0123456789." for c in text):
            raise InvalidRequirement(f"invalid version {text!r}: only digits and dots compare")
    i = j = 0
    while i < len(left) and j < len(right):
        m1 = re.match(r"\d+", left[i:])
        m2 = re.match(r"\d+", right[j:])
        if m1 is None or m2 is None:
            raise InvalidRequirement(f"invalid version {left!r} or {right!r}")
        n1, n2 = int(m1.group(0)), int(m2.group(0))
        if n1 != n2:
            return {"=": False, "!=": True, "<": n1 < n2, "<=": n1 < n2, ">": n1 > n2, ">=": n1 > n2}[op]
        i += len(m1.group(0))
        j += len(m2.group(0))
        while i < len(left) and left[i] == ".":
            i += 1
        while j < len(right) and right[j] == ".":
            j += 1
    return _compare_rests(op, left[i:].lstrip(".0"), right[j:].lstrip(".0"))


def evaluate_term(term: RequireTerm, props: dict[str, str | None]) -> bool | None:
    """True / False, or None when the property's value is not known here. Raises
    InvalidRequirement where nvidia-container-cli reports "invalid expression"."""
    if term.prop not in REQUIRE_PROPERTIES:
        raise InvalidRequirement(f"invalid expression: unknown property {term.prop!r}")
    if term.op not in REQUIRE_OPERATORS:
        raise InvalidRequirement(f"invalid expression: operator {term.op!r}")
    if term.prop == "brand":
        if term.op not in ("=", "!="):
            raise InvalidRequirement(f"invalid expression: brand takes = or != only, not {term.op!r}")
        have = props.get("brand")
        if have is None:
            return None
        same = have.lower() == term.value.lower()
        return same if term.op == "=" else not same
    have = props.get(term.prop)
    if have is None:
        dsl_compare_version("0", term.op, term.value)  # the toolkit still rejects a bad value
        return None
    return dsl_compare_version(have, term.op, term.value)


@dataclass(frozen=True)
class RequireVerdict:
    satisfied: bool | None  # None: undetermined (a value it needs is not known here)
    invalid: str | None = None  # the toolkit would refuse the expression itself
    by: str | None = None  # the AND group that satisfied it


def evaluate_require_verdict(expression: str, props: dict[str, str | None]) -> RequireVerdict:
    """dsl_evaluate: OR groups left to right, each AND group stops at its first false term, the whole
    stops at the first group that holds; an invalid term fails it when evaluation reaches it."""
    any_unknown = False
    for alternative in expression.split(" "):
        raws = [raw for raw in alternative.split(",") if raw]
        if not raws:
            continue
        group_unknown = False
        group_false = False
        for raw in raws:
            try:
                value = evaluate_term(parse_term(raw), props)
            except InvalidRequirement as exc:
                return RequireVerdict(False, invalid=str(exc))
            if value is False:
                group_false = True
                break
            if value is None:
                group_unknown = True
        if group_false:
            continue
        if group_unknown:
            any_unknown = True
            continue
        return RequireVerdict(True, by=",".join(raws))
    return RequireVerdict(None if any_unknown else False)


def require_variables(env: dict[str, str]) -> dict[str, str]:
    """The NVIDIA_REQUIRE_* variables to enforce (the hook passes all but NVIDIA_REQUIRE_JETPACK*),
    with the toolkit's legacy rule: CUDA_VERSION and no NVIDIA_REQUIRE_CUDA -> cuda>=major.minor."""
    found = {
        k: v
        for k, v in sorted(env.items())
        if k.startswith("NVIDIA_REQUIRE_") and not k.startswith("NVIDIA_REQUIRE_JETPACK") and v.strip()
    }
    if not env.get("NVIDIA_REQUIRE_CUDA") and env.get("CUDA_VERSION"):
        with contextlib.suppress(ValueError):
            found["NVIDIA_REQUIRE_CUDA"] = "cuda>=" + cuda_minor(env["CUDA_VERSION"])
    return found


def go_parse_bool(value: str | None) -> bool:
    return (value or "").strip() in ("1", "t", "T", "TRUE", "true", "True")


def requirement_report(
    variables: dict[str, str],
    cuda: str | None,
    driver: str | None,
    devices: list[dict[str, str | None]],
) -> dict[str, dict[str, Any]]:
    """Each variable -> {"satisfied": bool|None, "invalid": str|None, "devices": [...]}, evaluated
    per device (arch, brand) as configure.c does; every device must satisfy. No device: evaluated
    once with arch and brand unknown (the toolkit would assume them ok; here that is undetermined
    only if the outcome depends on them)."""
    report: dict[str, dict[str, Any]] = {}
    for name, expression in variables.items():
        per_device: list[dict[str, Any]] = []
        for device in devices or [{}]:
            props = {"cuda": cuda, "driver": driver, "arch": device.get("arch"), "brand": device.get("brand")}
            verdict = evaluate_require_verdict(expression, props)
            per_device.append({"satisfied": verdict.satisfied, "by": verdict.by, "invalid": verdict.invalid})
        values = [d["satisfied"] for d in per_device]
        satisfied: bool | None = False if False in values else (None if None in values else True)
        invalid = next((d["invalid"] for d in per_device if d["invalid"]), None)
        report[name] = {"satisfied": satisfied, "invalid": invalid, "devices": per_device}
    return report


def evaluate_all_requirements(
    variables: dict[str, str],
    cuda: str | None,
    driver: str | None,
    devices: list[dict[str, str | None]],
) -> dict[str, bool | None]:
    """Each variable -> satisfied? Evaluated per device (arch, brand); every device must satisfy."""
    report = requirement_report(variables, cuda, driver, devices)
    return {name: entry["satisfied"] for name, entry in report.items()}


def device_props(ctx: Context) -> list[dict[str, str | None]]:
    """Per GPU: arch (compute capability) and brand (the toolkit's name), as the toolkit sees them.
    The brand comes from NVML where it loads (exactly what the toolkit reads), else from nvidia-smi
    -q's "Product Brand" mapped to the toolkit's names."""
    if ctx._devices is not None:
        return ctx._devices
    devices: list[dict[str, str | None]] = []
    smi_brands: list[str] = []
    smi_path = ctx.smi.get("path")
    if smi_path:
        rc, out = run_command([smi_path, "-q"])
        if rc == 0:
            smi_brands = parse_nvidia_smi_brands(out)
    from_nvml = nvml_brands() if smi_path or ctx.smi.get("gpus") else None

    def brand_of(i: int) -> tuple[str | None, str | None, str | None]:
        smi_text = smi_brands[i] if i < len(smi_brands) else None
        if from_nvml is not None and i < len(from_nvml):
            return from_nvml[i], smi_text, "nvml"
        name = toolkit_brand(smi_text)
        return name, smi_text, ("nvidia-smi -q" if name else None)

    for i, gpu in enumerate(ctx.smi.get("gpus") or []):
        arch = gpu.get("compute_cap")
        brand, smi_text, source = brand_of(i)
        devices.append(
            {
                "arch": arch if arch and arch not in ("[N/A]", "N/A") else None,
                "brand": brand,
                "product_brand": smi_text,
                "brand_source": source,
            }
        )
    if not devices and ctx.torch is not None:
        try:
            for i in range(int(ctx.torch.cuda.device_count())):
                major, minor = ctx.torch.cuda.get_device_capability(i)
                brand, smi_text, source = brand_of(i)
                devices.append(
                    {
                        "arch": f"{major}.{minor}",
                        "brand": brand,
                        "product_brand": smi_text,
                        "brand_source": source,
                    }
                )
        except Exception:
            pass
    ctx._devices = devices
    return devices


def check_require(ctx: Context) -> CheckResult:
    variables = require_variables(ctx.env)
    if go_parse_bool(ctx.env.get("NVIDIA_DISABLE_REQUIRE")):
        return skipped("require", "NVIDIA_DISABLE_REQUIRE is true", detail={"variables": variables})
    if not variables:
        return skipped("require", "the image sets no NVIDIA_REQUIRE_* (nor CUDA_VERSION)")
    for name, expression in variables.items():
        try:
            parse_require(expression)
        except ValueError as exc:
            return failed(
                "require",
                f"{name} cannot be parsed: {exc} (nvidia-container-cli refuses the container when its "
                "evaluation reaches such a term)",
                "fix the image's NVIDIA_REQUIRE_* syntax (space = OR, comma = AND; operators = != < <= > >=)",
                expected=expression,
                detail={"variables": variables},
            )
    gate = ctx.gpu_gate("require")
    if gate is not None:
        return gate
    cuda = host_cuda_version(ctx.smi)
    driver = host_driver_version(ctx.smi)
    devices = device_props(ctx)
    report = requirement_report(variables, cuda, driver, devices)
    verdicts = {name: entry["satisfied"] for name, entry in report.items()}
    actual = {"cuda": cuda, "driver": driver, "devices": devices}
    detail = {"variables": variables, "verdicts": verdicts, "evaluation": report}
    if all(v is True for v in verdicts.values()):
        return passed("require", variables, actual, detail)
    invalid = {name: entry["invalid"] for name, entry in report.items() if entry["invalid"]}
    if invalid:
        return failed(
            "require",
            "the NVIDIA container toolkit would refuse to start this image: "
            + "; ".join(f"{name}: {why}" for name, why in invalid.items()),
            "fix the image's NVIDIA_REQUIRE_* (properties cuda, driver, arch, brand; operators = != < <= > "
            ">=, not ==; space = OR, comma = AND)",
            expected=variables,
            actual=actual,
            detail=detail,
        )
    if any(v is False for v in verdicts.values()):
        bad = [name for name, v in verdicts.items() if v is False]
        brands = sorted({str(d.get("brand")) for d in devices})
        return failed(
            "require",
            f"the host does not satisfy {', '.join(bad)}: driver too old for the image's CUDA "
            f"(driver {driver}, driver CUDA {cuda}, brand {', '.join(brands) or '?'})"
            + (WSL_HINT if ctx.wsl else ""),
            "upgrade the host NVIDIA driver (or run on a datacenter GPU with the forward-compatibility "
            "package the requirement names)",
            expected=variables,
            actual=actual,
            detail=detail,
        )
    return failed(
        "require",
        "the requirement could not be decided: a property it needs (brand or arch) is unknown here",
        "make nvidia-smi and NVML available in the container (NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
        expected=variables,
        actual=actual,
        detail=detail,
    )
