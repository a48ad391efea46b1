"""The Docker engine: connecting, pulling with retries, and abortable classic builds.

Everything that speaks to dockerd goes through here, so the builder deals in plain records and
one exception type per cause (``EngineFailure`` for the engine, ``APIError`` for a refused call,
``EngineAnswerError`` for an answer that is not the API's). What none of the callers handles ends
the command as ``engine_problem``'s one line, exit 3 (``imagekit.cli.app.reports_errors``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
import docker.utils
import docker.utils.config
import requests
import urllib3
from docker.errors import APIError, DockerException, ImageNotFound, StreamParseError
from docker.utils.json_stream import json_stream

from imagekit.core.cutoff import before, cut_at, shut_down
from imagekit.core.errors import EnvironmentProblem, InputError, one_line
from imagekit.core.limits import (
    DOCKER_CONFIG_BYTES,
    ENGINE_ANSWER_BYTES,
    ENGINE_CALL_DEADLINE_S,
    ENGINE_LOAD_SILENCE_S,
)
from imagekit.core.naming import reference, split_reference
from imagekit.core.paths import open_regular_file
from imagekit.engine.raw_socket import engine_address

START_HINT = "start one (`sudo dockerd` or `scripts/engine.sh docker`) or set DOCKER_HOST"
# Read timeout for ordinary calls; builds and pulls stream with no read timeout (a silent
# RUN step may take an hour) and are bounded by the builder's own wall-clock timeout instead.
CALL_TIMEOUT_S = 60


class EngineFailure(Exception):
    """The engine stopped answering (connection refused or reset, socket gone)."""


class EngineAnswerError(APIError):
    """The engine answered what its API never does: a body, or a line of a stream, that is not JSON.
    An APIError without a response, so every caller that handles a failed call handles it, as one
    that means the engine itself is at fault (``is_engine_failure``)."""


def unreachable(exc: BaseException) -> EnvironmentProblem:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return EnvironmentProblem(f"cannot reach the Docker engine at {engine_address()}: {detail}; {START_HINT}")


def _call_of(response: requests.Response | None) -> str:
    """``GET /v1.43/info``: the call an answer is to, without its query (a build's holds its labels)."""
    request = response.request if response is not None else None
    if request is None:
        return "a call"
    return f"{request.method} {(request.path_url or '/').split('?', 1)[0]}"


def engine_problem(exc: BaseException) -> EnvironmentProblem | None:
    """A failed engine call that no caller handled, as the one line of exit 3: the engine refused
    it (any status: nothing imagekit asks of it may fail there), gave an answer that is not its
    API's, or went away. None when ``exc`` is none of those (a bug: it keeps its traceback)."""
    where = f"the Docker engine at {engine_address()}"
    if isinstance(exc, APIError) and exc.response is not None:
        status = f"{exc.response.status_code} {exc.response.reason or ''}".rstrip()
        return EnvironmentProblem(f"{where} answered {_call_of(exc.response)} with {status}: {one_line(exc)}")
    if isinstance(exc, EngineAnswerError):
        return EnvironmentProblem(f"{where}: {one_line(exc)}; is DOCKER_HOST a Docker engine?")
    if isinstance(
        exc, DockerException | StreamParseError | EngineFailure | requests.RequestException | ConnectionError
    ):
        return unreachable(exc)
    return None


class _Client(docker.APIClient):
    """docker-py's client with every answer that is not a stream read whole within
    ``ENGINE_CALL_DEADLINE_S`` and ``ENGINE_ANSWER_BYTES``: DOCKER_HOST may name a server that
    drips or never ends its answer, where docker-py's per-read timeout alone would wait forever
    (and read without bound). Streams (build, pull, push, logs) keep their own bounds."""

    def _result(self, response: requests.Response, json: bool = False, binary: bool = False) -> Any:
        """docker-py's, with a 2xx body that is not JSON an EngineAnswerError naming the call (it
        raised requests' bare JSONDecodeError, which named nothing and few callers expected)."""
        try:
            return super()._result(response, json, binary)  # type: ignore[misc]
        except ValueError:
            kind = response.headers.get("Content-Type") or "no content type"
            raise EngineAnswerError(
                f"{_call_of(response)}: the engine's answer ({kind}) is not JSON"
            ) from None

    def send(self, request: Any, **kwargs: Any) -> requests.Response:
        if kwargs.get("stream"):
            return super().send(request, **kwargs)
        within = _deadline_s(kwargs.get("timeout"), self.timeout)
        deadline = time.monotonic() + within
        late = requests.ConnectionError(f"no whole answer within {within:g}s")
        send = super().send
        try:
            response = before(within, lambda: send(request, **{**kwargs, "stream": True}))
        except requests.Timeout:
            raise late from None
        body = bytearray()
        try:
            with cut_at(response, deadline):
                while chunk := response.raw.read(1 << 16, decode_content=True):
                    body += chunk
                    if len(body) > ENGINE_ANSWER_BYTES:
                        raise requests.ConnectionError(f"an answer over {ENGINE_ANSWER_BYTES:,} bytes")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise late if time.monotonic() >= deadline else requests.ConnectionError(str(exc)) from None
        finally:
            response.close()
        if time.monotonic() >= deadline:  # the cut can look like the end of a close-delimited body
            raise late
        response._content = bytes(body)  # what requests itself sets when it reads the body
        response._content_consumed = True  # type: ignore[attr-defined]
        return response


def _deadline_s(timeout: object, default: object) -> float:
    """The whole answer's deadline: ENGINE_CALL_DEADLINE_S, or longer for a call whose caller set
    a read timeout longer than the client's own (`wait` for a check container answers when the
    check ends, bounded by --verify-timeout): that timeout, with the usual deadline after it, so the
    caller's own timeout is what it sees first."""
    if isinstance(timeout, int | float) and isinstance(default, int | float) and timeout > default:
        return float(timeout) + ENGINE_CALL_DEADLINE_S
    return ENGINE_CALL_DEADLINE_S


def _check_docker_config() -> None:
    """docker-py reads the Docker config (its proxies and logins) whole, with no bound, whenever a
    client is made: a FIFO there would hold every engine command and ``/dev/zero`` end in a
    MemoryError. The file it is about to read is checked first, on the descriptor opened, as
    imagekit reads it itself (``imagekit.registry.credentials``): the machine's file, exit 3."""
    found = docker.utils.config.find_config_file()
    if not isinstance(found, str):  # None: no config file
        return
    try:
        with open_regular_file(Path(found), "the Docker config (JSON)") as (_, opened):
            if opened.st_size > DOCKER_CONFIG_BYTES:
                raise InputError(
                    f"{found}: larger than {DOCKER_CONFIG_BYTES} bytes; the Docker config is far smaller"
                )
    except FileNotFoundError:
        return
    except InputError as exc:
        raise EnvironmentProblem(exc.message) from None


def connect(pool_size: int = 10) -> docker.APIClient:
    """A low-level client for DOCKER_HOST (docker's own env handling), checked with a ping.

    Each running build holds one pooled connection, so the pool must outgrow ``--jobs``.
    """
    _check_docker_config()
    try:
        api = _Client(
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
    """``docker image inspect``: None when the engine holds no such image. A read: a 5xx or an
    answer that is no object is the engine failing, whatever ``ref`` names (EnvironmentProblem)."""
    try:
        found: Any = api.inspect_image(ref)  # type: ignore[no-untyped-call]
    except ImageNotFound:
        return None
    except APIError as exc:
        if exc.is_server_error() or isinstance(exc, EngineAnswerError):
            raise _read_failed(exc) from None
        raise
    if not isinstance(found, dict):
        raise EnvironmentProblem(
            f"the Docker engine at {engine_address()} answered GET /images/{ref}/json with no image"
            " (not a JSON object); is DOCKER_HOST a Docker engine?"
        )
    return found


def engine_info(api: docker.APIClient) -> dict[str, Any]:
    """``docker info``; EnvironmentProblem when the engine cannot say (any failure of the call, or
    an answer that is no object): every caller needs it to go on."""
    try:
        info: Any = api.info()
    except (DockerException, requests.RequestException) as exc:
        raise _read_failed(exc) from None
    if not isinstance(info, dict):
        raise EnvironmentProblem(
            f"the Docker engine at {engine_address()} answered GET /info with no object;"
            " is DOCKER_HOST a Docker engine?"
        )
    return info


def _read_failed(exc: BaseException) -> EnvironmentProblem:
    problem = engine_problem(exc)
    return problem if problem is not None else unreachable(exc)


def repo_digest(image: dict[str, Any], ref: str) -> str | None:
    """The ``name@sha256:...`` this image has under ``ref``'s repository, when it came from one;
    for a ``ref`` pinned by digest, that digest (an image can carry several of one repository:
    the first listed need not be the pin it was pulled by)."""
    repository, tag_or_digest = split_reference(ref)
    digests = [str(d) for d in image.get("RepoDigests") or ()]
    if tag_or_digest and tag_or_digest.startswith("sha256:"):
        pinned = f"{repository}@{tag_or_digest}"
        if pinned in digests:
            return pinned
    for digest in digests:
        if digest.split("@", 1)[0] == repository:
            return digest
    return None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, EngineAnswerError):
        return False  # an engine that speaks no JSON will not start to on a retry
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
    auth_config: Mapping[str, str] | None = None,
    platform: str | None = None,
) -> None:
    """Pull ``ref`` (``name:tag`` or ``name@sha256:...``), retrying transient failures (5xx,
    resets) with exponential backoff; ``platform`` (linux/arm64) picks that platform's image of an
    index, else the engine's own.

    A pull reports most failures inside its stream, so an ``error`` line is raised as APIError.
    """
    repository, tag = split_reference(ref)
    delay = policy.first_delay_s
    for attempt in range(1, policy.attempts + 1):
        try:
            options: dict[str, Any] = {"platform": platform} if platform else {}
            stream = api.pull(
                repository,
                tag=tag or "latest",
                stream=True,
                decode=True,
                auth_config=dict(auth_config) if auth_config else None,
                **options,
            )
            try:
                for line in stream:
                    if isinstance(line, dict) and line.get("error"):
                        raise APIError(str(line["error"]))
            except StreamParseError:
                raise EngineAnswerError(f"pulling {ref}: a line of the engine's answer is not JSON") from None
            return
        except (APIError, requests.RequestException, ConnectionError) as exc:
            if attempt == policy.attempts or not is_transient(exc):
                raise
            sleep(delay)
            delay *= policy.factor


