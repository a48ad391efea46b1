"""Where things live inside every imagekit image, as the templates, the checks and Kubernetes read
them: the pip constraints named by every variable pip and uv read, a front end's non-root user and
ports, and the front-end files a build context carries."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from imagekit.render import contract
from imagekit.render.contract import (
    CONSTRAINT_ENV,
    FRONTEND,
    FRONTEND_FILES,
    frontend_files,
    packaged_check_script,
    packaged_frontend_check,
)


def test_every_variable_pip_and_uv_read_for_installs_and_isolated_builds_names_the_constraints() -> None:
    # pip 26.2 applies PIP_CONSTRAINT to installs only: an isolated build needs PIP_BUILD_CONSTRAINT
    assert set(CONSTRAINT_ENV) == {
        "PIP_CONSTRAINT",
        "PIP_BUILD_CONSTRAINT",
        "UV_CONSTRAINT",
        "UV_BUILD_CONSTRAINT",
    }
    assert contract.CONSTRAINTS_FILE.startswith("/") and contract.VENV.startswith("/")


def test_a_front_end_runs_as_a_numeric_non_root_user_on_unprivileged_ports() -> None:
    assert FRONTEND.uid >= 10000 and FRONTEND.uid != 65532  # checkov CKV_K8S_40; not distroless' nonroot
    assert {FRONTEND.port("jupyter"), FRONTEND.port("ssh")} == {8888, 2222}
    assert all(FRONTEND.port(f) >= 1024 for f in ("jupyter", "ssh"))  # sshd runs as the user
    with pytest.raises(KeyError):
        FRONTEND.port("vnc")


def test_the_front_end_files_are_every_shipped_file_under_its_context_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = dict(frontend_files())
    assert {"frontend/entrypoint.sh", "frontend/healthcheck.py", "frontend/sshd_config"} <= set(shipped)
    assert all(path.parent == FRONTEND_FILES and path.is_file() for path in shipped.values())
    # what a checkout may hold beside them never goes into an image
    for name in ("entrypoint.sh", ".swp", "healthcheck.cpython-311.pyc"):
        (tmp_path / name).write_text("x")
    (tmp_path / "__pycache__").mkdir()
    monkeypatch.setattr(contract, "FRONTEND_FILES", tmp_path)
    assert frontend_files() == (("frontend/entrypoint.sh", tmp_path / "entrypoint.sh"),)


def test_the_packaged_checks_are_the_probes_zipapps_each_with_its_entry() -> None:
    # the check's entry is the probe's report (it runs the checks and prints the document)
    entries = (
        (packaged_check_script(), "imagekit_probe.run"),
        (packaged_frontend_check(), "imagekit_probe.frontends.run"),
    )
    for path, entry in entries:
        with zipfile.ZipFile(path) as bundle:
            main = bundle.read("__main__.py").decode()
        assert f"from {entry} import main" in main, (path, main)
    assert packaged_check_script() != packaged_frontend_check()
