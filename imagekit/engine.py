"""The Docker engine: connecting, pulling with retries, and abortable classic builds.

Everything that speaks to dockerd goes through here, so the builder deals in plain records and
one exception type per cause (``EngineFailure`` for the engine, ``APIError`` for a refused call).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import docker
import docker.utils
import requests
from docker.errors import APIError, DockerException, ImageNotFound
from docker.utils.json_stream import json_stream

from imagekit.errors import EnvironmentProblem
from imagekit.naming import split_reference

START_HINT = "start one (`sudo dockerd` or `scripts/engine.sh docker`) or set DOCKER_HOST"
# Read timeout for ordinary calls; builds and pulls stream with no read timeout (a silent
# RUN step may take an hour) and are bounded by the builder's own wall-clock timeout instead.
CALL_TIMEOUT_S = 60


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class EngineFailure(Exception):
    """The engine stopped answering (connection refused or reset, socket gone)."""


def unreachable(exc: BaseException) -> EnvironmentProblem:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return EnvironmentProblem(f"cannot reach the Docker engine at {engine_address()}: {detail}; {START_HINT}")


def connect(pool_size: int = 10) -> docker.APIClient:
    """A low-level client for DOCKER_HOST (docker's own env handling), checked with a ping.

    Each running build holds one pooled connection, so the pool must outgrow ``--jobs``.
    """
    try:
        api = docker.APIClient(
            version="auto",
            timeout=CALL_TIMEOUT_S,
            max_pool_size=pool_size,
            **docker.utils.kwargs_from_env(),
        )
        api.ping()
    except (DockerException, requests.RequestException, OSError) as exc:
        raise unreachable(exc) from None
    return api


def is_engine_failure(exc: BaseException) -> bool:
    """True when ``exc`` means the engine went away rather than refused one request."""
    if isinstance(exc, EngineFailure | requests.ConnectionError | ConnectionError):
        return True
    return isinstance(exc, APIError) and exc.response is None


def alive(api: docker.APIClient) -> bool:
    try:
        return bool(api.ping())
    except (DockerException, requests.RequestException, OSError):
        return False


# -- images -----------------------------------------------------------------------------------------


def inspect_image(api: docker.APIClient, ref: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = api.inspect_image(ref)  # type: ignore[no-untyped-call]
    except ImageNotFound:
        return None
    return found


def repo_digest(image: dict[str, Any], ref: str) -> str | None:
    """The ``name@sha256:...`` this image has under ``ref``'s repository, when it came from one."""
    repository = split_reference(ref)[0]
    for digest in image.get("RepoDigests") or ():
        if str(digest).split("@", 1)[0] == repository:
            return str(digest)
    return None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, requests.ConnectionError | requests.Timeout | ConnectionError):
        return True
    if isinstance(exc, APIError):
        if exc.response is not None and (exc.is_server_error() or exc.response.status_code == 429):
            return True  # 5xx, or a registry asking us to slow down
        # Only the engine's own message is searched for a transient cause: str(exc) also holds
        # the request URL and the image name, which may well contain "timeout" or "eof".
        message = exc.explanation if exc.explanation is not None else (exc.args[0] if exc.args else "")
        text = str(message).lower()
        return any(
            hint in text for hint in ("connection reset", "timeout", "tls handshake", "unexpected eof")
        )
    return False


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    first_delay_s: float = 1.0
    factor: float = 3.0


def pull(
    api: docker.APIClient,
    ref: str,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Pull ``ref``, retrying transient failures (5xx, resets) with exponential backoff.

    A pull reports most failures inside its stream, so an ``error`` line is raised as APIError.
    """
    repository, tag = split_reference(ref)
    delay = policy.first_delay_s
    for attempt in range(1, policy.attempts + 1):
        try:
            for line in api.pull(repository, tag=tag or "latest", stream=True, decode=True):
                if isinstance(line, dict) and line.get("error"):
                    raise APIError(str(line["error"]))
            return
        except (APIError, requests.RequestException, ConnectionError) as exc:
            if attempt == policy.attempts or not is_transient(exc):
                raise
            sleep(delay)
            delay *= policy.factor


# -- builds -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: str  # path inside the context; the image is built untagged (tagged once finished)
    labels: tuple[tuple[str, str], ...]
    build_args: tuple[tuple[str, str], ...]
    cache_from: tuple[str, ...]
    network_mode: str | None


class BuildAborted(Exception):
    """The build stream was cut on purpose (timeout, cancellation)."""


class BuildStream:
    """One classic-builder build whose output is read line by line and that can be cut off.

    docker-py's ``APIClient.build`` gives no handle on the connection, so a build stuck in a
    silent RUN step could not be stopped. Shutting the socket down makes the engine cancel the
    build (it removes the step's container, ``forcerm``) and wakes the blocked reader.
    """

    def __init__(self, api: docker.APIClient, request: BuildRequest, context: IO[bytes]) -> None:
        self._api = api
        self._request = request
        self._context = context
        self._response: requests.Response | None = None
        self._lock = threading.Lock()
        self._aborted: str | None = None

    def _params(self) -> dict[str, Any]:
        request = self._request
        params: dict[str, Any] = {
            "dockerfile": request.dockerfile,
            "rm": True,
            "forcerm": True,
            "pull": False,
            "q": False,
            "nocache": False,
            "labels": json.dumps(dict(request.labels)),
        }
        if request.build_args:
            params["buildargs"] = json.dumps(dict(request.build_args))
        if request.cache_from:
            params["cachefrom"] = json.dumps(list(request.cache_from))
        if request.network_mode:
            params["networkmode"] = request.network_mode
        return params

    def lines(self) -> Iterator[dict[str, Any]]:
        """Decoded JSON lines of the build; raises BuildAborted after ``abort``."""
        url = f"{self._api.base_url}/v{self._api.api_version}/build"
        try:
            response = self._api.post(
                url,
                data=self._context,
                params=self._params(),
                headers={"Content-Type": "application/tar"},
                stream=True,
                timeout=None,
            )
            with self._lock:
                self._response = response
                aborted = self._aborted
            if aborted:
                self._shutdown()
                raise BuildAborted(aborted)
            if response.status_code >= 400:
                try:
                    message = response.json().get("message", response.text)
                except ValueError:
                    message = response.text
                raise APIError(str(message), response=response)
            for line in json_stream(response.iter_content(chunk_size=None, decode_unicode=True)):
                if isinstance(line, dict):
                    yield line
        except (requests.RequestException, OSError) as exc:
            if self._aborted:
                raise BuildAborted(self._aborted) from None
            raise EngineFailure(" ".join(str(exc).split())) from None
        if self._aborted:
            raise BuildAborted(self._aborted)

    def abort(self, reason: str) -> None:
        """Cut the connection (from any thread); the reader sees BuildAborted(reason)."""
        with self._lock:
            if self._aborted:
                return
            self._aborted = reason
        self._shutdown()

    def _shutdown(self) -> None:
        response = self._response
        if response is None:
            return
        try:
            # The socket docker-py itself reaches for in attach (APIClient._get_raw_response_socket).
            raw: Any = response.raw._fp.fp.raw  # type: ignore[union-attr]
            sock: socket.socket = getattr(raw, "_sock", raw)
            sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):
            response.close()