# Whole words and status phrases only: a bare "500" or "eof" would match inside a digest, a
# size ("5001 bytes") or a word ("thereof") and retry a push that can never succeed.
_TRANSIENT_PUSH = re.compile(
    r"\b(?:(?:status(?: code)?|http(?:/\d(?:\.\d)?)?|error)[: ]*(?:500|502|503|504|429)\b"
    r"|(?:500|502|503|504|429) (?:internal server error|bad gateway|service unavailable"
    r"|gateway time-?out|too many requests)"
    r"|internal server error|service unavailable|bad gateway|gateway time-?out|too many requests"
    r"|connection refused|connection reset(?: by peer)?|broken pipe"
    r"|i/o timeout|tls handshake timeout|timeout exceeded|timed out|(?:unexpected )?eof"
    r"|context deadline exceeded|no such host|temporary failure in name resolution)\b",
    re.IGNORECASE,
)


def transient_push_error(text: str) -> bool:
    """Whether a push error reads like the registry or network having a bad moment."""
    return _TRANSIENT_PUSH.search(text) is not None


class PushFailed(Exception):
    """The engine could not push an image; ``transient`` when another try may succeed."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


# The line a push ends with, "TAG: digest: sha256:HEX size: N": the only place the digest is told
# by dockerd's containerd image store (it sends no aux Digest record; the overlay2 store sends both).
_PUSHED_DIGEST = re.compile(r"\S+: digest: (sha256:[0-9a-f]{64}) size: \d+")


def push_once(
    api: docker.APIClient, name: str, tag: str, auth_config: Mapping[str, str] | None = None
) -> str:
    """Push ``name:tag`` (the engine uploads the layers); returns the manifest digest it reports."""
    digest: str | None = None
    try:
        stream = api.push(
            name, tag=tag, stream=True, decode=True, auth_config=dict(auth_config) if auth_config else None
        )
        for line in stream:
            if not isinstance(line, dict):
                continue
            if line.get("error"):
                text = " ".join(str(line["error"]).split())
                raise PushFailed(text, transient_push_error(text))
            aux = line.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
            elif digest is None and (said := _PUSHED_DIGEST.fullmatch(str(line.get("status") or ""))):
                digest = said[1]
    except APIError as exc:
        text = " ".join(str(exc.explanation or exc).split())
        raise PushFailed(text, exc.is_server_error()) from None
    except StreamParseError as exc:
        raise PushFailed(f"a line of the engine's answer is not JSON ({one_line(exc, 200)})", False) from None
    except (requests.ConnectionError, ConnectionError) as exc:
        raise unreachable(exc) from None
    if digest is None:
        raise PushFailed("the engine reported no manifest digest", False)
    return digest


def push(
    api: docker.APIClient,
    name: str,
    tag: str,
    delays: Sequence[float],
    auth_config: Mapping[str, str] | None = None,
    on_retry: Callable[[str], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """``push_once``, retried after each of ``delays`` while the failure is transient."""
    waits = list(delays)
    while True:
        try:
            return push_once(api, name, tag, auth_config)
        except PushFailed as failed:
            if not failed.transient or not waits:
                raise
            delay = waits.pop(0)
            on_retry(f"{failed}; retrying in {delay:g}s")
            sleep(delay)


def push_as(
    api: docker.APIClient,
    image_id: str,
    name: str,
    tag: str,
    delays: Sequence[float],
    auth_config: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Push image ``image_id`` as ``name:tag``; returns the manifest digest the engine reports.

    The tag exists only to push (the engine pushes names, not ids): it is removed again, so the
    engine keeps just the build's own tags. Retries go to ``say``."""
    api.tag(image_id, name, tag, force=True)
    try:
        return push(api, name, tag, delays, auth_config, on_retry=say, sleep=sleep)
    finally:
        try:
            api.remove_image(reference(name, tag), noprune=True)
        except (APIError, DockerException):
            say(f"could not remove the local tag {reference(name, tag)}")


