"""Where the probe runs: this process's machine, the engine host's (which the host passes in) and
whether the run is emulated (QEMU user emulation through binfmt_misc: an arm64 image on an x86_64
engine). An emulated process cannot use a GPU, and its timings are QEMU's, not the machine's: the
GPU checks of an emulated run fail when a GPU was asked for, and its timing figures are marked
emulated and never compared with floors."""

from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Any

from .protocol import FAIL, FLOOR_CHECKS, SKIP, TIMED_CHECKS
from .results import CheckResult
from .tables import cpuinfo_keys, machine_aliases

EMULATED_GPU_CAUSE = (
    "this run is emulated ({machine} on a {host} host, QEMU user emulation): an emulated process "
    "cannot use a GPU (the driver's libraries and nvidia-smi are the host's machine's)"
)
EMULATED_GPU_FIX = (
    "verify the image on a {machine} machine with a GPU (a native runner), or here with --gpus none"
)
EMULATED_TIMING = (
    "emulated run ({machine} on a {host} host): its timings are QEMU's, not the machine's, and are not "
    "compared with floors"
)


def canonical(machine: str) -> str:
    """``uname -m``'s name for a machine however spelled (arm64 -> aarch64, amd64 -> x86_64)."""
    name = machine.strip().lower()
    return machine_aliases().get(name, name)


def cpuinfo_machine(text: str) -> str | None:
    """The machine /proc/cpuinfo describes: QEMU user emulation passes the host's file through, so an
    aarch64 process reading an x86 one (``vendor_id``) is emulated. None: neither kind recognised."""
    keys = cpuinfo_keys()
    for line in text.splitlines():
        found = keys.get(line.partition(":")[0].strip())
        if found is not None:
            return found
    return None


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return handle.read(1 << 16)
    except OSError:
        return ""


def run_platform(
    host_machine: str | None, machine: str | None = None, cpuinfo: str | None = None
) -> dict[str, Any]:
    """The document's ``platform`` (``protocol.PLATFORM_FIELDS``): this process's machine, the host's
    as given, and whether the run is emulated: the two differ, or /proc/cpuinfo is another machine's
    (None: no host machine given and no such sign, unknown). ``machine`` and ``cpuinfo`` stand in for
    platform.machine() and /proc/cpuinfo in tests."""
    here = platform.machine() if machine is None else machine
    seen = cpuinfo_machine(_read_cpuinfo() if cpuinfo is None else cpuinfo)
    emulated = None if not host_machine else canonical(here) != canonical(host_machine)
    if seen is not None and seen != canonical(here):
        emulated = True
    return {"machine": here, "host_machine": host_machine, "emulated": emulated}


def mark_timed(check: CheckResult, where: dict[str, Any]) -> CheckResult:
    """A check of an emulated run as reported: a timed check's detail says ``emulated``, and a check
    against floors never fails on them (a skip saying why). Any other check, or a native run, as is."""
    if where.get("emulated") is not True or check.name not in TIMED_CHECKS:
        return check
    detail = check.detail if isinstance(check.detail, dict) else {}
    if check.detail is not None and not isinstance(check.detail, dict):
        detail = {"detail": check.detail}
    fields = {**asdict(check), "detail": {**detail, "emulated": True}}
    if check.name in FLOOR_CHECKS and check.status == FAIL:
        reason = EMULATED_TIMING.format(machine=where["machine"], host=where["host_machine"])
        fields.update(status=SKIP, reason=reason, cause=None, fix=None)
    return CheckResult(**fields)
