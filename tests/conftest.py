"""Shared helpers: write a matrix, run the CLI as a user would, read what it printed."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.testing
from hypothesis import settings
from typer.testing import CliRunner

from imagekit.cli.commands import app
from imagekit.core import secret_values

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


# Test tiers are folders, decided here once, never by a mark in a module:
#   tests/unit/                    fast (`bash scripts/test.sh fast`): no engine, no network, no long process
#   tests/slow/                    slow: the real torch CPU wheel, pip, checkov, real deadlines; each
#                                  module says what makes it slow; one split from a fast module names it
#   tests/integration/             integration: the real engine and registry
#   tests/integration/multiarch/   multiarch: linux/arm64 under QEMU (the emulated Debian base, ~8 min;
#                                  examples/multiarch end to end, ~30 min): beyond CI's budget beside the
#                                  rest, so scripts/test.sh runs it only with IMAGEKIT_MULTIARCH=1
#   tests/integration/cuda13/      cuda13: torch 2.15's CUDA 13 wheels with the compiler from NVIDIA's
#                                  wheels (examples/nvcc-wheels: ~4 GB downloaded, a ~30 min BuildKit
#                                  build, ~40 GB of disk): beyond CI's budget too, IMAGEKIT_CUDA13=1
# The whole suite runs every tier but multiarch and cuda13.
TESTS_DIR = Path(__file__).parent  # as pytest spells paths: absolute, links kept
TIERS = {  # a test takes the mark of every tier folder it is in (multiarch and cuda13 are integration too)
    TESTS_DIR / "integration": "integration",
    TESTS_DIR / "integration" / "multiarch": "multiarch",
    TESTS_DIR / "integration" / "cuda13": "cuda13",
    TESTS_DIR / "slow": "slow",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for folder, mark in TIERS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(getattr(pytest.mark, mark))
        if HYPOTHESIS_PROFILE != "ci":
            _cap_examples(item)
    # The slow tier first (a stable sort: each tier keeps its order, module fixtures their scope):
    # beside the fast tier on a worker per CPU, its minute-long tests start at once instead of
    # leaving one worker grinding after the other has run out of work.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _no_secret_values_across_tests() -> Iterator[None]:
    """Each test starts knowing no secret value (``imagekit.core.secret_values`` keeps them for the
    process, which is one run in the product and the whole session here): one test's registry
    password would otherwise be masked in every later test's output."""
    secret_values.forget_all()
    yield
    secret_values.forget_all()


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


# typer builds the click command tree from every command's signature on each invoke (~0.1 s, most of
# an in-process run); a test session builds it once. The product builds it once per process anyway.
typer.testing._get_command = functools.cache(typer.testing._get_command)  # type: ignore[attr-defined]


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