# -- builds -----------------------------------------------------------------------------------------


def load(api: docker.APIClient, archive: IO[bytes]) -> Iterator[dict[str, Any]]:
    """``docker load`` of an image archive: the engine's answer lines. Not docker-py's load_image,
    which keeps the client's 60 s per-read timeout: the engine answers only once it has unpacked
    every layer (ENGINE_LOAD_SILENCE_S says how long it may take). Raises APIError on a refusal."""
    url = f"{api.base_url}/v{api.api_version}/images/load"
    response = api.post(
        url,
        data=archive,
        params={"quiet": "1"},
        headers={"Content-Type": "application/x-tar"},
        stream=True,
        timeout=ENGINE_LOAD_SILENCE_S,
    )
    try:
        if response.status_code >= 400:
            raise APIError(response.text[:1000], response=response)
        yield from json_lines(response)
    finally:
        response.close()


def json_lines(response: requests.Response) -> Iterator[dict[str, Any]]:
    """The JSON objects of a streamed answer (a build's, a load's); EngineAnswerError at a line that
    is not JSON (docker-py's StreamParseError, which no caller expected, ended a worker thread)."""
    try:
        for line in json_stream(response.iter_content(chunk_size=None, decode_unicode=True)):
            if isinstance(line, dict):
                yield line
    except StreamParseError as exc:
        raise EngineAnswerError(
            f"{_call_of(response)}: a line of the engine's answer is not JSON ({one_line(exc, 200)})"
        ) from None


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: str  # path inside the context; the image is built untagged (tagged once finished)
    labels: tuple[tuple[str, str], ...]
    build_args: tuple[tuple[str, str], ...]
    cache_from: tuple[str, ...]
    network_mode: str | None
    platform: str | None = None  # linux/arm64: built for that platform (emulated on another CPU)
    nocache: bool = False


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
            "nocache": request.nocache,
            "labels": json.dumps(dict(request.labels)),
        }
        if request.build_args:
            params["buildargs"] = json.dumps(dict(request.build_args))
        if request.cache_from:
            params["cachefrom"] = json.dumps(list(request.cache_from))
        if request.network_mode:
            params["networkmode"] = request.network_mode
        if request.platform:
            params["platform"] = request.platform
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
            yield from json_lines(response)
        except EngineAnswerError:
            raise  # the engine answered, with what is not its API's: no connection lost
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
        if self._response is not None:
            shut_down(self._response)
