"""``verify --gpus cdi:...`` on a real engine with CDI on: a CDI spec written here gives the check
container a fake GPU (a device node, NVIDIA's environment, for one device a mounted nvidia-smi), as
the fake NVIDIA hook of test_verify does for ``--gpus all``. The probe's visibility rules judge what
CDI injected the same way, and the engine's refusals read as one line.

The engine: the one under test (DOCKER_HOST) when it has CDI on and is local (scripts/engine.sh
turns CDI on; the spec goes into one of its spec dirs and is removed after). An engine with CDI
off (one started before engine.sh did that) is not restarted here: a private dockerd of the same
build, CDI on and a spec dir of its own, stands in for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.errors import APIError

from imagekit.core.naming import VERIFY_RUN_LABEL
from imagekit.probe.results import GPU_MISSING_CAUSE
from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID
from testbed.private_engine import private_engine

# check_image: python, the check script, a CUDA 12.1 devel cell's labels, no torch, no CUDA
from tests.integration.test_verify import check_image  # noqa: F401  (a fixture)

# a vendor of this run's own: several runs (or a real nvidia.com spec) never meet
KIND = f"imagekit-test-{RUN_ID}.example/gpu"
SPEC_NAME = f"imagekit-test-{RUN_ID}.json"
# what the probe's nvidia-smi queries read (index, name, driver, memory, compute capability), -L
# and the banner: one GPU
FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, NVIDIA Fake CDI GPU, 550.54.15, 81559, 9.0" ;;
  -L) echo "GPU 0: NVIDIA Fake CDI GPU (UUID: GPU-00000000-0000-0000-0000-0000000000c1)" ;;
  *) echo "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |" ;;
esac
"""


def node(index: int) -> dict[str, str]:
    """/dev/nvidiaN in the container, /dev/null on the host: a device node that exists."""
    return {"path": f"/dev/nvidia{index}", "hostPath": "/dev/null"}


def spec_document(smi: Path) -> dict[str, Any]:
    """A CDI spec as nvidia-ctk writes one, in small: per device its node and NVIDIA_VISIBLE_DEVICES
    (the variable NVIDIA's hook sets, which the probe reads); ``smi`` also mounts an nvidia-smi that
    lists one GPU. Version 0.6.0: what dockerd 26's CDI library reads."""
    mount = {"hostPath": str(smi), "containerPath": "/usr/bin/nvidia-smi", "options": ["ro", "bind"]}

    def device(name: str, visible: str, *nodes: int, **more: Any) -> dict[str, Any]:
        edits = {"env": [f"NVIDIA_VISIBLE_DEVICES={visible}"], "deviceNodes": [node(i) for i in nodes]}
        return {"name": name, "containerEdits": {**edits, **more}}

    return {
        "cdiVersion": "0.6.0",
        "kind": KIND,
        "devices": [
            device("0", "0", 0),
            device("1", "1", 1),
            device("all", "0,1", 0, 1),
            device("smi", "0", 0, mounts=[mount]),
        ],
    }


@dataclass(frozen=True)
class CdiEngine:
    host: str  # DOCKER_HOST for it
    spec_dir: Path
    of_record: bool  # the engine under test itself, not a private stand-in

    def client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.host, version="auto", timeout=60)


def _wait_until_resolvable(engine: CdiEngine, image: str) -> None:
    """The engine's CDI cache picks a new spec up from its directory watch, soon but not at once."""
    client = engine.client()
    deadline = time.monotonic() + 20
    try:
        while True:
            host_config = client.create_host_config(
                network_mode="none",
                device_requests=[docker.types.DeviceRequest(driver="cdi", device_ids=[f"{KIND}=0"])],
            )
            created = client.create_container(image, ["true"], host_config=host_config)
            try:
                client.start(created["Id"])
                return
            except APIError as exc:
                if "unresolvable CDI devices" not in str(exc) or time.monotonic() > deadline:
                    raise
            finally:
                client.remove_container(created["Id"], force=True)
            time.sleep(0.2)
    finally:
        client.close()


def _spec_dir(dirs: list[str]) -> tuple[Path, list[Path]]:
    """The engine's spec dir to write in (the run-time one first), and the directories made for it."""
    ordered = sorted(dirs, key=lambda d: "/run/" not in d)
    for directory in map(Path, ordered):
        made = [p for p in (*reversed(directory.parents), directory) if not p.exists()]
        with contextlib.suppress(OSError):
            directory.mkdir(parents=True, exist_ok=True)
            if os.access(directory, os.W_OK):
                return directory, made
    pytest.fail(f"none of the engine's CDI spec dirs {dirs} can be written here (run the tests as root)")


@pytest.fixture(scope="module")
def cdi_engine(api: docker.APIClient, check_image: str) -> Iterator[CdiEngine]:  # noqa: F811
    hooks = Path(tempfile.mkdtemp(prefix="ikcdi-"))
    smi = hooks / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    spec = json.dumps(spec_document(smi))
    dirs = api.info().get("CDISpecDirs") or []
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if dirs and host.startswith("unix://"):
            directory, made = _spec_dir(dirs)
            try:
                (directory / SPEC_NAME).write_text(spec)
                engine = CdiEngine(host, directory, of_record=True)
                _wait_until_resolvable(engine, check_image)
                yield engine
            finally:
                (directory / SPEC_NAME).unlink(missing_ok=True)
                for path in reversed(made):
                    with contextlib.suppress(OSError):  # not empty: something else wrote there since
                        path.rmdir()
        else:
            root = hooks / "engine"  # a short path: the socket's must fit 108 bytes
            specs = hooks / "cdi"
            specs.mkdir()
            (specs / SPEC_NAME).write_text(spec)
            config = {"features": {"cdi": True}, "cdi-spec-dirs": [str(specs)]}
            with private_engine(root, (check_image,), config=config) as private:
                engine = CdiEngine(private.host, specs, of_record=False)
                _wait_until_resolvable(engine, check_image)
                yield engine
    finally:
        for path in sorted(hooks.rglob("*"), reverse=True):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        hooks.rmdir()


