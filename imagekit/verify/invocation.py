"""How the in-image check script is invoked and what its answer means, free of docker-py: the
options and environment read from an image's labels, and the verdict read from the script's document.
``imagekit.verify.harness`` runs it in a container; ``imagekit.k8s`` writes it into Job manifests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagekit.core import naming
from imagekit.core.limits import MAX_ITEMS
from imagekit.probe import protocol
from imagekit.report.verification import CheckRecord, Verdict, derive_verdict
from imagekit.verify.gpus import GpuRequest


def check_arguments(
    labels: Mapping[str, str], gpus: GpuRequest, host_machine: str | None = None
) -> list[str]:
    """The check script's expectations, read from the image's ``imagekit.*`` labels, and the engine
    host's machine (so that the probe records whether it ran emulated), all as options."""
    args, environment = check_invocation(labels, gpus, host_machine)
    for variable, value in environment.items():
        args += [_OPTION_OF_VARIABLE[variable], value]
    return args


# What a probe of an earlier release does not know, told in its environment: its parser exits 2 on
# an unknown option but it ignores a variable, so an image published before these existed (it runs
# its own probe) still verifies. The probe of this release reads either spelling.
LATE_EXPECTATIONS = frozenset({"cuda-archs"})


# each variable ``check_invocation`` may set, and the option that says the same
_OPTION_OF_VARIABLE = {
    **{protocol.EXPECT_ENV[name]: protocol.EXPECT_OPTIONS[name] for name in LATE_EXPECTATIONS},
    protocol.HOST_MACHINE_ENV: protocol.HOST_MACHINE_OPTION,
}


def check_invocation(
    labels: Mapping[str, str], gpus: GpuRequest, host_machine: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The check script's options and environment, as ``verify`` runs any image's own probe."""
    args: list[str] = []
    environment: dict[str, str] = {}
    for name, value in naming.expectations(labels).items():
        if name in LATE_EXPECTATIONS:
            environment[protocol.EXPECT_ENV[name]] = value
        else:
            args += [protocol.EXPECT_OPTIONS[name], value]
    if gpus.requested:
        args.append(protocol.REQUIRE_GPU_OPTION)
    if host_machine:
        environment[protocol.HOST_MACHINE_ENV] = host_machine
    return args, environment


def verdict_of(
    document: Mapping[str, Any], gpus: GpuRequest, emulated: bool = False
) -> tuple[Verdict, tuple[CheckRecord, ...], bool]:
    """Read the script's document: (verdict, checks, gpu visible); an emulated run (as the host
    knows it, or as the document says) is never validated."""
    listed = document.get("checks")
    checks = tuple(
        CheckRecord.from_script(c)
        for c in (listed if isinstance(listed, list) else [])[:MAX_ITEMS]
        if isinstance(c, Mapping)
    )
    gpu_visible = bool(document.get("gpu_visible"))
    found = document.get("platform")
    emulated = emulated or (isinstance(found, Mapping) and found.get("emulated") is True)
    return derive_verdict(checks, gpus.requested, gpu_visible, None, emulated), checks, gpu_visible
