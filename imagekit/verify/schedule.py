"""Which check container runs when and on which GPU: verifying many images, one after another or
``--jobs`` at a time, and recording each verdict (and the run's GPU time) in the report as it comes.

GPU minutes are what a nightly pays for. On a runner with N GPUs, ``--jobs N`` verifies up to N
cells at once, each pinned to a GPU of its own (its container's device request names that device),
without the collectives, which need two GPUs. Once no cell needs its own GPU any more, each cell
that was validated on its GPU runs the checks that use every GPU (``ALL_GPU_CHECKS``: the
GEMM on each device, NCCL) on all of them, one cell at a time; its record then holds both passes.
A cell that failed on its GPU gets no all-GPU pass: its verdict is already failed.
Without GPUs, ``--jobs`` runs cells side by side. ``--jobs 1`` is one pass per cell with the whole
request, one cell after another.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from imagekit.core.clock import timestamp
from imagekit.probe.protocol import SKIP
from imagekit.report.verification import Verification, VerifyRun, derive_verdict
from imagekit.verify.gpus import ALL_GPU_CHECKS, COLLECTIVE_CHECKS, CheckPass
from imagekit.verify.harness import Harness, RunStopped, Target, runner_name

if TYPE_CHECKING:  # `imagekit verify IMAGE` needs no matrix: pydantic stays unimported
    from imagekit.plan.cells import Cell
    from imagekit.report.store import BuildReport, ReportStore

Report = Callable[[Verification], None]
LEFT_OUT = "not run: the cell failed on its own GPU, so it had no all-GPU pass"


@dataclass(frozen=True)
class Schedule:
    """How a run shares the runner out: cells at once, and the GPUs they are pinned to (empty: each
    container gets the whole ``--gpus`` request, or none)."""

    width: int
    devices: tuple[str, ...] = ()
    note: str | None = None  # why fewer cells run at once than --jobs asked for

    @property
    def pinned(self) -> bool:
        return bool(self.devices)


def schedule(harness: Harness, jobs: int) -> Schedule:
    """``--jobs`` on this runner: with GPUs, one cell per GPU the request covers (at most ``jobs``)."""
    if jobs <= 1:
        return Schedule(1)
    if not harness.gpus.requested:
        return Schedule(jobs)
    devices = harness.devices()
    if devices is None:
        return Schedule(
            1,
            note="cannot count this runner's GPUs (no nvidia-smi here, or a remote engine): verifying one"
            " cell at a time on all of them; give --gpus device=0,1,... to pin each cell to its own GPU",
        )
    if len(devices) < 2:
        return Schedule(1, note=f"--gpus {harness.gpus.text} covers one GPU: one cell at a time")
    return Schedule(min(jobs, len(devices)), devices[:jobs])


SERIAL = Schedule(1)


def verify_all(
    harness: Harness, targets: Sequence[Target], on_result: Report = lambda _: None, plan: Schedule = SERIAL
) -> list[Verification]:
    """Verify ``targets`` as ``plan`` says (``schedule``), reporting each verdict as it is reached;
    returns them in the targets' order. Always cleans up: no check container outlives the call."""
    try:
        if plan.width == 1:
            results = []
            for target in targets:
                results.append(harness.verify(target))
                on_result(results[-1])
            return results
        return _side_by_side(harness, targets, on_result, plan)
    finally:
        harness.stop()
        harness.remove_all()


def _side_by_side(
    harness: Harness, targets: Sequence[Target], on_result: Report, plan: Schedule
) -> list[Verification]:
    # Threads: each spends its time in one blocking wait on its container; the engine does the work.
    free: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    for slot in plan.devices or (None,) * plan.width:
        free.put(slot)

    def first_pass(target: Target) -> Verification:
        slot = free.get()
        try:
            return harness.verify(target, None if slot is None else CheckPass.one_gpu(slot))
        except BaseException:
            harness.stop()  # the run ends here (engine gone, no GPU support): no cell starts after it
            raise
        finally:
            free.put(slot)

    results: dict[int, Verification] = {}
    waiting: list[int] = []  # validated on one GPU: their all-GPU pass comes once the others are done
    executor = ThreadPoolExecutor(plan.width, thread_name_prefix="imagekit-verify")
    try:
        futures: dict[Future[Verification], int] = {
            executor.submit(first_pass, t): i for i, t in enumerate(targets)
        }
        for future in as_completed(futures):
            index = futures[future]
            try:
                results[index] = future.result()
            except RunStopped:
                continue  # another cell's failure stopped the run; its future raises that failure
            if plan.pinned and results[index].verdict == "validated":
                waiting.append(index)
            else:
                results[index] = _without_all_gpu_pass(results[index]) if plan.pinned else results[index]
                on_result(results[index])
    except BaseException:
        harness.stop()  # before the threads finish: none of them starts another container
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown()
    for index in sorted(waiting):
        every_gpu = harness.verify(targets[index], CheckPass.all_gpus(harness.gpus))
        results[index] = joined_passes(results[index], every_gpu)
        on_result(results[index])
    return [results[i] for i in range(len(targets))]


