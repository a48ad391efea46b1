"""Stage 4: start each image with the GPUs asked for and run its in-image check script.

A container per image: no network, no new privileges, all capabilities dropped, a read-only root
with a small /tmp, memory and process limits, and a wall-clock timeout after which it is killed.
Whatever happens (failure, timeout, Ctrl-C), the container is removed before the call returns.

The verdict is conservative: ``validated`` only when every required check passed *with a GPU
visible*; without a GPU a cell is at most ``checked`` (checked without GPU), never validated.

The container runs for the image's own platform (its config's ``Architecture``); one for another
machine than the engine's runs emulated (``imagekit.facts.emulation``): the probe records it, a GPU
request for it is refused, and its verdict is never ``validated``.

A check container is one pass (``imagekit.verify.gpus.CheckPass``): by default every check with the whole
``--gpus`` request; ``imagekit.verify.schedule`` decides which passes run, when, and on which GPU.
Each record says which GPUs its containers were given and for how many GPU-seconds.

With ``pull``, a cell that ``build --push`` staged is verified as exactly that manifest: the
container starts from ``repo@sha256:...`` (pulled by digest when this engine lacks it, so an engine
that never saw the build can verify), and the verification records the digest it ran.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import platform
import re
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException

from imagekit.core import naming
from imagekit.core.atomic import atomic_write
from imagekit.core.clock import timestamp
from imagekit.core.errors import EnvironmentProblem, one_line
from imagekit.core.limits import SHORT_CHARS
from imagekit.core.safetypes import INPUT_DIGEST
from imagekit.core.text import printable
from imagekit.engine.client import (
    EngineFailure,
    engine_info,
    inspect_image,
    is_engine_failure,
    is_transient,
    pull,
    unreachable,
)
from imagekit.facts.emulation import Placement, engine_machine, gpu_refusal, place
from imagekit.probe import protocol
from imagekit.registry.credentials import docker_auth_config
from imagekit.render.contract import packaged_check_script
from imagekit.report.verification import Inventory, RunPlatform, Verification, gemm_figures
from imagekit.verify.gpu_support import refusal_problem, spec_dirs
from imagekit.verify.gpus import CheckPass, GpuRequest, local_engine, runner_devices
from imagekit.verify.invocation import check_invocation, verdict_of

INJECTED_SCRIPT_DIR = "/opt/imagekit-injected"


# CI variables that name the machine a job ran on, first found wins: GitHub Actions, GitLab CI,
# Buildkite, Jenkins; else the host's own name.
RUNNER_VARIABLES = ("RUNNER_NAME", "CI_RUNNER_DESCRIPTION", "BUILDKITE_AGENT_NAME", "NODE_NAME")


def runner_name(environ: Mapping[str, str] | None = None) -> str:
    """Where a verification ran, as a record may hold it (one short printable line)."""
    env = os.environ if environ is None else environ
    for variable in RUNNER_VARIABLES:
        if env.get(variable):
            return printable(env[variable])[:SHORT_CHARS]
    return printable(platform.node() or "unknown")[:SHORT_CHARS]


# -- what to ask for -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 900.0
    memory: str = "16g"
    pids: int = 4096
    tmp_size: str = "1g"
    shm_size: str = "2g"  # NCCL's all-reduce across GPUs goes through /dev/shm


@dataclass(frozen=True)
class Target:
    """One image to verify, named by its cell id (matrix mode) or its reference."""

    name: str
    image: str  # what the container starts: an image id, a tag, or repo@sha256:...
    image_id: str | None = None  # the image the build report says this must be
    digest: str | None = None  # the staged manifest digest that image was pushed as
    platform: str | None = None  # the cell's platform (linux/arm64); the image's own must match


# -- what came back --------------------------------------------------------------------------------


def _first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has ``checks`` (the script's document).

    Libraries may print before it (a banner with braces) or after it; each ``{`` is tried as the
    start of a value and whatever follows the value is ignored.
    """
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and "checks" in value:
            return value
        start = text.find("{", start + 1)
    return None


# -- running ---------------------------------------------------------------------------------------------


