"""The line an engine's refusal of a GPU request becomes: what to pass (a CDI name, as the local spec
names the GPUs), how to write a spec or turn CDI on, and the refusals that are no GPU problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagekit.core.errors import EnvironmentProblem, ExitCode
from imagekit.verify import gpu_support
from imagekit.verify.gpu_support import refusal_problem
from imagekit.verify.gpus import GpuRequest
from tests.unit.verify.test_gpus import GPU0, GPU1, SMI, SPECS, smi


def test_the_cdi_names_said_for_the_hooks_ids_are_the_specs(tmp_path: Path) -> None:
    """`--gpus 2` on a CDI-only host: the line names the first two GPUs as the local spec does."""
    for strategy, said in (("index", "nvidia.com/gpu=0,1"), ("uuid", f"nvidia.com/gpu={GPU0},{GPU1}")):
        problem = refusal_problem(
            HOOKLESS, GpuRequest.parse("2"), info_of([str(SPECS / strategy)]), local_engine=True, run=smi(SMI)
        )
        assert problem is not None and f"pass --gpus cdi:{said}" in problem.message, problem
    ids = refusal_problem(
        HOOKLESS,
        GpuRequest.parse("device=1"),
        info_of([str(SPECS / "uuid")]),
        local_engine=True,
        run=smi(SMI),
    )
    assert ids is not None and f"pass --gpus cdi:nvidia.com/gpu={GPU1}" in ids.message


HOOKLESS = 'could not select device driver "" with capabilities: [[gpu]]'
CDI_OFF = 'could not select device driver "cdi" with capabilities: []'


def info_of(dirs: list[str] | None) -> Any:
    calls: list[int] = []

    def info() -> dict[str, Any]:
        calls.append(1)
        return {} if dirs is None else {"CDISpecDirs": dirs}

    info.calls = calls  # type: ignore[attr-defined]
    return info


def test_gpus_all_on_an_engine_with_cdi_and_no_hook_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    problem = refusal_problem(HOOKLESS, GpuRequest.parse("all"), info_of([str(tmp_path)]), local_engine=True)
    assert isinstance(problem, EnvironmentProblem) and problem.exit_code == ExitCode.ENVIRONMENT
    assert "pass --gpus cdi:nvidia.com/gpu=all" in problem.message and str(tmp_path) in problem.message
    assert "generate" not in problem.message  # the spec is there
    assert problem.message.endswith("pass --gpus cdi:nvidia.com/gpu=all")
    # the same for the hook's counts and ids
    two = refusal_problem(HOOKLESS, GpuRequest.parse("2"), info_of(["/etc/cdi"]), local_engine=False)
    assert two is not None and "pass --gpus cdi:nvidia.com/gpu=0,1" in two.message
    ids = refusal_problem(HOOKLESS, GpuRequest.parse("device=3"), info_of(["/etc/cdi"]), local_engine=False)
    assert ids is not None and "pass --gpus cdi:nvidia.com/gpu=3" in ids.message


def test_no_nvidia_spec_in_a_local_engines_spec_dirs_says_how_to_write_one(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text('{"cdiVersion": "0.6.0", "kind": "vendor.example/fpga"}')
    (tmp_path / "nvidia.yaml.bak").write_text("kind: nvidia.com/gpu\n")  # CDI reads no such file
    problem = refusal_problem(HOOKLESS, GpuRequest.parse("all"), info_of([str(tmp_path)]), local_engine=True)
    assert problem is not None and "cdi:nvidia.com/gpu=all once a spec lists the GPUs" in problem.message
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in problem.message
    (tmp_path / "nvidia.json").write_text('{\n  "cdiVersion": "0.6.0",\n  "kind": "nvidia.com/gpu",\n}')
    assert gpu_support.nvidia_spec_present([str(tmp_path), "/nonexistent"])


def test_a_spec_dir_that_is_odd_is_looked_at_safely(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.yaml")  # never read: no writer would ever come
    (tmp_path / "dir.json").mkdir()
    assert not gpu_support.nvidia_spec_present([str(tmp_path), str(tmp_path / "missing")])


def test_gpus_all_on_an_engine_without_cdi_keeps_the_toolkit_fix() -> None:
    problem = refusal_problem(HOOKLESS, GpuRequest.parse("all"), info_of([]), local_engine=True)
    assert problem is not None and "install nvidia-container-toolkit" in problem.message
    # Docker before 25 reports no CDISpecDirs at all
    older = refusal_problem(HOOKLESS, GpuRequest.parse("all"), info_of(None), local_engine=True)
    assert older is not None and "install nvidia-container-toolkit" in older.message


def test_a_cdi_request_on_an_engine_with_cdi_off_says_how_to_turn_it_on() -> None:
    info = info_of([])
    problem = refusal_problem(CDI_OFF, GpuRequest.parse("cdi:nvidia.com/gpu=all"), info, local_engine=True)
    assert problem is not None and '"features": {"cdi": true}' in problem.message
    assert info.calls == []  # the engine's own words decide


def test_an_unknown_cdi_device_is_one_line_naming_it() -> None:
    text = "CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=7"
    request = GpuRequest.parse("cdi:nvidia.com/gpu=7")
    problem = refusal_problem(text, request, info_of(["/etc/cdi", "/var/run/cdi"]), local_engine=True)
    assert problem is not None and problem.exit_code == ExitCode.ENVIRONMENT
    assert "define no nvidia.com/gpu=7" in problem.message and "/etc/cdi, /var/run/cdi" in problem.message
    assert "nvidia-ctk cdi list" in problem.message


def test_other_refusals_are_not_gpu_problems() -> None:
    request = GpuRequest.parse("cdi:nvidia.com/gpu=0")
    assert refusal_problem("No such image: x", request, info_of([]), local_engine=True) is None
    hook = GpuRequest.parse("all")  # a hook request never reads as an unknown CDI device
    assert refusal_problem("unresolvable CDI devices x", hook, info_of([]), local_engine=True) is None
