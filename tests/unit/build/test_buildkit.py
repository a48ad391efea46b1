"""imagekit.build.buildkit without an engine: the index credentials' netrc and the store check."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest

from imagekit.build import buildkit
from imagekit.build.buildkit import Credential, pip_netrc
from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.safetypes import secret_env_name
from imagekit.core.text import redact

INDEX = Credential("artifactory.example.com", "ci-bot", "pip-index")
VALUE = "tok3n-Zq9!x"


def test_the_netrc_lives_only_while_the_run_does(tmp_path: Path) -> None:
    env = {secret_env_name("pip-index"): VALUE}
    with pip_netrc((INDEX,), {}, tmp_path, env) as netrc:
        assert netrc is not None
        assert netrc.read_text() == f"machine artifactory.example.com login ci-bot password {VALUE}\n"
        assert stat.S_IMODE(netrc.stat().st_mode) == 0o600
        assert stat.S_IMODE(netrc.parent.stat().st_mode) == 0o700
    assert not netrc.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), pip_netrc((INDEX,), {}, tmp_path, env):
        raise RuntimeError("a build failed")
    assert list(tmp_path.iterdir()) == []


def test_the_netrc_names_the_host_without_its_port(tmp_path: Path) -> None:
    # pip (requests) looks a URL's host name up in the netrc, never host:port
    on_a_port = Credential("127.0.0.1:8080", "ci-bot", "pip-index")
    with pip_netrc((on_a_port,), {}, tmp_path, {secret_env_name("pip-index"): VALUE}) as netrc:
        assert netrc is not None
        assert netrc.read_text() == f"machine 127.0.0.1 login ci-bot password {VALUE}\n"


def test_a_file_given_with_secret_wins_over_the_environment(tmp_path: Path) -> None:
    given = tmp_path / "token"
    given.write_text("from-file\n")
    with pip_netrc(
        (INDEX,), {"pip-index": given}, tmp_path / "state", {"IMAGEKIT_SECRET_PIP_INDEX": "env"}
    ) as n:
        assert n is not None and n.read_text().endswith("password from-file\n")


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, {}, "secret pip-index .* is not given: set IMAGEKIT_SECRET_PIP_INDEX or pass --secret"),
        ({"IMAGEKIT_SECRET_PIP_INDEX": "  "}, {}, "is not given"),
        (
            {"IMAGEKIT_SECRET_PIP_INDEX": "two words"},
            {},
            r"from \$IMAGEKIT_SECRET_PIP_INDEX holds white space",
        ),
        ({}, {"pip-index": Path("/nonexistent/token")}, "--secret pip-index=/nonexistent/token: cannot read"),
        (
            {"IMAGEKIT_SECRET_PIP_INDEX": "two7chr"},
            {},
            r"from \$IMAGEKIT_SECRET_PIP_INDEX is 7 characters long: imagekit masks it .* at least 8",
        ),
    ],
)
def test_a_missing_or_unusable_secret_stops_the_run_first(
    tmp_path: Path, env: dict[str, str], files: dict[str, Path], message: str
) -> None:
    with pytest.raises(InputError, match=message) as raised, pip_netrc((INDEX,), files, tmp_path, env):
        pytest.fail("no build may start")
    assert "two" not in raised.value.message and list(tmp_path.iterdir()) == []


def test_a_value_read_is_masked_in_everything_printed_from_then_on(tmp_path: Path) -> None:
    """Issue 45: a step that prints the netrc, pip, an error: the value shows as *** in each."""
    printed = f"password {VALUE} basic {base64.b64encode(f'ci-bot:{VALUE}'.encode()).decode()}"
    assert redact(printed) == printed
    with pip_netrc((INDEX,), {}, tmp_path, {secret_env_name("pip-index"): VALUE}):
        pass
    assert redact(printed) == "password *** basic ***"


def test_no_credentials_no_file(tmp_path: Path) -> None:
    with pip_netrc((), {}, tmp_path, {}) as netrc:
        assert netrc is None
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


class Engine:
    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    def info(self) -> dict[str, Any]:
        return self._info


def test_only_the_containerd_store_takes_what_buildx_writes() -> None:
    containerd = Engine({"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]})
    buildkit.engine_holds_oci(containerd)  # type: ignore[arg-type]
    overlay2 = Engine({"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]})
    with pytest.raises(EnvironmentProblem, match=r"containerd image store .* with overlay2: set"):
        buildkit.engine_holds_oci(overlay2)  # type: ignore[arg-type]