def _script_archive() -> bytes:
    """A tar to extract at ``/``: the injected directory (which the image lacks) and the script."""
    data = packaged_check_script().read_bytes()
    directory = INJECTED_SCRIPT_DIR.strip("/")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        parts = directory.split("/")
        for depth in range(1, len(parts) + 1):
            folder = tarfile.TarInfo("/".join(parts[:depth]))
            folder.type = tarfile.DIRTYPE
            folder.mode = 0o755
            tar.addfile(folder)
        info = tarfile.TarInfo(f"{directory}/check.py")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass(frozen=True)
class CheckRun:
    """What one check container printed: its document (None when the run itself failed)."""

    document: dict[str, Any] | None
    error: str | None
    exit_code: int | None
    log: str | None
    held_s: float = 0.0  # how long its containers held their GPUs (created to removed)

    def joined(self, other: CheckRun, *extra: dict[str, Any]) -> CheckRun:
        """This run's checks, then ``other``'s and ``extra``; the first error wins."""
        if self.document is None or other.document is None:
            return self if self.document is None else other
        checks = [*(self.document.get("checks") or ()), *(other.document.get("checks") or ()), *extra]
        exit_code = self.exit_code or other.exit_code
        held = self.held_s + other.held_s
        return CheckRun({**self.document, "checks": checks}, None, exit_code, self.log, held)


def _built_from(labels: Mapping[str, str]) -> str | None:
    """The input digest the image's label names, when it is one (what its verification records)."""
    found = labels.get(naming.INPUT_DIGEST_LABEL)
    return found if found is not None and INPUT_DIGEST.problem(found) is None else None


def frontend_arguments(labels: Mapping[str, str]) -> list[str]:
    """The front-end check's command, from the image's labels."""
    script, frontend = labels[naming.FRONTEND_CHECK_LABEL], labels.get(naming.FRONTEND_LABEL, "")
    command = ["python3", script, protocol.FRONTEND_OPTION, frontend]
    for name, option in protocol.FRONTEND_EXPECT_OPTIONS.items():
        if labels.get(naming.label(name)):
            command += [option, labels[naming.label(name)]]
    return command


# What a secret looks like in an image's history, environment or labels (values, not names).
_SECRET = re.compile(
    r"(?i)(?:token|password|passwd|secret|api[_-]?key)\s*=\s*['\"]?[^\s'\"$]{6,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|ssh-(?:ed25519|rsa) AAAA"
)


def image_secrets(image: Mapping[str, Any], api: docker.APIClient) -> dict[str, Any]:
    """A check of the image's metadata, from the engine: no token, key or password in its history
    (every RUN/ENV/ARG line), environment or labels. The front-end check looks inside the image."""
    config = image.get("Config") or {}
    places = [("env", str(v)) for v in config.get("Env") or ()]
    places += [("label", f"{k}={v}") for k, v in (config.get("Labels") or {}).items()]
    try:
        history = api.history(image["Id"])  # type: ignore[no-untyped-call]
    except (APIError, requests.RequestException):
        history = []
    places += [("history", str(step.get("CreatedBy") or "")) for step in history]
    found = sorted({place for place, text in places if _SECRET.search(text)})
    record: dict[str, Any] = {
        "name": protocol.IMAGE_SECRETS,
        "required": True,
        "expected": "none",
        "actual": found,
    }
    if not found:
        return {**record, "status": protocol.PASS, "actual": [], "detail": {"scanned": len(places)}}
    return {
        **record,
        "status": protocol.FAIL,
        "cause": f"a token, key or password is in the image's {', '.join(found)} (docker history / inspect)",
        "fix": "give secrets at run time (a mounted file or an environment variable), never in ENV, ARG,"
        " LABEL or a RUN line",
    }