def verify(engine: CdiEngine, cwd: Path, *args: str) -> tuple[Any, str]:
    done = imagekit("verify", *args, "--json", cwd=cwd, env={"DOCKER_HOST": engine.host})
    results = json.loads(done.stdout[done.stdout.index("[\n") :]) if "[\n" in done.stdout else None
    return (done.returncode, results), done.stderr


def environment_of(result: dict[str, Any]) -> dict[str, Any]:
    check = next(c for c in result["checks"] if c["name"] == "environment")
    detail = check["detail"]
    return dict(json.loads(detail) if isinstance(detail, str) else detail)


def leftovers(engine: CdiEngine) -> list[str]:
    client = engine.client()
    try:
        return [c["Id"] for c in client.containers(all=True, filters={"label": VERIFY_RUN_LABEL})]
    finally:
        client.close()


def test_a_cdi_device_is_requested_and_judged_by_the_probes_rules(
    cdi_engine: CdiEngine,
    check_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    (rc, results), stderr = verify(cdi_engine, tmp_path, check_image, "--gpus", f"cdi:{KIND}=0")
    assert rc == 1 and results, stderr
    (result,) = results
    # CDI gave the container the device and its NVIDIA_VISIBLE_DEVICES (the image's ENV says all)
    assert result["gpus"] == f"cdi:{KIND}=0" and result["devices"] == [f"{KIND}=0"]
    environment = environment_of(result)
    assert environment["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert "NVIDIA device nodes present: /dev/nvidia0" in environment["gpu_requested_by"]
    # requested, not visible (no driver behind the node): failed, as with the fake NVIDIA hook
    assert result["verdict"] == "failed" and result["gpu_requested"] and not result["gpu_visible"]
    failed = [c for c in result["checks"] if c["status"] == "fail"]
    assert failed and all(c["cause"] for c in failed), "every failure names its likely cause"
    assert any(GPU_MISSING_CAUSE in (c["cause"] or "") for c in failed)
    assert "nvidia-smi" in json.dumps(failed).lower()
    assert leftovers(cdi_engine) == []


def test_an_nvidia_smi_that_cdi_mounts_makes_the_gpu_visible(
    cdi_engine: CdiEngine,
    check_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    (rc, results), stderr = verify(cdi_engine, tmp_path, check_image, "--gpus", f"cdi:{KIND}=smi")
    assert rc == 1 and results, stderr
    (result,) = results
    # the rule: visible when nvidia-smi lists a GPU; no torch here, so the GPU checks run and fail
    # for that, never for a missing GPU
    assert result["gpu_requested"] and result["gpu_visible"] and result["verdict"] == "failed"
    causes = [c["cause"] or "" for c in result["checks"] if c["status"] == "fail"]
    assert causes and not any(GPU_MISSING_CAUSE in cause for cause in causes)
    assert "nvidia-smi injected at /usr/bin/nvidia-smi" in environment_of(result)["gpu_requested_by"]


def test_cdi_devices_are_shared_out_one_per_cell(
    cdi_engine: CdiEngine,
    check_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    client = cdi_engine.client()
    images = [f"{check_image}-cdi-{n}" for n in ("a", "b")]
    try:
        for image in images:
            repository, _, tag = image.rpartition(":")
            client.tag(check_image, repository, tag)
        args = (*images, "--gpus", f"cdi:{KIND}=0,1", "--jobs", "2")
        (rc, results), stderr = verify(cdi_engine, tmp_path, *args)
        assert rc == 1 and results, stderr
        assert [r["target"] for r in results] == images
        # each cell on a CDI device of its own, and the container saw that one
        assert sorted(r["devices"][0] for r in results) == [f"{KIND}=0", f"{KIND}=1"]
        for result in results:
            assert environment_of(result)["NVIDIA_VISIBLE_DEVICES"] == result["devices"][0].rpartition("=")[2]
        (rc, every), stderr = verify(cdi_engine, tmp_path, check_image, "--gpus", f"cdi:{KIND}=all")
        assert rc == 1 and every, stderr
        assert environment_of(every[0])["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    finally:
        for image in images:
            with contextlib.suppress(APIError):
                client.remove_image(image)
        client.close()
    assert leftovers(cdi_engine) == []


def test_an_unknown_cdi_device_is_one_line(
    cdi_engine: CdiEngine,
    check_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    (rc, _), stderr = verify(cdi_engine, tmp_path, check_image, "--gpus", f"cdi:{KIND}=7")
    assert rc == 3, stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("imagekit: error: --gpus ") and f"define no {KIND}=7" in line
    assert str(cdi_engine.spec_dir) in line and "nvidia-ctk cdi list" in line
    assert leftovers(cdi_engine) == []


def test_gpus_all_on_an_engine_with_cdi_and_no_nvidia_hook_says_what_to_pass(
    cdi_engine: CdiEngine,
    check_image: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    (rc, _), stderr = verify(cdi_engine, tmp_path, check_image, "--gpus", "all")
    assert rc == 3, stderr
    (line,) = stderr.strip().splitlines()
    assert "has no NVIDIA hook" in line and "pass --gpus cdi:nvidia.com/gpu=all" in line, line
    assert 'could not select device driver ""' in line  # the engine's own words, kept
    assert leftovers(cdi_engine) == []
