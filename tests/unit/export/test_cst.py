"""`imagekit render --cst DIR`: container-structure-test configs, checked for their structure
(the real tool runs them in tests/integration/test_cst.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from imagekit.export.cst import NVCC, cst_config
from imagekit.plan.cells import Cell, StackCell
from imagekit.plan.matrix import load_plan
from tests.conftest import REPO, run_cli

# The keys container-structure-test's schemaVersion 2.0.0 accepts in these sections.
TOP = {
    "schemaVersion",
    "metadataTest",
    "fileExistenceTests",
    "commandTests",
    "fileContentTests",
    "globalEnvVars",
}
METADATA = {"labels", "envVars", "exposedPorts", "volumes", "entrypoint", "cmd", "workdir", "user"}
PAIR = {"key", "value", "isRegex"}
FILE = {"name", "path", "shouldExist", "permissions", "uid", "gid", "isExecutableBy"}
COMMAND = {"name", "command", "args", "setup", "teardown", "envVars", "expectedOutput", "excludedOutput",
           "expectedError", "excludedError", "exitCode", "entrypoint"}  # fmt: skip


def cells() -> dict[str, Cell]:
    return {c.id: c for c in load_plan(REPO / "matrix.yaml").cells}


def test_render_writes_one_valid_config_per_cell(tmp_path: Path) -> None:
    result = run_cli(
        "render",
        "-m",
        str(REPO / "matrix.yaml"),
        "--out",
        str(tmp_path / "gen"),
        "--cst",
        str(tmp_path / "cst"),
    )
    assert result.exit_code == 0, result.stderr
    plan_cells = cells()
    files = sorted((tmp_path / "cst").glob("*.yaml"))
    assert sorted(f.stem for f in files) == sorted(plan_cells)
    for path in files:
        config = yaml.safe_load(path.read_text())
        assert config["schemaVersion"] == "2.0.0"
        assert set(config) <= TOP
        assert set(config["metadataTest"]) <= METADATA
        for pair in config["metadataTest"]["labels"] + config["metadataTest"]["envVars"]:
            assert set(pair) <= PAIR and isinstance(pair["key"], str) and isinstance(pair["value"], str)
            if pair.get("isRegex"):
                re.compile(pair["value"])
        for test in config["fileExistenceTests"]:
            assert set(test) <= FILE and isinstance(test["shouldExist"], bool)
        for test in config["commandTests"]:
            assert set(test) <= COMMAND
            assert all(isinstance(a, str) for a in test["args"])
            for pattern in test["expectedOutput"]:
                re.compile(pattern)
        labels = {p["key"]: p["value"] for p in config["metadataTest"]["labels"]}
        assert labels["imagekit.cell"] == path.stem


def test_cst_and_check_together_are_refused(tmp_path: Path) -> None:
    result = run_cli("render", "-m", str(REPO / "matrix.yaml"), "--check", "--cst", str(tmp_path))
    assert result.exit_code == 2
    assert not list(tmp_path.iterdir())


def nvcc_expected(config: dict[str, object]) -> bool:
    tests = config["fileExistenceTests"]
    assert isinstance(tests, list)
    (nvcc,) = (t for t in tests if t["path"] == NVCC)
    return bool(nvcc["shouldExist"])


def command(config: dict[str, object], prefix: str) -> list[str]:
    tests = config["commandTests"]
    assert isinstance(tests, list)
    (test,) = (t for t in tests if t["name"].startswith(prefix))
    return list(test["expectedOutput"])


def test_nvcc_present_in_cuda_devel_absent_in_runtime() -> None:
    by_id = cells()
    devel = cst_config(by_id["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-devel"])
    runtime = cst_config(by_id["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"])
    assert nvcc_expected(devel) is True
    assert nvcc_expected(runtime) is False
    (release,) = command(devel, "nvcc is")
    assert re.search(release, "Cuda compilation tools, release 12.1, V12.1.105")
    assert not re.search(release, "Cuda compilation tools, release 12.4, V12.4.131")
    assert not any(t["name"].startswith("nvcc is") for t in runtime["commandTests"])


def test_version_patterns_accept_the_real_output_and_refuse_neighbours() -> None:
    config = cst_config(cells()["cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-devel"])
    (torch,) = command(config, "torch is")
    assert re.search(torch, "2.5.1+cu118\n") and re.search(torch, "2.5.1\n")
    assert not re.search(torch, "2.5.10\n") and not re.search(torch, "2.4.1+cu118\n")
    (cuda,) = command(config, "torch was built")
    assert re.search(cuda, "11.8\n") and not re.search(cuda, "12.1\n") and not re.search(cuda, "11.80\n")
    (python,) = command(config, "python is")
    assert re.search(python, "3.10\n") and not re.search(python, "3.11\n")
    env = {p["key"]: p for p in config["metadataTest"]["envVars"]}
    assert re.search(env["CUDA_VERSION"]["value"], "11.8.0") and not re.search(
        env["CUDA_VERSION"]["value"], "12.1.1"
    )


def test_a_fixed_stack_pins_its_exact_torch() -> None:
    ngc = next(c for c in cells().values() if isinstance(c, StackCell))
    config = cst_config(ngc)
    (torch,) = command(config, "torch is")
    assert re.search(torch, ngc.torch + "\n")
    assert not re.search(torch, ngc.torch + "+cu121\n")
    assert "VIRTUAL_ENV" not in {p["key"] for p in config["metadataTest"]["envVars"]}