class Harness:
    """Runs check containers; labels every container it creates with its run id so none outlives it."""

    def __init__(
        self,
        api: docker.APIClient,
        gpus: GpuRequest,
        limits: Limits = Limits(),
        logs_dir: Path | None = None,
        pull: bool = False,
    ) -> None:
        self.api = api
        self.gpus = gpus
        self.limits = limits
        self.logs_dir = logs_dir
        self.pull = pull  # pull a target this engine lacks (by digest, for a staged cell)
        self.run_id = uuid.uuid4().hex[:12]
        self._host_machine: str | None = None
        self._devices: tuple[str, ...] | None = None
        self._devices_asked = False
        self._stopped = threading.Event()

    def devices(self) -> tuple[str, ...] | None:
        """The runner's devices this run's ``--gpus`` covers (None: ``all`` and not known), asked once."""
        if not self._devices_asked:
            # a CDI `all` is pinned by the names the engine's own spec dirs hold
            self._devices = runner_devices(self.gpus, spec_dirs=lambda: spec_dirs(self._info()))
            self._devices_asked = True
        return self._devices

    def stop(self) -> None:
        """Start no check container from now on: the run is being cut short (Ctrl-C, a failure in
        another cell's thread), and ``remove_all`` must find every container there will be."""
        self._stopped.set()

    def _info(self) -> Mapping[str, Any]:
        """docker info, or nothing when the engine does not answer it (the caller's line says less)."""
        try:
            return engine_info(self.api)
        except (EnvironmentProblem, OSError):
            return {}

    def host_machine(self) -> str:
        """The engine host's machine (docker info's Architecture), asked once."""
        if self._host_machine is None:
            self._host_machine = engine_machine(engine_info(self.api))
        return self._host_machine

    # Removes the run's containers also on Ctrl-C and when the run is cut short. It asks the
    # engine's list, not ids kept here: Ctrl-C can land after the engine created a container but
    # before the create response brought its id back.
    def remove_all(self) -> None:
        try:
            labelled = self.api.containers(
                all=True, quiet=True, filters={"label": f"{naming.VERIFY_RUN_LABEL}={self.run_id}"}
            )
        except (DockerException, requests.RequestException, OSError):
            return  # engine gone: `imagekit` reports that (exit 3); the containers stay labelled
        for found in labelled:
            self._remove(str(found["Id"]))

    def _remove(self, container: str) -> None:
        # NotFound (a DockerException): removed already. Engine gone: `imagekit` reports that
        # (exit 3); the container stays labelled.
        with contextlib.suppress(DockerException, requests.RequestException, OSError):
            self.api.remove_container(container, force=True, v=True)

    @contextmanager
    def _container(
        self,
        image: str,
        command: list[str],
        labels: Mapping[str, str],
        inject: bool,
        platform: str | None,
        gpus: GpuRequest,
        environment: Mapping[str, str],
    ) -> Iterator[str]:
        if self._stopped.is_set():
            raise RunStopped
        gpu_env = {} if gpus.requested else {"NVIDIA_VISIBLE_DEVICES": "void"}
        host_config = self.api.create_host_config(
            network_mode="none",
            device_requests=gpus.device_requests() or None,
            mem_limit=self.limits.memory,
            memswap_limit=self.limits.memory,
            pids_limit=self.limits.pids,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            # a script injected into an image without one needs a writable root to land in
            read_only=not inject,
            # exec: torch.compile and cpp_extension load the libraries they compile from /tmp (Docker
            # mounts a tmpfs noexec by default); the root stays read-only and nothing is setuid.
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={self.limits.tmp_size}"},
            shm_size=self.limits.shm_size,
        )
        created = self.api.create_container(
            image,
            command=command,
            host_config=host_config,
            labels={naming.VERIFY_RUN_LABEL: self.run_id, **labels},
            environment={**environment, "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", **gpu_env},
            network_disabled=True,
            platform=platform,  # the image's own: emulated when it is not the engine's machine
        )
        container = str(created["Id"])
        try:
            # Stopped while this was being created: remove_all may have listed the run's containers
            # before this one existed, so it removes itself.
            if self._stopped.is_set():
                raise RunStopped
            if inject:
                self.api.put_archive(container, "/", _script_archive())
            yield container
        finally:
            self._remove(container)

    def verify(self, target: Target, check_pass: CheckPass | None = None) -> Verification:
        """Verify ``target`` in one pass: by default every check with the whole ``--gpus`` request."""
        result = self._verify(target, check_pass or CheckPass(self.gpus))
        return replace(result, finished_at=timestamp(), runner=runner_name())

    def _inspect(self, target: Target) -> dict[str, Any] | None:
        """The target's image, pulled first when asked to and this engine lacks it."""
        found = inspect_image(self.api, target.image)
        if found is not None or not self.pull:
            return found
        registry = target.image.split("/", 1)[0]
        try:
            pull(self.api, target.image, auth_config=docker_auth_config(registry))
        except (APIError, requests.RequestException, ConnectionError) as exc:
            if is_engine_failure(exc):
                raise unreachable(exc) from None
            if is_transient(exc):
                raise EnvironmentProblem(f"cannot pull {target.image}: {one_line(exc)}") from None
            raise _PullRefused(one_line(exc)) from None
        return inspect_image(self.api, target.image)

    def _verify(self, target: Target, check_pass: CheckPass) -> Verification:
        started = time.monotonic()
        try:
            try:
                image = self._inspect(target)
            except _PullRefused as refused:
                return self._failed(target, started, f"cannot pull {target.image}: {refused}")
            if image is None:
                return self._failed(target, started, f"image {target.image} not found; build it first")
            if target.image_id is not None and image.get("Id") != target.image_id:
                return self._failed(
                    target,
                    started,
                    f"{target.image} is image {image.get('Id')}, not the built {target.image_id}",
                )
            placed = self._place(target, image, started)
            if isinstance(placed, Verification):
                return placed
            # The report's staged digest names the image its build pushed (same config digest):
            # running that image id or repo@digest runs exactly what was staged.
            digest = target.digest if target.image_id is not None else None
            labels: Mapping[str, str] = (image.get("Config") or {}).get("Labels") or {}
            script = labels.get(naming.CHECK_SCRIPT_LABEL)
            inject = not script
            script_path = f"{INJECTED_SCRIPT_DIR}/check.py" if inject else str(script)
            args, environment = check_invocation(labels, check_pass.gpus, placed.host_machine)
            command = ["python3", script_path, *args, *check_pass.arguments()]
            run = self._check(
                target, command, inject, started, placed, check_pass, check_pass.kind, environment
            )
            if run.document is not None and check_pass.frontend and labels.get(naming.FRONTEND_CHECK_LABEL):
                # A front end: its own checks, behind the image's entrypoint, on loopback only.
                command = frontend_arguments(labels)
                frontend = self._check(target, command, False, started, placed, check_pass, "frontend")
                run = run.joined(frontend, image_secrets(image, self.api))
            verification = self._verification(target, run, started, placed, check_pass)
            return replace(verification, image_digest=digest, input_digest=_built_from(labels))
        except APIError as exc:
            text = " ".join(str(exc.explanation or exc).split())
            gpu_problem = refusal_problem(text, self.gpus, self._info, local_engine(os.environ))
            if gpu_problem is not None:
                raise gpu_problem from None
            if is_engine_failure(exc):
                raise unreachable(exc) from None
            why = f"the engine refused the check container: {text}"
            held = None if self.gpus.requested else 0.0  # a container may have held its GPUs a while
            return self._failed(target, started, why, gpu_seconds=held)
        except (requests.ConnectionError, EngineFailure) as exc:
            raise unreachable(exc) from None

    def _place(self, target: Target, image: Mapping[str, Any], started: float) -> Placement | Verification:
        """Where the image's check container runs on this engine; a failed verification instead when
        it is for another platform than its cell's, or runs emulated and GPUs were asked for."""
        placed = place(image, self.host_machine(), target.platform)
        if isinstance(placed, str):
            return self._failed(target, started, f"{target.image}: {placed}")
        no_gpu = gpu_refusal(target.image, placed) if self.gpus.requested else None
        return placed if no_gpu is None else self._failed(target, started, no_gpu, placed)

    def _check(
        self,
        target: Target,
        command: list[str],
        inject: bool,
        started: float,
        placed: Placement,
        check_pass: CheckPass,
        log_kind: str,
        environment: Mapping[str, str] | None = None,
    ) -> CheckRun:
        """One check container, created, run to its end (or the timeout) and removed; the time from
        creation to removal is what it held its GPUs for (no other cell could have them)."""
        began = time.monotonic()
        mark = {naming.TARGET_LABEL: target.name}
        with self._container(
            target.image, command, mark, inject, placed.platform, check_pass.gpus, environment or {}
        ) as cid:
            run = self._run(target, cid, started, log_kind, placed)
        return replace(run, held_s=time.monotonic() - began)

    def _gpu_use(self, check_pass: CheckPass, held_s: float) -> tuple[tuple[str, ...], float | None]:
        """(the devices a pass's containers were given, the GPU-seconds they held them for); the
        seconds are None when ``all`` was asked for on a runner whose devices are not known."""
        request = check_pass.gpus
        devices = self.devices() if request.count < 0 else runner_devices(request)
        held = request.held(devices)
        return devices or (), None if held is None else round(held * held_s, 3)

    def _run(
        self, target: Target, container: str, started: float, log_kind: str, placed: Placement
    ) -> CheckRun:
        self.api.start(container)
        exit_code: int | None = None
        error: str | None = None
        remaining = max(1, math.ceil(started + self.limits.timeout_s - time.monotonic()))
        try:
            # One blocking wait: no polling latency on top of the checks. Ctrl-C interrupts it
            # and the caller's `finally` removes the container.
            exit_code = int(self.api.wait(container, timeout=remaining).get("StatusCode", -1))
        except (requests.ReadTimeout, requests.ConnectionError) as exc:
            if not (isinstance(exc, requests.ReadTimeout) or "timed out" in str(exc).lower()):
                raise
            error = f"timed out after {self.limits.timeout_s:g}s; the check container was killed"
            with contextlib.suppress(APIError):  # it may have ended on its own in between
                self.api.kill(container)
        stdout = self.api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = self.api.logs(container, stdout=False, stderr=True).decode("utf-8", "replace")
        log = self._write_log(target, stdout, stderr, log_kind)
        document = _first_json_object(stdout)
        if error is None and document is None:
            tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no output"
            error = f"the {log_kind} script printed no JSON (exit {exit_code}): {tail}"
            if placed.emulated:  # "exec format error": no QEMU registered for the image's machine
                error += f" (runs emulated: {placed.text}; is QEMU registered? scripts/engine.sh emulation)"
        return CheckRun(None if error else document, error, exit_code, log)

    def _verification(
        self, target: Target, run: CheckRun, started: float, placed: Placement, check_pass: CheckPass
    ) -> Verification:
        duration = round(time.monotonic() - started, 3)
        devices, gpu_seconds = self._gpu_use(check_pass, run.held_s)
        if run.error is not None or run.document is None:
            return Verification(
                target.name, target.image, self.gpus.text, "failed", self.gpus.requested, False, (),
                duration, run.error, run.exit_code, run.log, platform=RunPlatform.of_run(None, placed),
                devices=devices, gpu_seconds=gpu_seconds,
            )  # fmt: skip
        where = RunPlatform.of_run(run.document.get("platform"), placed)
        verdict, checks, gpu_visible = verdict_of(run.document, self.gpus, where.is_emulated)
        metrics, gpu_figures = gemm_figures(checks, where.is_emulated)
        return Verification(
            target=target.name,
            image=target.image,
            gpus=self.gpus.text,
            verdict=verdict,
            gpu_requested=self.gpus.requested,
            gpu_visible=gpu_visible,
            checks=checks,
            duration_s=duration,
            exit_code=run.exit_code,
            log=run.log,
            metrics=metrics,
            gpu_figures=gpu_figures,
            inventory=Inventory.from_script(run.document.get("inventory")),
            platform=where,
            devices=devices,
            gpu_seconds=gpu_seconds,
        )

    def _failed(
        self,
        target: Target,
        started: float,
        error: str,
        placed: Placement | None = None,
        gpu_seconds: float | None = 0.0,  # no check container ran
    ) -> Verification:
        return Verification(
            target.name, target.image, self.gpus.text, "failed", self.gpus.requested, False, (),
            round(time.monotonic() - started, 3), error,
            platform=RunPlatform.of_run(None, placed) if placed is not None else None,
            gpu_seconds=gpu_seconds,
        )  # fmt: skip

    def _write_log(self, target: Target, stdout: str, stderr: str, kind: str) -> str | None:
        if self.logs_dir is None:
            return None
        path = self.logs_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', target.name)}.{kind}.log"
        atomic_write(path, f"# stdout\n{stdout}\n# stderr\n{stderr}")
        return str(path)


class _PullRefused(Exception):
    """The registry refused the pull for good (no such manifest, denied)."""


class RunStopped(Exception):
    """The run was cut short (``Harness.stop``) before this check container could start."""
