"""The offline demo's front ends for real: JupyterLab and SSH images built FROM the demo cell,
verified by `imagekit verify` (their own checks on loopback, no GPU), two containers of one SSH image
with their own host keys, and no secret anywhere in an image's history, labels or environment."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import DEMO_CELL

JUPYTER, SSH = f"{DEMO_CELL}-jupyter", f"{DEMO_CELL}-ssh"
# What each server logs once it accepts connections (sshd -e; Jupyter Server's start banner).
SSHD_READY = r"Server listening on \S+ port 2222"
JUPYTER_READY = r"is running at"


def image_of(demo: Path, cell: str) -> str:
    report = json.loads((demo / ".imagekit" / "report.json").read_text())
    (found,) = [c["image_id"] for c in report["cells"] if c["id"] == cell]
    return str(found)


@contextmanager
def started(image: str, environment: dict[str, str], ready: str) -> Iterator[DockerContainer]:
    """The image as a user runs it (its entrypoint and default command), no network, once its log
    says `ready` (a regular expression); removed after. testcontainers starts and waits; Ryuk is
    off (TESTCONTAINERS_RYUK_DISABLED), so the removal here is the only clean-up."""
    container = DockerContainer(
        image,
        env=environment,
        labels={TEST_LABEL: RUN_ID},
        network_mode="none",
        network_disabled=True,
        cap_drop=["ALL"],
    ).waiting_for(LogMessageWaitStrategy(re.compile(ready)).with_startup_timeout(60))
    try:
        container.start()  # returns once `ready` is logged; raises if the container exits first
        yield container
    finally:
        container.stop()


def run_in(container: DockerContainer, command: list[str]) -> str:
    return container.exec(command).output.decode("utf-8", "replace")


def logs_of(container: DockerContainer) -> str:
    stdout, stderr = container.get_logs()
    return (stdout + stderr).decode("utf-8", "replace")


def wait_for_file(container: DockerContainer, path: str) -> str:
    for _ in range(60):
        out = run_in(container, ["sh", "-c", f"cat {path} 2>/dev/null || true"])
        if out.strip():
            return out
        time.sleep(0.5)
    raise AssertionError(f"{path} never appeared: {logs_of(container)[-2000:]}")


def test_the_front_ends_pass_their_checks_without_a_gpu(demo: Path) -> None:
    done = imagekit("verify", "--matrix", "matrix.yaml", "--only", "*-jupyter", "--only", "*-ssh",
                    "--gpus", "none", "--json", cwd=demo)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    results = {r["target"]: r for r in json.loads(done.stdout[done.stdout.index("[\n") :])}
    assert set(results) == {JUPYTER, SSH}
    for cell, result in results.items():
        assert result["verdict"] == "checked", (cell, result.get("error"))
        checks = {c["name"]: c for c in result["checks"]}
        # the cell's own checks still run (torch, the CPU GEMM), through the front end's entrypoint
        assert checks["torch"]["status"] == "pass" and checks["gemm_cpu"]["status"] == "pass"
        for name in (
            "user",
            "init",
            "workspace",
            "no_baked_secrets",
            "server_user",
            "healthcheck",
            "image_secrets",
        ):
            assert checks[name]["status"] == "pass", (cell, checks[name])
    jupyter = {c["name"]: c for c in results[JUPYTER]["checks"]}
    assert jupyter["jupyter_auth"]["status"] == "pass"  # 200 with the token, 403 without
    assert '"status_without_token": 403' in (jupyter["jupyter_auth"]["actual"] or "")
    ssh = {c["name"]: c for c in results[SSH]["checks"]}
    assert ssh["ssh_login"]["status"] == "pass" and ssh["ssh_password_refused"]["status"] == "pass"


def test_two_containers_of_one_ssh_image_have_their_own_host_keys(demo: Path) -> None:
    image = image_of(demo, SSH)
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv1oqCE9OVnJv2b7wCqfqbm7sV3fC9YvGq4GfJkTKcA test@imagekit"
    fingerprints = []
    for _ in range(2):
        with started(image, {"SSH_AUTHORIZED_KEYS": key}, SSHD_READY) as container:
            public = wait_for_file(container, "/var/lib/imagekit-frontend/ssh/ssh_host_ed25519_key.pub")
            fingerprints.append(public.split()[1])
            assert run_in(container, ["sh", "-c", "ls /etc/ssh/ssh_host_* 2>/dev/null || true"]).strip() == ""
    assert fingerprints[0] != fingerprints[1], "two containers of one image must not share a host key"


def test_no_secret_in_any_images_history_labels_or_environment(demo: Path, api: docker.APIClient) -> None:
    token = secrets.token_hex(24)
    with started(image_of(demo, JUPYTER), {"JUPYTER_TOKEN": token}, JUPYTER_READY) as container:
        wait_for_file(container, "/var/lib/imagekit-frontend/jupyter/jpserver-*.json")
        assert token not in logs_of(container), "a given token is never printed"
    with started(image_of(demo, JUPYTER), {}, JUPYTER_READY) as container:  # no token given: one is generated
        wait_for_file(container, "/var/lib/imagekit-frontend/jupyter/jpserver-*.json")
        generated = re.findall(r"\b[0-9a-f]{48}\b", logs_of(container))
    assert len(set(generated)) == 1, "a generated token is printed once"
    for cell in (DEMO_CELL, JUPYTER, SSH):
        image = api.inspect_image(image_of(demo, cell))
        config = image["Config"]
        text = "\n".join(
            [*(config.get("Env") or ()), *(f"{k}={v}" for k, v in (config.get("Labels") or {}).items())]
            + [str(step.get("CreatedBy")) for step in api.history(image["Id"])]
        )
        for secret in (
            token,
            generated[0],
            "BEGIN OPENSSH PRIVATE KEY",
            "JUPYTER_TOKEN=",
            "ssh-ed25519 AAAA",
        ):
            assert secret not in text, (cell, secret)


def test_a_front_end_records_the_image_of_its_parent_cell(demo: Path) -> None:
    report = json.loads((demo / ".imagekit" / "report.json").read_text())
    cells = {c["id"]: c for c in report["cells"]}
    for front_end in (JUPYTER, SSH):
        assert cells[front_end]["base_digest"] == cells[DEMO_CELL]["image_id"], front_end


def test_no_change_rebuilds_keep_every_tag_on_the_image_its_own_cell_built(
    demo: Path, api: docker.APIClient
) -> None:
    """Every image built FROM a cell (the front ends' build stages here) inherits the cell's labels
    and is newer: a no-change rebuild once moved the cell's tags onto such a stage. Rebuilt twice,
    with the report and without it (a fresh state directory on the same engine)."""
    first = {c["id"]: c for c in json.loads((demo / ".imagekit" / "report.json").read_text())["cells"]}
    for state in (".imagekit", ".imagekit-fresh"):
        done = imagekit(
            "build", "--matrix", "matrix.yaml", "--state-dir", state,
            "--label", f"{TEST_LABEL}={RUN_ID}", cwd=demo, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        again = {c["id"]: c for c in json.loads((demo / state / "report.json").read_text())["cells"]}
        for cell, record in first.items():
            assert again[cell]["status"] == "skipped", (state, cell, again[cell])
            assert again[cell]["image_id"] == record["image_id"], (state, cell)
            for tag in record["tags"]:
                assert api.inspect_image(tag)["Id"] == record["image_id"], (state, cell, tag)
