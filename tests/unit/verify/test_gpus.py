"""GPU requests without an engine: the --gpus grammar (CDI names among it), the device request docker-py
sends, and the GPUs a request covers (each pinned by the name its CDI spec gives it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagekit.core import cdi, safetypes
from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import MAX_GPUS
from imagekit.verify.cdi_specs import spec_device_names
from imagekit.verify.gpus import CheckPass, GpuRequest, runner_devices
from tests.conftest import REPO, run_cli

UUID = "GPU-5f3c2a10-9b1e-4d7a-8c2e-0123456789ab"


@pytest.mark.parametrize(
    ("text", "names", "count"),
    [
        ("cdi:nvidia.com/gpu=all", ("nvidia.com/gpu=all",), -1),
        ("cdi:nvidia.com/gpu=0", ("nvidia.com/gpu=0",), 1),
        ("cdi:nvidia.com/gpu=0:1", ("nvidia.com/gpu=0:1",), 1),  # a MIG device counts as one
        (f"cdi:nvidia.com/gpu={UUID}", (f"nvidia.com/gpu={UUID}",), 1),
        ("cdi:nvidia.com/gpu=MIG-5f3c2a10-9b1e", ("nvidia.com/gpu=MIG-5f3c2a10-9b1e",), 1),
        ("cdi:nvidia.com/gpu=0,nvidia.com/gpu=1", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), 2),
        ("cdi:nvidia.com/gpu=0,1", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), 2),  # the kind carries on
        ("cdi:nvidia.com/gpu=1,1", ("nvidia.com/gpu=1",), 1),  # each once
        ("cdi:nvidia.com/gpu=0,all", ("nvidia.com/gpu=0", "nvidia.com/gpu=all"), -1),
        ("cdi:vendor.example/fpga_x.1=dev_0", ("vendor.example/fpga_x.1=dev_0",), 1),
        (" cdi:a/b=c ", ("a/b=c",), 1),
    ],
)
def test_cdi_names_parse_into_a_cdi_device_request(text: str, names: tuple[str, ...], count: int) -> None:
    request = GpuRequest.parse(text)
    assert (request.cdi_devices, request.count, request.device_ids) == (names, count, ())
    assert request.requested and request.text == cdi.CDI_PREFIX + ",".join(names)
    (device_request,) = request.device_requests()
    # driver "cdi" and the names as device ids: what `docker run --device NAME` sends (Docker 25+)
    assert device_request["Driver"] == "cdi" and device_request["DeviceIDs"] == list(names)
    assert device_request["Capabilities"] == [] and device_request["Count"] == 0
    assert safetypes.GpuText.__metadata__[0].problem(request.text) is None  # a report records it


def test_nvidia_hook_requests_are_unchanged() -> None:
    (hook,) = GpuRequest.parse("all").device_requests()
    assert hook["Driver"] == "" and hook["Capabilities"] == [["gpu"]] and hook["Count"] == -1
    assert GpuRequest.parse("all").cdi_devices == ()


@pytest.mark.parametrize(
    "text",
    [
        "cdi:",
        "cdi:nvidia.com/gpu",  # no name
        "cdi:nvidia.com/gpu=",
        "cdi:gpu=0",  # no vendor
        "cdi:0",  # a bare device first: no kind to carry on
        "cdi:nvidia.com/=0",
        "cdi:/gpu=0",
        "cdi:nvidia.com/gpu/x=0",  # a class holds no '/'
        "cdi:1vendor/gpu=0",  # vendor starts with a letter
        "cdi:nvidia.com-/gpu=0",  # and ends with a letter or digit
        "cdi:nvidia.com/gpu=-0",  # a name starts with a letter or digit
        "cdi:nvidia.com/gpu=0:",  # and ends with one
        "cdi:nvidia.com/gpu=0;rm -rf /",
        "cdi:nvidia.com/gpu=0 1",
        "cdi:nvidia.com/gpu=0,,1",
        "cdi:nvidia.com/gpu=\u0661",  # ASCII only
        "cdi:nvidia.com/gpu=0\nnvidia.com/gpu=1",
        "cdi:nvidia.com/gpu=" + ",".join(str(i) for i in range(MAX_GPUS + 1)),
        "cdi:nvidia.com/gpu=" + "0" * 5_000,
        "CDI:nvidia.com/gpu=all",
    ],
)
def test_a_cdi_name_that_is_not_vendor_class_name_is_bad_input(text: str) -> None:
    with pytest.raises(InputError, match=r"^--gpus .*(vendor/class=name|cdi:nvidia.com/gpu=all)") as caught:
        GpuRequest.parse(text)
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    assert "\n" not in caught.value.message and len(caught.value.message) < 500


# What the CDI specification forbids (SPEC.md "Kind": the vendor a DNS subdomain of at most 253
# characters, the class at most 63) though the reference parser's character rules admit it: each
# would be sent to the engine and refused there (exit 3), so each is refused here (exit 2).
SPEC_FORBIDS = [
    "nvidia..com/gpu=0",  # an empty DNS label
    "nvidia.com./gpu=0",  # an empty last label
    "nvidia.-com/gpu=0",  # a label starts with a letter or digit
    "nvidia-.com/gpu=0",  # and ends with one
    "nvi_dia.com/gpu=0",  # a DNS label holds no '_'
    "nvidia." + "a" * 64 + "/gpu=0",  # a label of 64 characters
    "n" + ".a" * 127 + "/gpu=0",  # a vendor of 255 characters
    "nvidia.com/g" + "p" * 63 + "=0",  # a class of 64 characters
]
# ... and what the limits still admit
SPEC_ADMITS = [
    "nvidia." + "a" * 63 + "/gpu=0",
    "n" + ".a" * 126 + "/gpu=0",  # 253 characters
    "nvidia.com/g" + "p" * 62 + "=0",  # 63 characters
    "Vendor-1.example/Class_x.1=dev_0:1",
]


@pytest.mark.parametrize("name", SPEC_FORBIDS)
def test_a_cdi_name_the_specification_forbids_is_bad_input(name: str) -> None:
    assert not cdi.is_qualified_name(name)
    with pytest.raises(InputError, match=r"^--gpus .*vendor/class=name") as caught:
        GpuRequest.parse(cdi.CDI_PREFIX + name)
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    # nor may a report record one
    assert safetypes.GpuText.__metadata__[0].problem(cdi.CDI_PREFIX + name) is not None


@pytest.mark.parametrize("name", SPEC_ADMITS)
def test_a_cdi_name_at_the_specifications_limits_is_admitted(name: str) -> None:
    assert GpuRequest.parse(cdi.CDI_PREFIX + name).cdi_devices == (name,)
    assert safetypes.GpuText.__metadata__[0].problem(cdi.CDI_PREFIX + name) is None


def smi(out: str, rc: int = 0) -> Any:
    return lambda *a, **k: subprocess.CompletedProcess(a, rc, out, "")


# the two GPUs of tests/fixtures/cdi's specs, as `nvidia-smi --query-gpu=index,uuid` lists them
SPECS = REPO / "tests" / "fixtures" / "cdi"
GPU0, GPU1 = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "GPU-9d6a7b3e-2f1c-4e0a-8b5d-1c2e3f4a5b6c"
SMI = f"0, {GPU0}\n1, {GPU1}\n"


@pytest.mark.parametrize(
    ("strategy", "names"),
    [
        ("index", ("nvidia.com/gpu=0", "nvidia.com/gpu=1")),
        ("uuid", (f"nvidia.com/gpu={GPU0}", f"nvidia.com/gpu={GPU1}")),
    ],
)
def test_each_gpu_of_a_cdi_all_is_pinned_by_the_name_its_spec_gives_it(
    strategy: str, names: tuple[str, ...]
) -> None:
    """`nvidia-ctk cdi generate --device-name-strategy=uuid` defines no `nvidia.com/gpu=0`: a pass
    pinned to one GPU names it GPU-<uuid>, as the spec does, or the engine refuses it."""
    every = GpuRequest.parse("cdi:nvidia.com/gpu=all")
    dirs = (str(SPECS / strategy),)
    assert spec_device_names(dirs, "nvidia.com/gpu") is not None
    devices = runner_devices(every, {}, smi(SMI), lambda: dirs)
    assert devices == names
    assert all(cdi.device_of(n) in (spec_device_names(dirs, "nvidia.com/gpu") or ()) for n in names)
    for device in names:
        (request,) = CheckPass.one_gpu(device).gpus.device_requests()
        assert request["Driver"] == "cdi" and request["DeviceIDs"] == [device]
    # a spec of both strategies names each GPU twice: one name each, by index
    both = (str(SPECS / "index"), str(SPECS / "uuid"))
    assert runner_devices(every, {}, smi(SMI), lambda: both) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")


def test_gpus_a_cdi_spec_does_not_name_are_not_pinned(tmp_path: Path) -> None:
    """No readable spec, or one naming some GPU none of nvidia-ctk's ways: the devices are unknown
    (one cell at a time on all of them), never a name the engine would refuse."""
    every = GpuRequest.parse("cdi:nvidia.com/gpu=all")
    assert runner_devices(every, {}, smi(SMI), lambda: (str(tmp_path),)) is None
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices: [{name: '0'}, {name: all}]\n")
    assert runner_devices(every, {}, smi(SMI), lambda: (str(tmp_path),)) is None  # GPU 1 unnamed
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices: [{name: gpu0}, {name: gpu1}]\n")
    assert runner_devices(every, {}, smi(SMI), lambda: (str(tmp_path),)) == (
        "nvidia.com/gpu=gpu0",
        "nvidia.com/gpu=gpu1",
    )
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices: [{name: '0'\n")  # broken
    assert runner_devices(every, {}, smi(SMI), lambda: (str(tmp_path),)) is None
    assert runner_devices(every, {}, smi("0\n1\n"), lambda: (str(SPECS / "uuid"),)) is None  # no uuids


def test_runner_devices_of_a_cdi_request() -> None:
    # explicit names: the names (each pins as a CDI request of its own)
    two = GpuRequest.parse("cdi:nvidia.com/gpu=0,1")
    assert runner_devices(two) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert two.held(runner_devices(two)) == 2
    # NVIDIA's all: a name per GPU of a local engine's host, as its spec names it (by index here)
    every = GpuRequest.parse("cdi:nvidia.com/gpu=all")
    by_index = lambda: (str(SPECS / "index"),)  # noqa: E731
    assert runner_devices(every, {}, smi(SMI), by_index) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")
    assert runner_devices(every, {}, smi("", 9), by_index) is None
    assert runner_devices(every, {"DOCKER_HOST": "tcp://gpu-box:2376"}, smi(SMI), by_index) is None
    # another vendor's all is not nvidia-smi's to count
    assert runner_devices(GpuRequest.parse("cdi:vendor.example/gpu=all"), {}, smi(SMI), by_index) is None
    assert every.held(None) is None


def test_a_cdi_device_pins_as_a_cdi_request() -> None:
    one = CheckPass.one_gpu("nvidia.com/gpu=1").gpus
    assert one == GpuRequest("cdi:nvidia.com/gpu=1", 1, cdi_devices=("nvidia.com/gpu=1",))
    assert one.device_requests()[0]["Driver"] == "cdi"
    hook = CheckPass.one_gpu("1").gpus  # an nvidia-smi index stays a hook request
    assert hook.device_requests()[0]["DeviceIDs"] == ["1"] and hook.device_requests()[0]["Driver"] == ""


@pytest.mark.parametrize(
    "gpus",
    [
        "cdi:gpu=0",
        "cdi:nvidia.com/gpu=0;reboot",
        "cdi:nvidia.com/gpu",
        "cdi:nvidia..com/gpu=0",  # the specification forbids it; the engine is never asked
        "cdi:nvidia.com/" + "g" * 64 + "=0",
    ],
)
def test_verify_with_a_bad_cdi_name_is_one_line_exit_2_and_starts_nothing(
    gpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an engine that is asked anything answers "unreachable" (exit 3): exit 2 shows none was asked
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.chdir(tmp_path)
    result = run_cli("verify", "imagekit-test/none:latest", "--gpus", gpus)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("imagekit: error: --gpus ") and result.stderr.count("\n") == 1
    assert "vendor/class=name" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no state dir, no log


@pytest.mark.parametrize(
    ("text", "count", "ids", "requested"),
    [("all", -1, (), True), ("none", 0, (), False), ("2", 2, (), True), ("device=0,1", 2, ("0", "1"), True)],
)
def test_gpu_request_parsing(text: str, count: int, ids: tuple[str, ...], requested: bool) -> None:
    request = GpuRequest.parse(text)
    assert (request.count, request.device_ids, request.requested) == (count, ids, requested)
    requests = request.device_requests()
    if requested:
        (device_request,) = requests
        assert device_request["Capabilities"] == [["gpu"]]
        assert device_request["Count"] == (0 if ids else count) and device_request["DeviceIDs"] == list(ids)
    else:
        assert requests == []


@pytest.mark.parametrize(
    "text",
    [
        "everything",
        "device=",
        "device=0;rm",
        "-2",
        "1" * 5_000,
        "\u0661\u0662",
        "12345",
        "device=" + "0," * 200,
    ],
)
def test_bad_gpu_request(text: str) -> None:
    with pytest.raises(InputError, match="--gpus") as caught:
        GpuRequest.parse(text)
    assert len(caught.value.message) < 200  # a 5,000-digit count is neither converted nor repeated
