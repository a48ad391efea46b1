"""A cell's GPU fit as CEL selectors over the device attributes NVIDIA's DRA driver publishes.

What the driver publishes (kubernetes-sigs/dra-driver-nvidia-gpu, read at 9593204668 of
2026-08-07: cmd/gpu-kubelet-plugin/deviceinfo.go ``GpuInfo.Attributes`` and mig.go
``CommonAttributesMig``): attributes without a domain, which Kubernetes qualifies with the
driver's name, ``gpu.nvidia.com``, so a selector reads ``device.attributes['gpu.nvidia.com']``:

- ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``: *versions* (semver). The
  driver parses NVML's strings with Masterminds' semver in its lenient mode and publishes the
  normal form: ``9.0`` as ``9.0.0``, driver ``560.35.03`` as ``560.35.3``;
- ``productName`` (NVML's device name, ``NVIDIA H100 80GB HBM3``), ``architecture`` (the GPU's:
  ``Hopper``, ``Ada Lovelace``; not the host CPU's, which no device attribute names), ``type``
  (``gpu``, ``mig``), and on MIG devices ``profile`` (``1g.10gb``, ``1g.10gb+me.all``): strings.

Kubernetes' CEL environment for device selectors has the semver library
(k8s.io/apiserver/pkg/cel/library/semverlib.go): ``semver(s)`` parses strictly (blang/semver:
three numbers, no leading zero), and ``compareTo``/``isLessThan``/``isGreaterThan`` order by
semver precedence. The literals written here are in that strict form, made from the fit's
numbers, so ``semver`` never fails on them.

Strings from the command line (a product name, a MIG profile) go into single-quoted CEL string
literals only after matching a character set without quotes, backslashes or control characters:
inside such a literal nothing else is special, so the value is the literal's value.
"""

from __future__ import annotations

import re

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_PRODUCT_NAME
from imagekit.core.text import shown
from imagekit.k8s.mig import DRIVER_PROFILE, EXAMPLES
from imagekit.plan.gpu_fit import Capability, GpuFit, Kernels

DRIVER = "gpu.nvidia.com"  # the DRA driver's name: the domain of its attributes
ATTRIBUTES = f"device.attributes['{DRIVER}']"
CAPABILITY = f"{ATTRIBUTES}.cudaComputeCapability"
DRIVER_VERSION = f"{ATTRIBUTES}.driverVersion"
# NVML's device names: letters, digits, spaces and - . _ (``NVIDIA RTX PRO 6000 Blackwell Server
# Edition``, ``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-16GB``): nothing a CEL string literal
# treats specially, and with its spaces as '-' a feature-discovery label value, the form the
# validate-on plan and the probe's records name a product by.
_PRODUCT_NAME = re.compile(rf"[A-Za-z0-9]([A-Za-z0-9 ._-]{{0,{MAX_PRODUCT_NAME - 2}}}[A-Za-z0-9])?")
_NUMBERS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9}){0,2}")


def semver_literal(version: str, what: str) -> str:
    """``version`` (up to three dot-separated numbers) as Kubernetes' strict semver: three numbers,
    no leading zero (``450.80.02`` -> ``450.80.2``, as the driver publishes it)."""
    if not _NUMBERS.fullmatch(version):
        raise InputError(
            f"{what} {shown(version)}: not a version a CEL semver selector can compare (numbers"
            " like 525.60.13); write the Jobs with --gpu-request device-plugin, or correct the data"
        )
    numbers = [int(part) for part in version.split(".")]
    return ".".join(str(n) for n in (*numbers, 0, 0)[:3])


def _capability(value: Capability) -> str:
    return f"semver('{value[0]}.{value[1]}.0')"


def capability_selector(kernels: Kernels, cell: str) -> str:
    """A device whose compute capability has a kernel: within a cubin's major from its lowest
    minor, or at or after the PTX's capability (later majors included)."""
    terms = []
    for low, below in kernels.ranges():
        term = f"{CAPABILITY}.compareTo({_capability(low)}) >= 0"
        if below is not None:
            term += f" && {CAPABILITY}.isLessThan({_capability(below)})"
        terms.append(f"({term})" if len(kernels.ranges()) > 1 else term)
    if not terms:
        raise InputError(
            f"{cell}: its arch list names no compute capability, so no GPU can be selected; write"
            " its Jobs with --gpu-request device-plugin or correct the arch list in gpus.yaml"
        )
    return " || ".join(terms)


def driver_selector(floor: str, cell: str) -> str:
    """A device whose driver is at or above ``floor`` (the full version, not its major)."""
    return f"{DRIVER_VERSION}.compareTo(semver('{semver_literal(floor, f'{cell}: driver floor')}')) >= 0"


def checked_product_name(name: str) -> str:
    """``name`` where it can be a CEL string literal as it is; else one line, exit 2."""
    if not _PRODUCT_NAME.fullmatch(name):
        raise InputError(
            f"--validate-on {shown(name)}: with --gpu-request dra, the GPU's productName as the DRA"
            f" driver publishes it (like 'NVIDIA H100 80GB HBM3', at most {MAX_PRODUCT_NAME}"
            " characters: letters, digits, spaces and - . _; no quote or backslash)"
        )
    return name


def product_selector(name: str) -> str:
    return f"{ATTRIBUTES}.productName == '{checked_product_name(name)}'"


def mig_profile_selector(profile: str) -> str:
    """A MIG device of ``profile`` (go-nvlib's spelling, ``1g.10gb``, ``1g.10gb+me.all``, ``1g.10gb-me``:
    imagekit.k8s.mig)."""
    if not DRIVER_PROFILE.fullmatch(profile):
        raise InputError(f"MIG profile {shown(profile)}: not a profile go-nvlib names ({EXAMPLES})")
    return f"{ATTRIBUTES}.profile == '{profile}'"


def fit_selectors(fit: GpuFit, cell: str) -> tuple[str, ...]:
    """The selectors ``fit`` asks of a device: a kernel for its compute capability (where the arch
    list is known) and a driver at or above the floor (where the compat data has it). The CPU
    architecture is no device attribute: it stays the kubelet's ``kubernetes.io/arch`` label."""
    if not fit.gpu:
        return ()
    selectors = []
    if fit.kernels is not None:
        selectors.append(capability_selector(fit.kernels, cell))
    if fit.driver_floor is not None:
        selectors.append(driver_selector(fit.driver_floor, cell))
    return tuple(selectors)
