"""The probe's arguments: expectations (--expect-*, IMAGEKIT_EXPECT_*), the check selection
(--only/--skip) and its internal child roles; names from ``protocol``."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import NoReturn

from .protocol import (
    CHECK_NAMES,
    DEVICE_OPTION,
    EXPECT_ENV,
    EXPECT_OPTIONS,
    HOST_MACHINE_ENV,
    HOST_MACHINE_OPTION,
    ONLY_ENV,
    ONLY_OPTION,
    REQUIRE_GPU_ENV,
    REQUIRE_GPU_OPTION,
    RESULT_FILE_OPTION,
    SKIP_ENV,
    SKIP_OPTION,
    TASK_NAMES,
    TASK_OPTION,
    WORKER_OPTION,
)


@dataclass(frozen=True)
class Expect:
    torch: str | None = None
    cuda: str | None = None  # "cpu", "12.1" or "12.1.1"
    cudnn: str | None = None
    python: str | None = None
    flavour: str | None = None
    require_gpu: bool = False
    cuda_archs: str | None = None  # "8.0;9.0+PTX" (the cuda-archs label); the check parses it

    @property
    def is_cpu(self) -> bool:
        return self.cuda == "cpu"


class ArgumentError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 through main, not argparse's own exit
        raise ArgumentError(message)


@dataclass(frozen=True)
class Invocation:
    """How the script was called besides the expectations: a selection of checks, or an internal
    child role (a collective rank, or a bounded task such as a torch.compile run)."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    worker: tuple[str, ...] | None = None  # --collective-worker RANK WORLD PORT BACKEND
    task: str | None = None  # --task NAME (compile, extension_cpu, extension_cuda)
    device: str = "cpu"
    result_file: str | None = None
    host_machine: str | None = None  # the engine host's machine (--host-machine): emulated or not


def _names(values: list[str] | None, env_value: str | None, option: str) -> tuple[str, ...]:
    raw = list(values or [])
    if not raw and env_value:
        raw = [env_value]
    names = tuple(n.strip() for value in raw for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise ArgumentError(f"{option}: unknown check {', '.join(unknown)} (known: {', '.join(CHECK_NAMES)})")
    return names


def _host_machine(given: str | None, env: dict[str, str]) -> str | None:
    """--host-machine (else IMAGEKIT_HOST_MACHINE): the engine host's machine, a uname -m name."""
    value = given if given is not None else env.get(HOST_MACHINE_ENV)
    value = value.strip() if value and value.strip() else None
    if value is not None and not re.match(r"^[A-Za-z0-9_]{1,32}$", value):
        raise ArgumentError(f"{HOST_MACHINE_OPTION}: {value!r} is not a machine name like x86_64")
    return value


def parse_args(argv: list[str], env: dict[str, str]) -> tuple[Expect, Invocation]:
    parser = Parser(prog="check.py", description="imagekit in-image check (prints one JSON document)")
    parser.add_argument(EXPECT_OPTIONS["torch"], dest="expect_torch")
    parser.add_argument(EXPECT_OPTIONS["cuda"], dest="expect_cuda")
    parser.add_argument(EXPECT_OPTIONS["cudnn"], dest="expect_cudnn")
    parser.add_argument(EXPECT_OPTIONS["python"], dest="expect_python")
    parser.add_argument(EXPECT_OPTIONS["flavour"], dest="flavour")
    parser.add_argument(EXPECT_OPTIONS["cuda-archs"], dest="expect_cuda_archs")
    parser.add_argument(REQUIRE_GPU_OPTION, dest="require_gpu", action="store_true", default=None)
    parser.add_argument(
        HOST_MACHINE_OPTION, metavar="MACHINE", help="the engine host's machine (uname -m), to tell emulation"
    )
    parser.add_argument(
        ONLY_OPTION,
        dest="only_checks",
        action="append",
        metavar="CHECKS",
        help="run only these checks (comma list)",
    )
    parser.add_argument(
        SKIP_OPTION,
        dest="skipped_checks",
        action="append",
        metavar="CHECKS",
        help="leave these checks out (comma list)",
    )
    # internal: the script re-runs itself for work that must be isolated or bounded in time
    parser.add_argument(
        WORKER_OPTION,
        dest="collective_worker",
        nargs=4,
        metavar=("RANK", "WORLD", "PORT", "BACKEND"),
        help=argparse.SUPPRESS,
    )
    parser.add_argument(TASK_OPTION, dest="task", choices=TASK_NAMES, help=argparse.SUPPRESS)
    parser.add_argument(DEVICE_OPTION, dest="device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument(RESULT_FILE_OPTION, dest="result_file", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    only = _names(ns.only_checks, env.get(ONLY_ENV), ONLY_OPTION)
    skip = _names(ns.skipped_checks, env.get(SKIP_ENV), SKIP_OPTION)
    if (ns.collective_worker or ns.task) and not ns.result_file:
        raise ArgumentError(f"{WORKER_OPTION} and {TASK_OPTION} need {RESULT_FILE_OPTION}")
    invocation = Invocation(
        only=only,
        skip=skip,
        worker=tuple(ns.collective_worker) if ns.collective_worker else None,
        task=ns.task,
        device=ns.device,
        result_file=ns.result_file,
        host_machine=_host_machine(ns.host_machine, env),
    )

    def pick(arg: str | None, var: str) -> str | None:
        value = arg if arg is not None else env.get(var)
        return value.strip() if value and value.strip() else None

    cuda = pick(ns.expect_cuda, EXPECT_ENV["cuda"])
    if cuda is not None:
        cuda = cuda.lower()
        if cuda != "cpu" and not re.match(r"^\d+\.\d+(\.\d+)?$", cuda):
            raise ArgumentError(
                f"{EXPECT_OPTIONS['cuda']}: {cuda!r} is neither 'cpu' nor a CUDA version like 12.1"
            )
    cudnn = pick(ns.expect_cudnn, EXPECT_ENV["cudnn"])
    if cudnn is not None and not re.match(r"^\d+(\.\d+)*$", cudnn):
        raise ArgumentError(f"{EXPECT_OPTIONS['cudnn']}: {cudnn!r} is not a cuDNN version like 8 or 8.9.5.29")
    python = pick(ns.expect_python, EXPECT_ENV["python"])
    if python is not None and not re.match(r"^\d+\.\d+$", python):
        raise ArgumentError(f"{EXPECT_OPTIONS['python']}: {python!r} is not like 3.10")
    flavour = pick(ns.flavour, EXPECT_ENV["flavour"])
    if flavour is not None and flavour not in ("devel", "runtime"):
        raise ArgumentError(f"{EXPECT_OPTIONS['flavour']}: {flavour!r} is neither devel nor runtime")
    torch_version = pick(ns.expect_torch, EXPECT_ENV["torch"])
    if torch_version is not None and not re.match(r"^\d+\.\d+", torch_version):
        raise ArgumentError(f"{EXPECT_OPTIONS['torch']}: {torch_version!r} is not a torch version")
    require_env = env.get(REQUIRE_GPU_ENV, "").strip().lower()
    if require_env not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ArgumentError(f"{REQUIRE_GPU_ENV}: {require_env!r} is not a boolean")
    require_gpu = bool(ns.require_gpu) or require_env in ("1", "true", "yes")
    # Not refused here when odd: a wrong arch list is the cuda_archs check's warning, never exit 2.
    cuda_archs = pick(ns.expect_cuda_archs, EXPECT_ENV["cuda-archs"])
    expect = Expect(torch_version, cuda, cudnn, python, flavour, require_gpu, cuda_archs)
    return expect, invocation
