"""The nccl check's worker processes (imagekit/probe/collectives.py): each rank's output goes to a
file and its result to another, so no amount of library output can block or break it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from imagekit.probe import collectives

WORKER = """
import json, os, sys, time
rank, flag = int(sys.argv[2]), sys.argv[5]
result_file = sys.argv[sys.argv.index("--result-file") + 1]
if rank == 1:
    sys.stderr.write("x" * 300_000)  # far more than a pipe holds
    sys.stderr.flush()
    open(flag, "w").close()
else:
    deadline = time.monotonic() + 20
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)  # rank 0 waits for rank 1, as in a collective
with open(result_file, "w") as handle:
    json.dump({"rank": rank, "ok": os.path.exists(flag)}, handle)
"""


# What NCCL_DEBUG=INFO and friends do to a rank's stdout: lines after the result, JSON-looking ones too.
NOISY_WORKER = """
import json, sys
rank = int(sys.argv[2])
result_file = sys.argv[sys.argv.index("--result-file") + 1]
print("host:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>")
with open(result_file, "w") as handle:
    json.dump({"rank": rank, "ok": True, "all_reduce": True, "broadcast": True}, handle)
for i in range(20000):
    print(f"host:1234:1234 [{rank}] NCCL INFO comm 0x55 rank {rank} nranks 2 - Init COMPLETE {i}")
print(json.dumps({"rank": rank, "ok": False, "error": "a library printed this"}))
sys.stderr.write("NCCL WARN noise on stderr\\n" * 1000)
"""


# A rank that prints a plausible result on stdout but never writes its result file.
LYING_WORKER = """
import json, sys
print(json.dumps({"rank": int(sys.argv[2]), "ok": True}))
"""


def test_collective_workers_cannot_block_on_their_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "flag"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    monkeypatch.setattr(collectives, "self_command", lambda: [sys.executable, str(script)])
    # The backend argument carries the flag's path to the fake worker.
    result = collectives.run_collectives(2, str(flag), timeout=15)
    assert not result["timed_out"]
    assert result["ok"], result
    assert [r["rank"] for r in result["ranks"]] == [0, 1]


def test_collective_results_survive_any_amount_of_library_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(NOISY_WORKER)
    monkeypatch.setattr(collectives, "self_command", lambda: [sys.executable, str(script)])
    work = tmp_path / "work"
    work.mkdir()
    result = collectives.run_collectives(2, "nccl", timeout=60, workdir=str(work))
    assert result["ok"], result
    assert [r["all_reduce"] for r in result["ranks"]] == [True, True]


def test_a_rank_without_a_result_file_fails_whatever_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(LYING_WORKER)
    monkeypatch.setattr(collectives, "self_command", lambda: [sys.executable, str(script)])
    result = collectives.run_collectives(2, "nccl", timeout=30)
    assert result["ok"] is False
    assert all(r["ok"] is False and '"ok": true' in r["output"] for r in result["ranks"])