def _without_all_gpu_pass(result: Verification) -> Verification:
    """A cell that failed on its GPU: its collectives say why they never ran."""
    checks = tuple(
        replace(c, reason=LEFT_OUT) if c.name in COLLECTIVE_CHECKS and c.status == SKIP else c
        for c in result.checks
    )
    return replace(result, checks=checks)


def joined_passes(one_gpu: Verification, every_gpu: Verification) -> Verification:
    """A cell's record from its one-GPU pass and its all-GPU pass: the all-GPU pass's records of the
    checks it ran (the rest it reports as not selected) replace the one-GPU ones; time, GPU-seconds
    and devices add up; the verdict is the one rule applied to the whole."""
    newer = {c.name: c for c in every_gpu.checks if c.name in ALL_GPU_CHECKS}
    checks = tuple(newer.pop(c.name, c) for c in one_gpu.checks) + tuple(newer.values())
    error = one_gpu.error or (f"all-GPU pass: {every_gpu.error}" if every_gpu.error else None)
    visible = one_gpu.gpu_visible and (every_gpu.gpu_visible or every_gpu.error is not None)
    spent = (one_gpu.gpu_seconds, every_gpu.gpu_seconds)
    return replace(
        one_gpu,
        checks=checks,
        error=error,
        gpu_visible=visible,
        verdict=derive_verdict(checks, one_gpu.gpu_requested, visible, error, one_gpu.emulated),
        exit_code=one_gpu.exit_code or every_gpu.exit_code,
        duration_s=round(one_gpu.duration_s + every_gpu.duration_s, 3),
        gpu_seconds=None if None in spent else round(sum(s or 0.0 for s in spent), 3),
        devices=tuple(dict.fromkeys((*one_gpu.devices, *every_gpu.devices))),
        finished_at=every_gpu.finished_at,
    )


# -- a matrix's cells --------------------------------------------------------------------------------


def targets_for(
    cells: Sequence[Cell], report: BuildReport, staged: bool = False
) -> tuple[list[Target], list[tuple[str, str]]]:
    """(images to verify, [(cell id, why it cannot be verified)]).

    The images come from the build report (the image id each cell was built or skipped as), so
    what is verified is exactly what the build produced; with ``staged``, the manifest
    ``build --push`` staged (``repo@sha256:...``).
    """
    by_id = {result.id: result for result in report.cells}
    targets: list[Target] = []
    missing: list[tuple[str, str]] = []
    for cell in cells:
        result = by_id.get(cell.id)
        if result is None:
            missing.append((cell.id, "not in the build report; run `imagekit build` first"))
        elif result.status not in ("built", "skipped") or not result.image_id:
            missing.append((cell.id, f"its build {result.status}; nothing to verify"))
        elif staged and result.staged is None:
            missing.append(
                (cell.id, "never staged; run `imagekit build --push` first, or verify without --pull")
            )
        else:
            digest = result.staged.digest if result.staged else None
            image = result.staged.reference if staged and result.staged else result.image_id
            targets.append(Target(cell.id, image, result.image_id, digest, cell.platform))
    return targets, missing


def verify_cells(
    harness: Harness,
    cells: Sequence[Cell],
    store: ReportStore,
    on_result: Report = lambda _: None,
    plan: Schedule = SERIAL,
) -> list[Verification]:
    """Verify ``cells``, recording each verdict in the report as it comes (an interrupted run leaves
    a whole report that says which cells were verified), then the run's wall time and GPU-seconds."""
    started, clock = timestamp(), time.monotonic()
    report = store.require()
    targets, missing = targets_for(cells, report, staged=harness.pull)
    results = [
        Verification(
            cell_id,
            "-",
            harness.gpus.text,
            "failed",
            harness.gpus.requested,
            False,
            (),
            0.0,
            why,
            gpu_seconds=0.0,
        )
        for cell_id, why in missing
    ]
    for result in results:
        report = report.with_verification(result.target, result)
        on_result(result)
    store.save(report)

    def record(result: Verification) -> None:
        nonlocal report
        report = report.with_verification(result.target, result)
        store.save(report)
        on_result(result)

    results += verify_all(harness, targets, on_result=record, plan=plan)
    run = VerifyRun.of(
        started, time.monotonic() - clock, plan.width, harness.gpus.text, plan.devices, results, runner_name()
    )
    store.save(report.with_verify_run(run))
    return results
