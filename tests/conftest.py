"""Shared helpers: write a matrix, run the CLI as a user would, read what it printed."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from imagekit.cli.commands import app

REPO = Path(__file__).resolve().parent.parent
# Wheel closures are cached per user; the tests keep theirs apart (and their children inherit it),
# and remove it when the run ends.
if "IMAGEKIT_CACHE_DIR" not in os.environ:
    os.environ["IMAGEKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="imagekit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["IMAGEKIT_CACHE_DIR"], ignore_errors=True)
# A shell without job control starts background commands with SIGINT ignored, and an ignored signal
# stays ignored across exec: the Ctrl-C tests would then interrupt nothing. Tests stand for a user
# at a terminal, so the suite and the processes it starts get Ctrl-C's default behaviour back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis profiles. `ci` runs every property test with the count its own @settings asks for
# (what CI has always run); `dev` caps every test at DEV_MAX_EXAMPLES. The whole suite
# (scripts/test.sh, so .ci/run) and CI=true load `ci`, `scripts/test.sh fast` and a bare pytest
# `dev`; IMAGEKIT_HYPOTHESIS_PROFILE names one outright. Loaded here, before any test module is
# imported: @given takes the profile's values when its module is.
DEV_MAX_EXAMPLES = 20
settings.register_profile("ci", print_blob=True)
settings.register_profile("dev", max_examples=DEV_MAX_EXAMPLES, deadline=None)
HYPOTHESIS_PROFILE = os.environ.get("IMAGEKIT_HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI") else "dev"
)
settings.load_profile(HYPOTHESIS_PROFILE)


def _cap_examples(item: pytest.Item) -> None:
    """Under `dev`, a test whose own @settings asks for more than DEV_MAX_EXAMPLES runs that many.
    An explicit @settings beats any profile, and a second @settings on a test is refused, so the cap
    replaces the settings Hypothesis keeps on the test (`_hypothesis_internal_use_settings`, read
    on every run). `ci` never comes here: the whole suite does not depend on that attribute."""
    obj: Any = getattr(item, "obj", None)
    test: Any = getattr(obj, "__func__", obj)  # a method's function
    if not getattr(test, "is_hypothesis_test", False):
        return
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if not isinstance(own, settings):
        raise pytest.UsageError(
            f"{item.nodeid}: Hypothesis no longer keeps a test's settings where tests/conftest.py caps "
            "them; run with IMAGEKIT_HYPOTHESIS_PROFILE=ci or update _cap_examples"
        )
    if own.max_examples > DEV_MAX_EXAMPLES:
        test._hypothesis_internal_use_settings = settings(own, max_examples=DEV_MAX_EXAMPLES)


# Test tiers. "fast" (`bash scripts/test.sh fast`) is everything neither `integration` nor `slow`;
# the whole suite runs both. Tiers are decided here, once, by what a test needs, never by a mark in
# its module: a path, a fixture, or a named test with the reason it is slow.
INTEGRATION_DIR = Path(__file__).parent / "integration"  # as pytest spells paths: absolute, links kept
SLOW_FIXTURES = {
    # A venv under /tmp with the real torch CPU wheel (tests/unit/conftest.py): its
    # first use creates the venv and pip-installs torch (~30 s); the tests on it start torch in a
    # process of their own, run torch.compile (inductor writes and compiles C++), build C++
    # extensions with load_inline, train a step, or play fake-GPU scenarios on the real CPU wheel
    # (2-60 s each).
    "torch_python",
}
# Named tests (a node id; a parametrized test's name covers all its cases), each with what it costs
# (CPU seconds on the 2-CPU test machine). Most are pip: imagekit resolves a cell's wheels with
# `pip install --dry-run` in a process of its own and does not cache a requirement set the
# wheelhouse cannot satisfy, so the variants matrix of test_render.py costs 8 pip runs (~0.5 s
# each) every time it is rendered.
SLOW_TESTS = {
    # 13 template payloads, each refused by `imagekit plan` and `imagekit render` in processes of
    # their own under a 1 GiB address-space limit: 26 interpreters importing imagekit, ~14 s of CPU
    # (the fast tier keeps the in-process check that a user template gets Jinja's sandbox,
    # test_imagekits_own_templates_render_without_the_sandbox)
    "tests/unit/render/test_dockerfile.py::test_a_user_template_cannot_reach_python",
    # `imagekit plan` on an example: pip resolves it against the example's own wheelhouse once its
    # setup.sh has filled it (offline: the real torch CPU wheel and its closure, ~10 s of CPU;
    # cuda-wheels: 2.6 GB of torch and nvidia-* wheels, ~7 s)
    "tests/unit/test_shipped_matrices.py::test_shipped_matrix_plans[examples/offline/matrix.yaml]",
    "tests/unit/test_shipped_matrices.py::test_shipped_matrix_plans[examples/cuda-wheels/matrix.yaml]",
    # renders the variants matrix twice: 16 pip runs, ~10 s of CPU
    "tests/unit/render/test_dockerfile.py::test_render_is_deterministic",
    # renders the variants matrix to reach one cell's digest: 8 pip runs, ~4 s of CPU
    "tests/unit/registry/test_client.py::test_a_build_asks_the_registry_about_a_cells_staging_tag_once",
    # resolves every cell of a two-torch matrix against a wheelhouse of built wheels: ~4 s of CPU
    "tests/unit/render/test_dockerfile.py::test_each_cell_ships_only_the_wheels_it_installs",
    # renders the variants matrix twice (a changed wheelhouse invalidates the cache): ~3 s of CPU
    "tests/unit/render/test_dockerfile.py::test_input_digest_covers_every_input",
    # checkov (installed by scripts/test.sh in a venv of its own: the fast tier installs nothing)
    # scans the shipped matrix's manifests three times, ~10 s of CPU each
    "tests/unit/k8s/test_policy.py::test_the_policy_scanner_finds_only_what_the_readme_explains",
    # and the validate-on Jobs of the shipped matrix once, ~10 s of CPU
    "tests/unit/k8s/test_policy.py::test_validate_on_jobs_are_strictly_valid_and_pass_the_policy_scanner",
}


# An integration test too long for CI's budget beside the rest (its reason in its module): its own
# tier, `multiarch`, which scripts/test.sh runs only with IMAGEKIT_MULTIARCH=1.
MULTIARCH_TESTS = INTEGRATION_DIR / "test_multiarch.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)
        if item.path == MULTIARCH_TESTS:
            item.add_marker(pytest.mark.multiarch)
        elif (
            any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ()))
            or item.nodeid.split("[")[0] in SLOW_TESTS
            or item.nodeid in SLOW_TESTS
        ):
            item.add_marker(pytest.mark.slow)
        if HYPOTHESIS_PROFILE != "ci":
            _cap_examples(item)


# A minimal valid matrix on an nvidia/cuda pattern base, for tests to extend.
CUDA_BASE = """
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{cudnn_tag}{flavour}-ubuntu22.04"
    os: ubuntu22.04
"""


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def write_matrix(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


def imagekit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """imagekit in a process of its own, as a user starts it (a hang, a payload or a signal is
    then the real thing); never raises on its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "imagekit", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
