"""The verification harness against the real engine: real torch without a GPU, the GPU request
path through a test engine with a fake NVIDIA hook, timeouts, Ctrl-C, and no leftovers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import junitparser
import pytest

from imagekit.core.naming import VERIFY_RUN_LABEL as VERIFY_LABEL
from imagekit.render.contract import CHECK_SCRIPT_PATH, packaged_check_script
from testbed.fake_gpu_engine import fake_gpu_engine
from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import DEMO_CELL


def leftovers(api: docker.APIClient) -> list[str]:
    return [c["Id"] for c in api.containers(all=True, filters={"label": VERIFY_LABEL})]


def build_image(api: docker.APIClient, tag: str, dockerfile: str, files: dict[str, bytes]) -> str:
    with tempfile.TemporaryDirectory() as context:
        for name, data in files.items():
            path = Path(context, name)
            path.write_bytes(data)
            path.chmod(0o755)
        Path(context, "Dockerfile").write_text(dockerfile)
        for line in api.build(
            path=context, tag=tag, rm=True, forcerm=True, decode=True, labels={TEST_LABEL: RUN_ID}
        ):
            if "error" in line:
                raise RuntimeError(line["error"])
    return tag


@pytest.fixture(scope="session")
def check_image(api: docker.APIClient, debian_python: str) -> str:
    """Python and the check script, labelled like a CUDA 12.1 devel cell; no torch, no CUDA."""
    labels = {
        "imagekit.check-script": CHECK_SCRIPT_PATH,
        "imagekit.torch": "2.1.2",
        "imagekit.cuda": "12.1",
        "imagekit.cudnn": "8",
        "imagekit.python": "3.11",
        "imagekit.flavour": "devel",
    }
    label_line = " ".join(f'{k}="{v}"' for k, v in labels.items())
    return build_image(
        api,
        f"imagekit-test/check:{RUN_ID}",
        f"FROM {debian_python}\nCOPY check.py {CHECK_SCRIPT_PATH}\nLABEL {label_line}\n"
        # what imagekit sets in an image of a CUDA wheel on a plain base
        "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility\n",
        {"check.py": packaged_check_script().read_bytes()},
    )


@pytest.fixture(scope="session")
def hang_image(api: docker.APIClient, busybox: str) -> str:
    """An image whose check never finishes: its python3 sleeps."""
    return build_image(
        api,
        f"imagekit-test/hang:{RUN_ID}",
        f'FROM {busybox}\nCOPY python3 /usr/bin/python3\nLABEL imagekit.check-script="{CHECK_SCRIPT_PATH}"\n',
        {"python3": b"#!/bin/sh\nexec sleep 3600\n"},
    )


def test_real_torch_without_gpu_is_checked_never_validated(demo: Path, api: docker.APIClient) -> None:
    junit = demo / "verify.xml"
    done = imagekit(
        "verify", "--matrix", "matrix.yaml", "--only", DEMO_CELL, "--gpus", "none", "--junit", str(junit),
        "--json", cwd=demo,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
    assert result["verdict"] == "checked" and not result["gpu_requested"]
    checks = {c["name"]: c for c in result["checks"]}
    statuses = {c["status"] for c in result["checks"]}
    assert "fail" not in statuses or all(not c["required"] for c in result["checks"] if c["status"] == "fail")
    torch_checks = [c for name, c in checks.items() if name.startswith("torch")]
    assert torch_checks and all(c["status"] == "pass" for c in torch_checks if c["required"])
    cpu_gemm = [c for name, c in checks.items() if "gemm" in name and c["status"] == "pass"]
    assert cpu_gemm, "the CPU GEMM must really run against real torch"
    skipped = [c for c in result["checks"] if c["status"] == "skip"]
    assert skipped and all(
        "no GPU requested" in (c["reason"] or "") for c in skipped if c["name"] == "gemm_gpu"
    )
    assert not any(
        c["status"] == "pass" and c["name"] in ("gemm_gpu", "gemm_perf", "cuda_available", "nccl")
        for c in result["checks"]
    )

    report = json.loads((demo / ".imagekit" / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["id"] == DEMO_CELL]
    assert cell["verification"]["verdict"] == "checked"
    suites = list(junitparser.JUnitXml.fromfile(str(junit)))
    assert suites[0].tests == len(result["checks"]) and suites[0].failures == 0
    assert suites[0].skipped == len(skipped)
    assert leftovers(api) == []

    table = imagekit("report", cwd=demo)
    assert "checked without GPU" in table.stdout


def test_gpu_requested_on_an_engine_without_gpu_support_is_exit_3(demo: Path, api: docker.APIClient) -> None:
    before = (demo / ".imagekit" / "report.json").read_text()
    done = imagekit("verify", "--matrix", "matrix.yaml", "--only", DEMO_CELL, "--gpus", "all", cwd=demo)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("imagekit: error:") == 1
    if api.info().get("CDISpecDirs"):  # CDI on (scripts/engine.sh): what to pass instead
        assert "has no NVIDIA hook" in done.stderr and "--gpus cdi:nvidia.com/gpu=all" in done.stderr
    else:
        assert "no GPU support" in done.stderr and "nvidia-container-toolkit" in done.stderr
    assert leftovers(api) == []
    assert (
        json.loads((demo / ".imagekit" / "report.json").read_text())["cells"] == json.loads(before)["cells"]
    )


def test_gpu_request_path_through_a_fake_nvidia_hook(check_image: str, api: docker.APIClient) -> None:
    root = Path(tempfile.mkdtemp(prefix="ikgpu-", dir="/tmp"))
    root.rmdir()
    with fake_gpu_engine(root, (check_image,)) as engine:
        env = {"DOCKER_HOST": engine.host}
        done = imagekit("verify", check_image, "--gpus", "all", "--json", cwd=root.parent, env=env)
        assert done.returncode == 1, done.stdout + done.stderr
        assert engine.hook_calls() == ["prestart"], "the engine must call the NVIDIA hook as a prestart hook"
        (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
        assert result["verdict"] == "failed" and result["gpu_requested"] and not result["gpu_visible"]
        failed = [c for c in result["checks"] if c["status"] == "fail"]
        text = json.dumps(failed).lower()
        assert "nvidia-smi" in text and ("driver" in text or "runtime" in text)
        assert all(c["cause"] for c in failed), "every failure names its likely cause"
        environment = next(c for c in result["checks"] if c["name"].startswith("env"))
        assert "NVIDIA_VISIBLE_DEVICES" in json.dumps(environment) and '"all"' in json.dumps(environment)

        one = imagekit("verify", check_image, "--gpus", "device=0", "--json", cwd=root.parent, env=env)
        assert one.returncode == 1
        assert len(engine.hook_calls()) == 2

        # --jobs: each image on a GPU of its own, as the engine gave it (not as imagekit says)
        client = engine.client()
        images = [f"{check_image}-{n}" for n in ("a", "b", "c")]
        for image in images:
            repository, _, tag = image.rpartition(":")
            client.tag(check_image, repository, tag)
        seen_before = set(engine.containers_seen())
        jobs = imagekit(
            "verify", *images, "--gpus", "device=0,1", "--jobs", "2", "--json", cwd=root.parent, env=env
        )  # fmt: skip
        assert jobs.returncode == 1, jobs.stdout + jobs.stderr
        seen = [c for call, c in engine.containers_seen().items() if call not in seen_before]
        assert sorted(c["visible"] for c in seen) in (["0", "0", "1"], ["0", "1", "1"]), seen
        assert all("--skip" in c["args"] and "nccl,nccl_bandwidth" in c["args"] for c in seen)
        results = json.loads(jobs.stdout[jobs.stdout.index("[\n") :])
        assert [r["target"] for r in results] == images  # in the order asked, whatever finished first
        assert all(r["verdict"] == "failed" and len(r["devices"]) == 1 for r in results)  # no driver
        assert sorted(r["devices"][0] for r in results[:2]) == ["0", "1"]
        assert "GPU-seconds" in jobs.stderr
        for image in images:
            client.remove_image(image)
        assert client.containers(all=True, filters={"label": VERIFY_LABEL}) == []
        client.close()


def test_a_hanging_check_is_killed_at_the_timeout(
    hang_image: str, api: docker.APIClient, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = imagekit("verify", hang_image, "--gpus", "none", "--verify-timeout", "3", "--json", cwd=tmp_path)
    assert done.returncode == 1
    assert time.monotonic() - started < 30
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
    assert result["verdict"] == "failed" and "timed out after 3s" in result["error"]
    assert leftovers(api) == []


def test_ctrl_c_removes_the_check_container(hang_image: str, api: docker.APIClient, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "imagekit", "verify", hang_image, "--gpus", "none"],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not leftovers(api):
        assert time.monotonic() < deadline, "the check container never started"
        time.sleep(0.002)  # soon after create: Ctrl-C often lands before the create response
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert leftovers(api) == []


def test_an_image_without_python_fails_with_a_reason(
    api: docker.APIClient, busybox: str, tmp_path: Path
) -> None:
    image = build_image(
        api, f"imagekit-test/nopython:{uuid.uuid4().hex[:6]}-{RUN_ID}",
        f'FROM {busybox}\nLABEL imagekit.check-script="{CHECK_SCRIPT_PATH}"\n', {},
    )  # fmt: skip
    done = imagekit("verify", image, "--gpus", "none", cwd=tmp_path)
    assert done.returncode == 1
    assert "failed" in done.stdout and ("no JSON" in done.stdout or "refused" in done.stdout)
    assert leftovers(api) == []


@pytest.fixture(autouse=True)
def _no_leftovers_after(api: docker.APIClient) -> Iterator[None]:
    yield
    left = leftovers(api)
    for container in left:  # removed here so one leak fails one test, not every test after it
        api.remove_container(container, force=True, v=True)
    assert left == [], "a check container outlived its test"


def test_an_image_without_the_check_script_label_gets_the_script_injected(
    api: docker.APIClient, debian_python: str, tmp_path: Path
) -> None:
    """No imagekit labels at all: the script is put into the container (a directory the image
    lacks) and runs; the run yields the script's checks, not a refused container."""
    image = build_image(
        api, f"imagekit-test/unlabelled:{uuid.uuid4().hex[:6]}-{RUN_ID}", f"FROM {debian_python}\n", {}
    )
    done = imagekit("verify", image, "--gpus", "none", "--json", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert "refused" not in done.stdout + done.stderr
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
    assert result["error"] is None, result["error"]
    names = {check["name"] for check in result["checks"]}
    assert "python" in names or len(names) > 3, names
    assert result["verdict"] in ("checked", "failed")
    assert leftovers(api) == []


def test_the_shared_libraries_held_twice_are_read_from_the_image_without_a_gpu(
    api: docker.APIClient, debian_python: str, tmp_path: Path
) -> None:
    """libraries_once in a real container under --gpus none: libc copied once more is one duplicate;
    a hard link and a symlink to that copy are the same file, not more."""
    image = build_image(
        api,
        f"imagekit-test/dups:{uuid.uuid4().hex[:6]}-{RUN_ID}",
        f"FROM {debian_python}\nCOPY check.py {CHECK_SCRIPT_PATH}\n"
        "RUN cp -L /usr/lib/*-linux-gnu/libc.so.6 /opt/libc.so.6 && ln /opt/libc.so.6 /opt/hard.so.6 "
        "&& ln -s /opt/libc.so.6 /opt/link.so.6\n"
        f'LABEL imagekit.check-script="{CHECK_SCRIPT_PATH}"\n',
        {"check.py": packaged_check_script().read_bytes()},
    )
    done = imagekit("verify", image, "--gpus", "none", "--json", cwd=tmp_path)
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])
    (check,) = [c for c in result["checks"] if c["name"] == "libraries_once"]
    assert check["status"] == "pass", check
    duplicates = result["inventory"]["duplicates"]
    assert duplicates["count"] == 1, duplicates
    (libc,) = duplicates["libraries"]
    assert libc["soname"] == "libc.so.6" and len(libc["paths"]) == 2
    assert {p.split("/")[1] for p in libc["paths"]} == {"opt", "usr"}
    assert leftovers(api) == []
