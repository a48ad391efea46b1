"""GPU scheduling of `imagekit verify --jobs` against a fake engine: which device each check
container got, which checks it ran, what ran side by side, and the GPU-seconds recorded."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.report.store import open_store, write_report
from imagekit.report.verification import CheckRecord, Verification
from imagekit.verify.gpus import COLLECTIVE_CHECKS, CheckPass, GpuRequest, runner_devices
from imagekit.verify.harness import Harness, Target
from imagekit.verify.schedule import LEFT_OUT, Schedule, joined_passes, schedule, verify_all, verify_cells
from tests.unit.report_samples import build_report

GPU_CHECKS = ("cuda_available", "gemm_gpu")


def document(command: list[str], devices: list[str], failing: bool) -> dict[str, Any]:
    """What the probe prints for ``command`` with ``devices`` visible: the checks it selected pass
    (gemm_gpu on each device); a failing image fails its torch check."""
    only = command[command.index("--only") + 1].split(",") if "--only" in command else None
    skip = command[command.index("--skip") + 1].split(",") if "--skip" in command else []
    names = ["python", "torch", *GPU_CHECKS, *COLLECTIVE_CHECKS]
    checks = []
    for name in names:
        if (only is not None and name not in only) or name in skip:
            checks.append({"name": name, "status": "skip", "required": True, "reason": "left out (--skip)"})
        elif name in COLLECTIVE_CHECKS and len(devices) < 2:
            checks.append({"name": name, "status": "skip", "required": True, "reason": "fewer than 2 GPUs"})
        else:
            status = "fail" if failing and name == "torch" else "pass"
            checks.append({"name": name, "status": status, "required": True, "actual": devices})
    return {"gpu_visible": bool(devices), "checks": checks}


class GpuEngine:
    """A fake engine with ``gpus`` GPUs: each container sees the devices its request names, and
    waits at a barrier of ``together`` so that the test knows that many ran at the same time."""

    def __init__(self, gpus: int, together: int = 1, failing: frozenset[str] = frozenset()) -> None:
        self.gpus = [str(i) for i in range(gpus)]
        self.barrier = threading.Barrier(together) if together > 1 else None
        self.failing = failing
        self.lock = threading.Lock()
        self.alive: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []  # in creation order
        self.busy: dict[str, str] = {}  # device -> running container
        self.clashes: list[str] = []
        self.clock = 0.0  # advanced by each container's run (serial tests only read it)

    def monotonic(self) -> float:
        return self.clock

    def info(self) -> dict[str, str]:
        return {"Architecture": "x86_64"}

    def inspect_image(self, ref: str) -> dict[str, Any]:
        image_id = ref if ref.startswith("sha256:") else "sha256:" + "1" * 64  # a report's cell: its image id
        return {"Id": image_id, "Os": "linux", "Architecture": "amd64", "Config": {"Labels": {}}}

    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return dict(options)

    def _visible(self, requests: list[dict[str, Any]] | None) -> list[str]:
        if not requests:
            return []
        (request,) = requests
        if request["DeviceIDs"]:
            return list(request["DeviceIDs"])
        return self.gpus if request["Count"] == -1 else self.gpus[: request["Count"]]

    def create_container(
        self, image: str, command: list[str], host_config: dict[str, Any], **options: Any
    ) -> dict[str, str]:
        with self.lock:
            cid = f"c{len(self.created)}"
            record = {
                "id": cid,
                "image": image,
                "command": command,
                "devices": self._visible(host_config.get("device_requests")),
                "environment": options["environment"],
                "labels": options["labels"],
            }
            self.created.append(record)
            self.alive[cid] = record
        return {"Id": cid}

    def put_archive(self, container: str, path: str, data: bytes) -> None:
        pass

    def start(self, container: str) -> None:
        with self.lock:
            for device in self.alive[container]["devices"]:
                if device in self.busy:
                    self.clashes.append(f"{device}: {self.busy[device]} and {container}")
                self.busy[device] = container

    def wait(self, container: str, timeout: int) -> dict[str, int]:
        record = self.alive[container]
        if self.barrier is not None and "--only" not in record["command"]:
            self.barrier.wait(timeout=30)  # a guard against a hang, not a timing: it fails if broken
        with self.lock:
            self.clock += 10.0
            for device in record["devices"]:
                self.busy.pop(device, None)
        return {"StatusCode": 0}

    def logs(self, container: str, stdout: bool, stderr: bool) -> bytes:
        record = self.alive[container]
        failing = record["image"] in self.failing
        return json.dumps(document(record["command"], record["devices"], failing)).encode() if stdout else b""

    def remove_container(self, container: str, force: bool, v: bool) -> None:
        self.alive.pop(container, None)

    def containers(self, **options: Any) -> list[dict[str, str]]:
        return [{"Id": cid} for cid in self.alive]


def harness(engine: GpuEngine, gpus: str) -> Harness:
    return Harness(engine, GpuRequest.parse(gpus))  # type: ignore[arg-type]


def targets(count: int) -> list[Target]:
    return [Target(f"cell-{i}", f"img-{i}") for i in range(count)]


def first_passes(engine: GpuEngine) -> list[dict[str, Any]]:
    return [c for c in engine.created if "--only" not in c["command"]]


def all_gpu_passes(engine: GpuEngine) -> list[dict[str, Any]]:
    return [c for c in engine.created if "--only" in c["command"]]


def test_each_cell_runs_on_a_gpu_of_its_own_then_its_all_gpu_checks_on_every_gpu() -> None:
    engine = GpuEngine(gpus=4, together=4)
    run = harness(engine, "device=0,1,2,3")
    plan = schedule(run, jobs=4)
    assert plan == Schedule(4, ("0", "1", "2", "3"))
    reported: list[str] = []
    results = verify_all(run, targets(8), on_result=lambda r: reported.append(r.target), plan=plan)

    firsts = first_passes(engine)
    assert len(firsts) == 8 and all(len(c["devices"]) == 1 for c in firsts)
    assert {c["devices"][0] for c in firsts} == {"0", "1", "2", "3"}  # four ran together, one GPU each
    assert engine.clashes == [], "two check containers held one GPU at the same time"
    for container in firsts:
        command = container["command"]
        assert command[command.index("--skip") + 1] == ",".join(COLLECTIVE_CHECKS)
        assert "--require-gpu" in command and "NVIDIA_VISIBLE_DEVICES" not in container["environment"]

    # Then one all-GPU pass per cell, one after another, after every one-GPU pass.
    wholes = all_gpu_passes(engine)
    assert [c["image"] for c in wholes] == [f"img-{i}" for i in range(8)]
    assert engine.created[-8:] == wholes
    assert all(c["devices"] == ["0", "1", "2", "3"] for c in wholes)
    assert all(
        c["command"][c["command"].index("--only") + 1] == "gemm_gpu,nccl,nccl_bandwidth" for c in wholes
    )

    assert [r.target for r in results] == [f"cell-{i}" for i in range(8)]
    assert sorted(reported) == sorted(r.target for r in results)
    for result in results:
        assert result.verdict == "validated", result
        checks = {c.name: c for c in result.checks}
        assert [c.name for c in result.checks] == [
            "python",
            "torch",
            *GPU_CHECKS,
            *COLLECTIVE_CHECKS,
        ]
        assert checks["nccl"].status == "pass" and checks["nccl_bandwidth"].status == "pass"
        assert json.loads(checks["gemm_gpu"].actual or "[]") == ["0", "1", "2", "3"]  # the all-GPU record
        assert len(result.devices) == 4 and result.gpu_seconds is not None
    assert engine.alive == {}


def test_a_cell_that_fails_on_its_gpu_gets_no_all_gpu_pass() -> None:
    engine = GpuEngine(gpus=2, together=2, failing=frozenset({"img-1"}))
    run = harness(engine, "device=0,1")
    results = verify_all(run, targets(2), plan=schedule(run, jobs=2))
    assert [c["image"] for c in all_gpu_passes(engine)] == ["img-0"]
    good, bad = results
    assert good.verdict == "validated" and bad.verdict == "failed"
    collectives = [c for c in bad.checks if c.name in COLLECTIVE_CHECKS]
    assert collectives and all(c.status == "skip" and c.reason == LEFT_OUT for c in collectives)


def test_gpu_seconds_count_every_gpu_a_container_held(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = GpuEngine(gpus=3)
    monkeypatch.setattr("imagekit.verify.harness.time", SimpleNamespace(monotonic=engine.monotonic))
    # one pass with the whole request: 10 s on 3 GPUs
    (serial,) = verify_all(harness(engine, "device=0,1,2"), targets(1))
    assert serial.gpu_seconds == 30.0 and serial.devices == ("0", "1", "2")
    # pinned: 10 s on its own GPU, then 10 s on all three
    run = harness(engine, "3")
    (pinned,) = verify_all(run, targets(1), plan=schedule(run, jobs=3))
    assert pinned.gpu_seconds == 40.0 and pinned.devices == ("0", "1", "2")
    # no GPU asked for: none held
    (cpu,) = verify_all(harness(engine, "none"), targets(1))
    assert cpu.gpu_seconds == 0.0 and cpu.devices == ()


def test_without_gpus_jobs_run_cells_side_by_side() -> None:
    engine = GpuEngine(gpus=0, together=3)
    run = harness(engine, "none")
    plan = schedule(run, jobs=3)
    assert plan == Schedule(3)
    results = verify_all(run, targets(6), plan=plan)
    assert len(engine.created) == 6 and all_gpu_passes(engine) == []
    assert all(
        c["devices"] == [] and c["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void" for c in engine.created
    )
    assert [r.verdict for r in results] == ["checked"] * 6


def test_jobs_on_a_runner_whose_gpus_are_unknown_or_one_run_one_cell_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unknown = harness(GpuEngine(gpus=2), "all")
    monkeypatch.setattr(unknown, "devices", lambda: None)
    plan = schedule(unknown, jobs=4)
    assert plan.width == 1 and not plan.pinned and plan.note and "--gpus device=0,1" in plan.note
    single = schedule(harness(GpuEngine(gpus=1), "device=0"), jobs=4)
    assert single.width == 1 and single.note and "one GPU" in single.note
    assert schedule(harness(GpuEngine(gpus=8), "device=0,1,2,3,4,5,6,7"), jobs=2) == Schedule(2, ("0", "1"))


def test_a_failure_in_one_cell_stops_the_others_and_leaves_no_container() -> None:
    import requests

    class GoneEngine(GpuEngine):
        """img-0's wait finds the engine gone; the other cells' containers run until removed."""

        removed = threading.Event()

        def wait(self, container: str, timeout: int) -> dict[str, int]:
            if self.alive[container]["image"] == "img-0":
                raise requests.ConnectionError("engine gone")
            self.removed.wait(timeout=30)  # a guard against a hang: the run's cleanup removes it
            return {"StatusCode": 137}

        def logs(self, container: str, stdout: bool, stderr: bool) -> bytes:
            return super().logs(container, stdout, stderr) if container in self.alive else b""

        def remove_container(self, container: str, force: bool, v: bool) -> None:
            super().remove_container(container, force, v)
            self.removed.set()

    engine = GoneEngine(gpus=2)
    run = harness(engine, "device=0,1")
    with pytest.raises(Exception, match="cannot reach the Docker engine"):
        verify_all(run, targets(6), plan=schedule(run, jobs=2))
    assert engine.alive == {}
    started = {c["image"] for c in engine.created}
    assert "img-0" in started and started <= {"img-0", "img-1"}, (
        "cells queued behind the failure never started"
    )


def test_the_report_records_gpu_seconds_per_cell_and_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = build_report()
    ready = [r for r in report.cells if r.status in ("built", "skipped") and r.image_id]
    assert len(ready) == 2
    write_report(tmp_path, report)
    engine = GpuEngine(gpus=2, together=2)
    monkeypatch.setattr("imagekit.verify.harness.time", SimpleNamespace(monotonic=engine.monotonic))
    with open_store(tmp_path) as store:
        run = Harness(engine, GpuRequest.parse("device=0,1"), logs_dir=store.logs)  # type: ignore[arg-type]
        cells = [SimpleNamespace(id=r.id, platform=None) for r in ready]
        results = verify_cells(run, cells, store, plan=schedule(run, jobs=2))  # type: ignore[arg-type]
    saved = json.loads((tmp_path / "report.json").read_text())
    (verify_run,) = saved["verify_runs"]
    assert (
        verify_run["jobs"] == 2 and verify_run["devices"] == ["0", "1"] and verify_run["cells"] == len(ready)
    )
    per_cell = [c["verification"]["gpu_seconds"] for c in saved["cells"] if c["id"] in {r.id for r in ready}]
    assert verify_run["gpu_seconds"] == pytest.approx(sum(per_cell)) and all(s > 0 for s in per_cell)
    assert [r.gpu_seconds for r in results] == per_cell
    with open_store(tmp_path) as store:  # and reads back
        assert store.require().verify_runs[0].gpu_seconds == verify_run["gpu_seconds"]


def test_joined_passes_take_the_all_gpu_records_and_fail_on_an_all_gpu_error() -> None:
    one = Verification(
        "c", "i", "all", "validated", True, True,
        (CheckRecord("cuda_available", "pass", True), CheckRecord("gemm_gpu", "pass", True),
         CheckRecord("nccl", "skip", True, reason="left out (--skip)")),
        5.0, devices=("1",), gpu_seconds=5.0,
    )  # fmt: skip
    every = Verification(
        "c", "i", "all", "validated", True, True,
        (CheckRecord("gemm_gpu", "pass", True), CheckRecord("nccl", "fail", True, cause="hang")),
        7.0, devices=("0", "1"), gpu_seconds=14.0,
    )  # fmt: skip
    joined = joined_passes(one, every)
    assert [(c.name, c.status) for c in joined.checks] == [
        ("cuda_available", "pass"), ("gemm_gpu", "pass"), ("nccl", "fail"),
    ]  # fmt: skip
    assert joined.verdict == "failed" and joined.gpu_seconds == 19.0 and joined.devices == ("1", "0")
    timed_out = Verification("c", "i", "all", "failed", True, False, (), 900.0, "timed out", gpu_seconds=None)
    broken = joined_passes(one, timed_out)
    assert (
        broken.verdict == "failed"
        and broken.error == "all-GPU pass: timed out"
        and broken.gpu_seconds is None
    )


def test_runner_devices() -> None:
    def smi(out: str, rc: int = 0) -> Any:
        return lambda *a, **k: subprocess.CompletedProcess(a, rc, out, "")

    assert runner_devices(GpuRequest.parse("none")) == ()
    assert runner_devices(GpuRequest.parse("device=2,3")) == ("2", "3")
    assert runner_devices(GpuRequest.parse("2")) == ("0", "1")
    assert runner_devices(GpuRequest.parse("all"), {}, smi("0\n1\n2\n")) == ("0", "1", "2")
    assert runner_devices(GpuRequest.parse("all"), {}, smi("", 9)) is None
    assert runner_devices(GpuRequest.parse("all"), {}, smi("No devices were found\n")) is None
    remote = {"DOCKER_HOST": "tcp://gpu-box:2376"}
    assert runner_devices(GpuRequest.parse("all"), remote, smi("0\n1\n")) is None  # not this host's GPUs

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    assert runner_devices(GpuRequest.parse("all"), {}, missing) is None


def test_a_pass_selects_its_checks() -> None:
    assert CheckPass.one_gpu("3").gpus.device_requests()[0]["DeviceIDs"] == ["3"]
    assert CheckPass.one_gpu("3").arguments() == ["--skip", "nccl,nccl_bandwidth"]
    whole = CheckPass.all_gpus(GpuRequest.parse("all"))
    assert whole.arguments() == ["--only", "gemm_gpu,nccl,nccl_bandwidth"] and not whole.frontend
    assert CheckPass(GpuRequest.parse("all")).arguments() == []


def test_pull_targets_are_the_staged_digests() -> None:
    from dataclasses import replace

    from imagekit.verify.harness import Target
    from imagekit.verify.schedule import targets_for
    from tests.unit.report_samples import build_report

    report = build_report()
    built, skipped = report.cells[0], report.cells[1]
    assert built.staged is not None and built.image_id is not None
    cells = [SimpleNamespace(id=r.id, platform="linux/arm64") for r in report.cells]
    targets, missing = targets_for(cells, report, staged=True)  # type: ignore[arg-type]
    staged = built.staged.reference
    assert targets == [Target(built.id, staged, built.image_id, built.staged.digest, "linux/arm64")]
    assert dict(missing)[skipped.id].startswith("never staged; run `imagekit build --push`")
    assert "its build failed" in dict(missing)["cuda-failed"]
    # Without --pull the image id runs; its staged digest is still what it was pushed as.
    targets, _ = targets_for(cells, replace(report, cells=(built,)))  # type: ignore[arg-type]
    assert targets == [Target(built.id, built.image_id, built.image_id, built.staged.digest, "linux/arm64")]
