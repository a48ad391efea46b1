"""Registry logins: IMAGEKIT_REGISTRY_USER/IMAGEKIT_REGISTRY_PASSWORD or the Docker config's ``auths``.

A login lives only in request headers (``imagekit.registry.transport``) and is never part of a
message or a record; its password is registered with ``imagekit.core.secret_values`` where it is
read, so that whatever echoes it (a registry's error, an engine's push) prints it masked.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.core import secret_values
from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.limits import DOCKER_CONFIG_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import parse_json

USER_ENV = "IMAGEKIT_REGISTRY_USER"
PASSWORD_ENV = "IMAGEKIT_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)  # repr never shows it: a dataclass in a traceback is printed

    def basic(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"


def docker_config_path() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


def find_credentials(
    registry: str, environ: Mapping[str, str] | None = None, *, environment_pair: bool = True
) -> Credentials | None:
    """The environment's pair first, then the Docker config's ``auths`` entry for ``registry``.

    The environment's pair names no host: it is the login of the registry imagekit publishes to
    (``--registry``). A caller that asks other registries (``pin-bases`` asks Docker Hub, nvcr.io
    and mirrors) passes ``environment_pair=False``, so that login is never sent to another host.

    The Docker config is read like every other input: a regular file, at most
    ``DOCKER_CONFIG_BYTES`` (a FIFO would block, ``/dev/zero`` never end); anything else is an
    EnvironmentProblem naming it. A missing file, or one that is not a JSON object, holds no login.
    """
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if environment_pair and user and password:
        return _masked_from_now_on(Credentials(user, password))
    path = docker_config_path()
    try:
        raw = read_regular_file(
            path, DOCKER_CONFIG_BYTES, "the Docker config (JSON) with the registry logins"
        )
    except FileNotFoundError:
        return None
    except InputError as exc:  # the machine's own file, not the user's input: exit 3
        raise EnvironmentProblem(exc.message) from None
    try:
        config = parse_json(raw)
    except ValueError:
        return None
    auths = config.get("auths") if isinstance(config, dict) else None
    if not isinstance(auths, dict):
        return None
    for key in (registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"):
        entry = auths.get(key)
        if not isinstance(entry, dict) or not entry.get("auth"):
            continue
        try:
            decoded = base64.b64decode(str(entry["auth"])).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        name, _, secret = decoded.partition(":")
        return _masked_from_now_on(Credentials(name, secret)) if name else None
    return None


def _masked_from_now_on(found: Credentials) -> Credentials:
    secret_values.register(found.password, login=found.username)
    return found


def docker_auth_config(registry: str) -> dict[str, str] | None:
    """What docker-py's push and pull need to log in: the environment's pair, which the engine
    cannot see itself (it reads the Docker config's ``auths`` on its own)."""
    if os.environ.get(USER_ENV) and os.environ.get(PASSWORD_ENV):  # half a pair is no login
        found = find_credentials(registry)
        if found:
            return {"username": found.username, "password": found.password}
    return None
