"""The in-image check script's process plumbing: the collective workers' output and C stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from imagekit.incontainer import check
from tests.conftest import REPO

WORKER = """
import json, os, sys, time
rank, flag = int(sys.argv[2]), sys.argv[5]
if rank == 1:
    sys.stderr.write("x" * 300_000)  # far more than a pipe holds
    sys.stderr.flush()
    open(flag, "w").close()
else:
    deadline = time.monotonic() + 20
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)  # rank 0 waits for rank 1, as in a collective
print(json.dumps({"rank": rank, "ok": os.path.exists(flag)}))
"""


def test_collective_workers_cannot_block_on_their_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "flag"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    monkeypatch.setattr(check, "__file__", str(script))
    # The backend argument carries the flag's path to the fake worker.
    result = check.run_collectives(2, str(flag), timeout=15)
    assert not result["timed_out"]
    assert result["ok"], result
    assert [r["rank"] for r in result["ranks"]] == [0, 1]


def test_c_stdio_written_during_the_checks_never_follows_the_json() -> None:
    program = textwrap.dedent(
        """
        import ctypes, sys
        from imagekit.incontainer import check
        real = check.build_report
        def noisy(ctx):
            report = real(ctx)
            ctypes.CDLL(None).printf(b"banner from a C library\\n")  # left in C's stdout buffer
            return report
        check.build_report = noisy
        sys.exit(check.main([]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO,
        # PYTHONUNBUFFERED would make C's stdout unbuffered too, hiding the problem
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    document = json.loads(done.stdout)  # nothing before or after the one document
    assert "checks" in document
    assert "banner from a C library" in done.stderr
