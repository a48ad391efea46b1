"""The front-end entrypoint's Jupyter argument allow-list, run for real as a non-root user with a
stand-in `jupyter-lab` that records what it was started with (no Jupyter, no engine)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.render.contract import FRONTEND_FILES

REFUSED = 64
NOBODY = 65534


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A directory the non-root user can reach (pytest's own tmp_path sits below a 0700 one)."""
    if shutil.which("setpriv") is None or os.getuid() != 0:
        pytest.fail("these tests start the entrypoint as a non-root user through setpriv, as root")
    root = Path(tempfile.mkdtemp(prefix="imagekit-entrypoint-"))
    try:
        (root / "bin").mkdir()
        recorder = root / "bin" / "jupyter-lab"
        recorder.write_text(
            '#!/bin/sh\nprintf "%s\\n" "$@" > "$IMAGEKIT_TEST_ARGS"\nenv > "$IMAGEKIT_TEST_ENV"\n'
        )
        shutil.copy(FRONTEND_FILES / "entrypoint.sh", root / "entrypoint.sh")
        for path in (root, root / "bin", recorder, root / "entrypoint.sh"):
            path.chmod(0o777 if path.is_dir() else 0o755)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_jupyter(sandbox: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": f"{sandbox / 'bin'}:/usr/bin:/bin",
        "HOME": str(sandbox),
        "IMAGEKIT_STATE_DIR": str(sandbox / "state"),
        "JUPYTER_TOKEN": "t" * 48,
        "IMAGEKIT_TEST_ARGS": str(sandbox / "args"),
        "IMAGEKIT_TEST_ENV": str(sandbox / "env"),
        **env,
    }
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         "sh", str(sandbox / "entrypoint.sh"), "start-jupyter", *args],
        env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


WEAKENING = [
    "--ServerApp.token=",
    "--IdentityProvider.token=",
    "--PasswordIdentityProvider.hashed_password=x",
    "--ServerApp.disable_check_xsrf=True",
    "--ServerApp.tornado_settings={'disable_check_xsrf': True}",
    "--ServerApp.identity_provider_class=jupyter_server.auth.identity.IdentityProvider",
    "--ServerApp.authorizer_class=x",
    "--config=/workspace/jupyter_server_config.py",
    "--ServerApp.allow_remote_access=True",
    "--ServerApp.ip=0.0.0.0",
    "--debug=1",
    "notebook.ipynb",
    "--ServerApp.base_url",  # its value would come as the next, unchecked argument
]


@pytest.mark.parametrize("argument", WEAKENING)
def test_every_argument_off_the_allow_list_is_refused_before_the_server_starts(
    sandbox: Path, argument: str
) -> None:
    done = start_jupyter(sandbox, argument)
    assert done.returncode == REFUSED, done.stderr
    assert "refusing the Jupyter argument" in done.stderr
    assert not (sandbox / "args").exists()


def test_allowed_arguments_reach_the_server_and_config_comes_only_from_the_image(sandbox: Path) -> None:
    hostile = sandbox / "hostile-config"
    done = start_jupyter(
        sandbox, "--ServerApp.base_url=/team/", "--debug",
        JUPYTER_CONFIG_DIR=str(hostile), JUPYTER_CONFIG_PATH=str(hostile),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = (sandbox / "args").read_text().splitlines()
    assert args[-2:] == ["--ServerApp.base_url=/team/", "--debug"]
    env = dict(line.split("=", 1) for line in (sandbox / "env").read_text().splitlines() if "=" in line)
    assert env["JUPYTER_CONFIG_DIR"] == str(sandbox / "state" / "jupyter-config")
    assert "JUPYTER_CONFIG_PATH" not in env
    assert env["JUPYTERLAB_SETTINGS_DIR"] == f"{sandbox}/.jupyter/lab/user-settings"
    assert "ignoring JUPYTER_CONFIG_DIR" in done.stderr
