"""The probe needs no root: why the validate-on Jobs (and every Job `imagekit k8s` writes) run it as
uid 10001 under Pod Security "restricted", where `imagekit verify` runs it as the image's user (root
in a plain image, without capabilities).

The whole probe (the real torch CPU wheel: torch.compile, a C++ extension, a training step) runs
through setpriv as uid 65534 and as a uid no /etc/passwd names (what uid 10001 is in a plain image:
a user that getpass and `~` cannot resolve), with HOME and TMPDIR on a scratch directory as the
Job's /tmp emptyDir; then the collectives' processes and sockets (the nccl check's machinery, on
gloo) as uid 65534. Every check passes, and nothing is left behind.

The interpreter: the torch venv's own when that user can run it; where the venv's base Python sits
in a directory only root may enter (this machine's pyenv under /root), a system Python of the same
version with the venv's site-packages on PYTHONPATH (an image's interpreter is readable by all).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.probe_runs import SCRIPT, TORCH_VERSION, by_name

NOBODY = 65534


def unnamed_uid() -> int:
    """A uid no /etc/passwd entry names (getpass.getuser() and `~user` cannot resolve it)."""
    for uid in range(61_000, 65_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("every uid from 61000 to 64999 is named")


@dataclass(frozen=True)
class Sandbox:
    root: Path  # world-readable: the probe and a scratch directory per run
    python: str  # an interpreter that user can run, with torch importable
    version: str  # its X.Y
    env: dict[str, str]  # PYTHONPATH where the interpreter is not the venv's own

    def run(self, uid: int, *args: str) -> subprocess.CompletedProcess[str]:
        scratch = Path(tempfile.mkdtemp(dir=self.root))
        scratch.chmod(0o1777)  # as an emptyDir: writable by the pod's user
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), **self.env}
        return subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", self.python, *args],
            env=env, cwd="/", capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip


def _runs_as(uid: int, python: str, env: dict[str, str]) -> bool:
    """Whether ``python`` runs torch as ``uid``, and starts itself again (the probe's children do;
    setpriv itself may start an interpreter the user could not)."""
    code = "import subprocess, sys, torch; subprocess.run([sys.executable, '-c', 'import torch'], check=True)"
    probe = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-c", code]
    done = subprocess.run(probe, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture(scope="module")
def sandbox(torch_python: str) -> Iterator[Sandbox]:
    if shutil.which("setpriv") is None or os.getuid() != 0:
        pytest.fail("these tests start the probe as a non-root user through setpriv, as root")
    site = subprocess.run(
        [torch_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    version = subprocess.run(
        [torch_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    candidates = [(torch_python, {}), (f"/usr/bin/python{version}", {"PYTHONPATH": site})]
    usable = [(python, env) for python, env in candidates if _runs_as(NOBODY, python, env)]
    if not usable:
        pytest.fail(f"no Python {version} uid {NOBODY} can run with torch ({site}): {candidates}")
    python, env = usable[0]
    root = Path(tempfile.mkdtemp(prefix="imagekit-nonroot-"))
    try:
        root.chmod(0o755)
        shutil.copy(SCRIPT, root / "check.py")
        (root / "check.py").chmod(0o644)  # as the image has it: root's, readable by all
        yield Sandbox(root, python, version, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("uid", [NOBODY, unnamed_uid()], ids=["nobody", "unnamed"])
def test_every_check_passes_as_a_non_root_user(sandbox: Sandbox, uid: int) -> None:
    done = sandbox.run(
        uid, str(sandbox.root / "check.py"), "--expect-torch", TORCH_VERSION, "--expect-cuda", "cpu",
        "--expect-python", sandbox.version, "--flavour", "devel",
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout)
    checks = by_name(report)
    failed = {name: (c["cause"], c["detail"]) for name, c in checks.items() if c["status"] == "fail"}
    assert done.returncode == 0 and not failed, failed
    # what needs a writable place (inductor's C++ build, a C++ extension, the training step) ran
    for name in ("torch", "gemm_cpu", "compile", "extension", "train_step"):
        assert checks[name]["status"] == "pass", name
    assert checks["compile"]["detail"]["parts"]["cpu"]["generated_files"] > 0
    assert checks["extension"]["detail"]["parts"]["cpu"]["built"]
    scratch = [p for p in sandbox.root.iterdir() if p.is_dir()]
    assert all(not any(d.iterdir()) for d in scratch), "the probe left files behind"


def test_the_probes_user_holds_no_privilege(sandbox: Sandbox) -> None:
    """What the runs here prove holds without root's powers: no capability, uid and gid 65534."""
    done = sandbox.run(NOBODY, "-c", "import os; print(open('/proc/self/status').read())")
    status = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["Uid"].split() == [str(NOBODY)] * 4 and status["Gid"].split() == [str(NOBODY)] * 4


def test_the_collectives_run_as_a_non_root_user(sandbox: Sandbox) -> None:
    """The nccl check's machinery (a process per rank, a rendezvous port, a scratch directory),
    on gloo: the path a validate-on Job with --gpus 2 takes."""
    code = (
        f"import sys, json; sys.path.insert(0, {str(sandbox.root / 'check.py')!r});"
        " from imagekit_probe import collectives;"
        " print(json.dumps(collectives.run_collectives(2, 'gloo', 120)))"
    )
    done = sandbox.run(NOBODY, "-c", code)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["ok"] is True, outcome
    assert [r["all_reduce"] and r["broadcast"] for r in outcome["ranks"]] == [True, True]
