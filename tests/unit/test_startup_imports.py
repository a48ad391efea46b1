"""What a command's process imports: start-up is measured (BENCHMARKS.md, issue 26), and a module
imported at the top of the wrong file puts its cost on every run. Each case starts a fresh
interpreter, runs the command through ``imagekit.cli.main`` and reports what ``sys.modules`` holds.
Nothing here times anything; it names what must stay out of a path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.conftest import REPO

_REPORT = """
import json, sys
from imagekit.cli import main
code = 0
try:
    main()
except SystemExit as exit:
    code = exit.code
loader = sys.modules.get("pydantic.plugin._loader")
print(json.dumps({
    "code": code,
    "modules": sorted(sys.modules),
    "plugins_scanned": loader is not None and loader._plugins is not None,
}))
"""


def _started(*argv: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, *argv],
        cwd=REPO,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _loaded(report: dict[str, Any], *names: str) -> list[str]:
    """Which of ``names`` (top-level packages or modules) the process imported."""
    return [m for m in report["modules"] if m in names or m.split(".")[0] in names]


def test_help_imports_no_library_a_command_needs() -> None:
    report = _started("--help")
    assert report["code"] == 0
    assert _loaded(report, "pydantic", "pydantic_core", "yaml", "jinja2", "rich", "docker", "requests") == []


def test_plan_imports_no_engine_client_and_packs_no_context() -> None:
    """plan validates (pydantic), reads YAML and renders (Jinja: its tags carry input digests);
    it talks to no engine, shows no live table and writes no build context."""
    report = _started("plan", "--matrix", "matrix.yaml")
    assert report["code"] == 0
    assert _loaded(report, "rich", "docker", "requests", "urllib3", "tarfile", "argparse") == []


def test_plan_does_not_scan_for_pydantic_plugins() -> None:
    """imagekit's models are its own: no entry point scan of the environment on the way."""
    assert _started("plan", "--matrix", "matrix.yaml")["plugins_scanned"] is False


def test_an_explicit_pydantic_plugin_setting_is_kept() -> None:
    report = _started("plan", "--matrix", "matrix.yaml", env={"PYDANTIC_DISABLE_PLUGINS": "none-such"})
    assert report["code"] == 0
    assert report["plugins_scanned"] is True
