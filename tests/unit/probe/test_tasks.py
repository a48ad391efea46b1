"""The probe's bounded child tasks (imagekit/probe/tasks.py): every cache a task's build writes
points into its own task directory."""

from __future__ import annotations

from pathlib import Path

from imagekit.probe import arguments, context, tasks
from tests.unit.probe_runs import clean_env


def test_task_environment_points_every_cache_into_the_task_dir(tmp_path: Path) -> None:
    ctx = context.Context(arguments.Expect(), clean_env(TMPDIR=str(tmp_path), HOME="/root"))
    taskdir = ctx.subdir("t")
    env = tasks.task_env(ctx, taskdir)
    for name in (
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
        "TMPDIR",
    ):
        assert env[name].startswith(taskdir), name
    assert env["HOME"] == "/root"  # kept: a --user site-packages must stay importable
    ctx.cleanup()
