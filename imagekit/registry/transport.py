"""How imagekit talks to a registry, a server on the network trusted no more than a file.

- every body is read through one helper (``Transport._read``) with a byte bound and a monotonic
  deadline per operation (``imagekit.core.limits``): an endless or drip-fed answer ends in one line;
  a small answer (a manifest, a token, tags) gets ``REGISTRY_DEADLINE_S`` (``DEADLINE_ENV`` sets
  it), only a blob copied or read whole the long ``BLOB_COPY_DEADLINE_S``, and a token fetched
  on a blob's way still the short one;
- requests' own redirects are off; a GET or HEAD follows at most ``REDIRECTS`` to http(s) URLs,
  never in a loop, and without the Authorization header once it leaves the registry's origin
  (scheme, host and port); a redirected write (PUT, POST) is a RegistryError, never a success;
- credentials go only to the registry's own origin, and to a token realm on another origin only
  over https;
- every answer shape that is not what the API promises (not JSON, a list, bad UTF-8, deep
  nesting, a header with control characters, an odd realm) is one RegistryError or
  EnvironmentProblem line naming the registry, never a traceback.

The API calls built on it are ``imagekit.registry.client``'s.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from requests.structures import CaseInsensitiveDict

from imagekit.core.cutoff import before, cut_at
from imagekit.core.errors import EnvironmentProblem, InputError, RegistryError, one_line
from imagekit.core.limits import (
    BLOB_COPY_DEADLINE_S,
    CHALLENGE_CHARS,
    MAX_TIMEOUT_S,
    REDIRECTS,
    REGISTRY_DEADLINE_S,
    REGISTRY_ERROR_BYTES,
    TOKEN_BYTES,
)
from imagekit.core.safetypes import parse_json
from imagekit.core.text import shown
from imagekit.registry.credentials import PASSWORD_ENV, USER_ENV, Credentials, docker_config_path

TIMEOUT_S = 30.0
# Seconds one registry operation with a small answer may take, retries included (every one but a
# blob copied or read whole); unset or empty: REGISTRY_DEADLINE_S.
DEADLINE_ENV = "IMAGEKIT_REGISTRY_DEADLINE_S"
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_HEADER_TEXT = re.compile(r"[\x20-\x7e]*")  # a header value used as it came: printable ASCII only
_TOKEN_TEXT = re.compile(r"[\x21-\x7e]+")  # a token goes into a header: no space, no control
_CHUNK = 64 << 10
_BLOB_CHUNK = 1 << 20

Origin = tuple[str, str, int]  # (scheme, host, port): where credentials may go


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``attempts`` tries, waiting first_delay_s, then x factor each time."""

    attempts: int = 5
    first_delay_s: float = 0.5
    factor: float = 2.0

    def delays(self) -> list[float]:
        return [self.first_delay_s * self.factor**i for i in range(self.attempts - 1)]


DEFAULT_BACKOFF = Backoff()


def deadline_setting(environ: Mapping[str, str] | None = None) -> float:
    """The deadline of one small registry operation: ``DEADLINE_ENV``'s seconds, or the default.
    A value that is no number from 1 to a week is an InputError (exit 2), one line."""
    value = (os.environ if environ is None else environ).get(DEADLINE_ENV, "").strip()
    if not value:
        return REGISTRY_DEADLINE_S
    try:
        seconds = float(value) if len(value) <= 32 else math.nan
    except ValueError:
        seconds = math.nan
    if not 1 <= seconds <= MAX_TIMEOUT_S:  # NaN too
        raise InputError(
            f"{DEADLINE_ENV}={shown(value)}: not a number of seconds from 1 to {MAX_TIMEOUT_S:,};"
            f" set it to one (like 60), or unset it for the default {REGISTRY_DEADLINE_S:g}"
        )
    return seconds


def registry_hostname(registry: str) -> str:
    """``host[:port]`` (``[v6]:port``, or a bare v6 address) -> the host, without brackets or port."""
    if registry.startswith("["):
        return registry[1:].partition("]")[0]
    if registry.count(":") == 1:
        return registry.rsplit(":", 1)[0]
    return registry  # no port, or a bare IPv6 address


def is_local(registry: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: plain http (as dockerd itself treats them); else https."""
    host = registry_hostname(registry)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url: str) -> Origin | None:
    """``url``'s (scheme, host, port), the port made explicit; None unless an absolute http(s) URL
    with a host (a file: URL, a relative one, one with a control character in it)."""
    if not _HEADER_TEXT.fullmatch(url):  # urlsplit would silently drop a CR, LF or tab
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # "http://[::1", a port past 65535
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def _challenge(header: str) -> tuple[str, dict[str, str]] | None:
    """``Bearer realm="...",service="..."`` -> ("bearer", {realm, service, ...}); None when it is
    longer than a challenge is or names a parameter twice (which realm would be meant?)."""
    if len(header) > CHALLENGE_CHARS:
        return None
    scheme, _, rest = header.strip().partition(" ")
    pairs = re.findall(r'(\w+)="([^"]*)"', rest)
    params = dict(pairs)
    if len(params) != len(pairs):
        return None
    return scheme.lower(), params


@dataclass(frozen=True)
class Answer:
    """A registry's answer with its body read (bounded): what every caller works from."""

    status: int
    headers: CaseInsensitiveDict[str]
    body: bytes
    url: str  # where it came from, after any redirect


class Spool:
    """Where a copied blob's bytes go while they are hashed; emptied again for each attempt."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.sha = hashlib.sha256()

    def reset(self) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.sha = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        self.file.write(chunk)

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


class Transport:
    """The connection to one registry host: its session, login and tokens. Every operation
    (``_send``) retries connection errors, 5xx and 429 with backoff.

    ``deadline_s`` bounds one operation (all its attempts, waits, redirects and reads) and every
    token fetch; ``copy_deadline_s`` one blob copied or read whole through imagekit."""

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str], None] = lambda _: None,
        deadline_s: float = REGISTRY_DEADLINE_S,
        copy_deadline_s: float = BLOB_COPY_DEADLINE_S,
    ) -> None:
        self.host = host
        self.base = f"{'http' if is_local(host) else 'https'}://{host}"
        self.origin = origin(self.base)
        self.credentials = credentials
        self.backoff = backoff
        self.sleep = sleep
        self.on_retry = on_retry
        self.deadline_s = deadline_s
        self.copy_deadline_s = copy_deadline_s
        self.session = requests.Session()
        self.session.trust_env = False  # a proxy from the environment must not see credentials
        # What is counted is what arrives: a compressed answer could expand past any bound.
        self.session.headers["Accept-Encoding"] = "identity"
        self._tokens: dict[str, str] = {}  # scope -> bearer token

    def close(self) -> None:
        self.session.close()

    def _send(
        self,
        method: str,
        path: str,
        scope: str,
        *,
        limit: int = REGISTRY_ERROR_BYTES,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        sink: Spool | None = None,
        deadline_s: float | None = None,
    ) -> Answer:
        """One operation: a request, retried while transient, answered with auth when challenged,
        a success's body read whole up to ``limit`` bytes (more is a RegistryError), an error's
        first ``REGISTRY_ERROR_BYTES`` (the rest left unread), all before the operation's deadline.

        ``path`` is below the registry's base, or a full URL on the registry's own origin (an
        upload location the registry handed out); a file given as ``data`` is rewound for every
        try; ``sink`` takes the body instead of memory (a blob being copied)."""
        url = path if path.startswith(("http://", "https://")) else self.base + path
        if origin(url) != self.origin:
            raise RegistryError(
                f"registry {self.host} sent us to {shown(url)}, not its own origin; not following"
            )
        small = deadline_s is None  # a small answer's deadline is the setting; a blob's is not
        budget = self.deadline_s if deadline_s is None else deadline_s
        deadline = time.monotonic() + budget
        what = f"{method} {path}"
        delays = self.backoff.delays()
        while True:
            try:
                answer = self._attempt(
                    method, url, scope, limit, data, dict(headers or {}), sink, deadline, what
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                if time.monotonic() >= deadline:
                    raise self._late(what, budget, small) from None
                if not delays:
                    raise EnvironmentProblem(
                        f"registry {self.host} unreachable after {self.backoff.attempts} attempts:"
                        f" {one_line(exc)}"
                    ) from None
                problem = type(exc).__name__
            except requests.RequestException as exc:  # an answer that cannot even be sent on
                raise RegistryError(f"registry {self.host}: {what}: {one_line(exc)}") from None
            else:
                if answer.status not in _TRANSIENT_STATUS:
                    return answer
                if not delays:
                    raise EnvironmentProblem(
                        f"registry {self.host} kept answering HTTP {answer.status} to"
                        f" {method} {path} after {self.backoff.attempts} attempts"
                    )
                problem = f"HTTP {answer.status}"
            delay = delays.pop(0)
            if time.monotonic() + delay >= deadline:
                raise self._late(f"{what} ({problem})", budget, small)
            self.on_retry(f"registry {self.host}: {method} {path}: {problem}; retrying in {delay:g}s")
            self.sleep(delay)

    def _late(self, what: str, budget: float, small: bool) -> EnvironmentProblem:
        setting = f" ({DEADLINE_ENV} sets this deadline)" if small else ""
        return EnvironmentProblem(
            f"registry {self.host}: {what}: no whole answer within {budget:g}s; a slow or stuck"
            f" registry{setting}"
        )

    def _attempt(
        self,
        method: str,
        url: str,
        scope: str,
        limit: int,
        data: Any,
        headers: dict[str, str],
        sink: Spool | None,
        deadline: float,
        what: str,
    ) -> Answer:
        """One try: the request, the redirects a GET or HEAD may take, the body read."""
        seen = [url]
        while True:
            # Authorization (a token, a password) goes to the registry's own origin only.
            own = origin(url) == self.origin
            response = self._authorised(method, url, scope, data, headers, deadline, own)
            try:
                status = response.status_code
                if status in _REDIRECT_STATUS:
                    url = self._redirect(method, url, response, what, seen)
                    seen.append(url)
                    continue
                if status in _TRANSIENT_STATUS or method == "HEAD":
                    # retried: its body is not read (the connection is dropped); a HEAD has none,
                    # whatever length it gives (the GET's)
                    body = b""
                elif not 200 <= status < 300:
                    body = self._read(response, REGISTRY_ERROR_BYTES, False, deadline, what)
                else:  # a success is whole or refused: never its first bytes taken for all of it
                    if sink is not None:
                        sink.reset()
                    body = self._read(response, limit, True, deadline, what, sink)
                return Answer(status, response.headers, body, url)
            finally:
                response.close()  # after a whole read the connection is already back in the pool

    def _redirect(
        self, method: str, url: str, response: requests.Response, what: str, seen: list[str]
    ) -> str:
        """Where a redirect of a GET or HEAD leads; a RegistryError for any other redirect."""
        location = self._header(response.headers, "Location")
        if method not in ("GET", "HEAD"):
            raise RegistryError(
                f"registry {self.host}: {what}: answered HTTP {response.status_code} to {shown(location)};"
                " a write that is redirected is not done, so nothing was stored"
            )
        target = urljoin(url, location) if location else ""
        to, since = origin(target), origin(url)
        if to is None or since is None:
            raise RegistryError(
                f"registry {self.host}: {what}: redirected to {shown(target)}; only http(s) is followed"
            )
        if since[0] == "https" and to[0] == "http":
            raise RegistryError(
                f"registry {self.host}: {what}: redirected from https to {shown(target)}; not following"
            )
        if target in seen:
            raise RegistryError(f"registry {self.host}: {what}: redirects in a loop ({shown(target)})")
        if len(seen) > REDIRECTS:
            raise RegistryError(f"registry {self.host}: {what}: more than {REDIRECTS} redirects")
        return target

    def _header(self, headers: Mapping[str, str], name: str) -> str:
        """A header's value, refused unless printable ASCII (a folded or CR/LF-laden value)."""
        value = headers.get(name) or ""
        if not _HEADER_TEXT.fullmatch(value):
            raise RegistryError(
                f"registry {self.host} answered a {name} header holding control or non-ASCII"
                f" characters ({shown(value)}); not using it"
            )
        return value

    def _read(
        self,
        response: requests.Response,
        limit: int,
        strict: bool,
        deadline: float,
        what: str,
        sink: Spool | None = None,
    ) -> bytes:
        """The body, read as it arrives (``read1``: a drip-fed answer cannot keep one read waiting
        for a whole chunk) with a running byte count and the operation's deadline checked after
        every piece. ``strict``: past ``limit`` is a RegistryError; else the rest is not read."""

        def too_large() -> RegistryError:
            return RegistryError(
                f"registry {self.host}: {what}: answered more than {limit:,} bytes, more than this"
                " answer may be; refused"
            )

        declared = response.headers.get("Content-Length") or ""
        if strict and declared.isdigit() and len(declared) < 20 and int(declared) > limit:
            raise too_large()
        chunks: list[bytes] = []
        total = 0
        raw = response.raw
        late = requests.Timeout(f"{what}: the body did not end before the deadline")
        try:
            # One read1 can be many socket reads (a chunk-size line, trailer lines), each within
            # the socket timeout: the connection is cut at the deadline to end them too.
            with cut_at(response, deadline):
                while total <= limit:
                    if time.monotonic() >= deadline:
                        raise late
                    chunk = raw.read1(
                        min(_BLOB_CHUNK if sink else _CHUNK, limit + 1 - total), decode_content=True
                    )
                    if not chunk:
                        break
                    total += len(chunk)
                    if sink is not None:
                        sink.write(chunk)
                    else:
                        chunks.append(chunk)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise requests.ConnectionError(f"{what}: {one_line(exc)}") from None
        if time.monotonic() >= deadline:  # the cut can look like the end of a close-delimited body
            raise late
        if total > limit:
            if strict:
                raise too_large()
            return b"".join(chunks)[:limit]
        return b"".join(chunks)

    def _request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        data: Any,
        deadline: float,
        params: Mapping[str, str | list[str]] | None = None,
    ) -> requests.Response:
        """The request and its headers; the body is left to ``_read``. No redirect is followed
        here, and no single wait outlasts the operation's deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise requests.Timeout("the operation's deadline passed")
        wait = min(TIMEOUT_S, remaining)
        _rewind(data)
        return before(
            remaining,
            lambda: self.session.request(
                method,
                url,
                headers=dict(headers),
                data=data,
                params=params,
                timeout=(wait, wait),
                stream=True,
                allow_redirects=False,
            ),
        )

    def _authorised(
        self,
        method: str,
        url: str,
        scope: str,
        data: Any,
        headers: dict[str, str],
        deadline: float,
        own: bool,
    ) -> requests.Response:
        headers = dict(headers)
        token = self._tokens.get(scope) if own else None
        if token:
            headers["Authorization"] = token
        response = self._request(method, url, headers, data, deadline)
        if response.status_code != 401 or not own or (token and token.startswith("Basic")):
            return response
        challenge = _challenge(self._header(response.headers, "WWW-Authenticate"))
        if challenge is None:  # like a token service's failure: no way in, whatever is asked
            response.close()
            raise EnvironmentProblem(
                f"registry {self.host}: {method} {urlsplit(url).path}: answered a WWW-Authenticate"
                " challenge that is over-long or names a parameter twice; not answering it"
            )
        scheme, params = challenge
        if scheme == "basic" and self.credentials:
            self._tokens[scope] = self.credentials.basic()
        elif scheme == "bearer" and params.get("realm"):
            response.close()
            self._tokens[scope] = "Bearer " + self._bearer(params, scope, deadline)
        else:
            return response
        response.close()
        headers["Authorization"] = self._tokens[scope]
        return self._request(method, url, headers, data, deadline)

    def _bearer(self, params: Mapping[str, str], scope: str, deadline: float) -> str:
        realm = params["realm"]
        where = origin(realm)
        if where is None or urlsplit(realm).username is not None or urlsplit(realm).password is not None:
            raise EnvironmentProblem(
                f"registry {self.host} sends for a token to {shown(realm)}, not an absolute http(s) URL;"
                " not asking there"
            )
        query: dict[str, str | list[str]] = {"service": params.get("service", "")}
        if scope:
            query["scope"] = scope.split(" ")  # a mount asks for two repositories at once
        if self.credentials:
            self._check_realm(realm)
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        service = f"{where[0]}://{urlsplit(realm).netloc}"
        # A token is a small answer, whatever the operation it opens: a blob's copy (hours) gives
        # its token no more than a manifest's would.
        by = min(deadline, time.monotonic() + self.deadline_s)
        try:
            response = self._request("GET", realm, headers, None, by, params=query)
            try:
                if response.status_code != 200:  # a redirect too: credentials are never re-sent
                    raise EnvironmentProblem(
                        f"registry {self.host}: token service {service} answered HTTP"
                        f" {response.status_code}; check the credentials in {docker_config_path()}"
                        f" or {USER_ENV}/{PASSWORD_ENV}"
                    )
                raw = self._read(response, TOKEN_BYTES, True, by, f"token from {service}")
            finally:
                response.close()
        except RegistryError as exc:  # an over-long answer: the token service is at fault, as above
            raise EnvironmentProblem(exc.message) from None
        except (requests.ConnectionError, requests.Timeout):
            if by < deadline and time.monotonic() >= by:  # the token's own deadline, not the copy's
                raise self._late(f"token from {service}", self.deadline_s, True) from None
            raise
        try:
            body: Any = parse_json(raw)
        except ValueError as exc:
            raise EnvironmentProblem(
                f"registry {self.host}: token service {service} answered what is not JSON"
                f" ({one_line(exc, 120)})"
            ) from None
        if not isinstance(body, dict):
            raise EnvironmentProblem(
                f"registry {self.host}: token service {service} answered a JSON {type(body).__name__},"
                " not an object"
            )
        token = body.get("token") or body.get("access_token")
        if not token:
            raise EnvironmentProblem(f"registry {self.host}: token service {service} returned no token")
        if not isinstance(token, str) or not _TOKEN_TEXT.fullmatch(token):
            raise EnvironmentProblem(
                f"registry {self.host}: token service {service} returned a token that is not printable"
                " ASCII; it cannot go into a header"
            )
        return token

    def _check_realm(self, realm: str) -> None:
        """Refuse to send the password to a token service on another origin than the registry's
        (scheme, host and port) unless over https: a plain-http challenge would hand the
        credentials to whoever answers (or listens) there. A local registry gets no exception:
        another port on the same machine is another server."""
        if origin(realm) == self.origin or urlsplit(realm).scheme.lower() == "https":
            return
        url = urlsplit(realm)
        raise EnvironmentProblem(
            f"registry {self.host} sends for a token to {url.scheme}://{url.netloc}, another origin"
            " over plain http; refusing to send the credentials there"
        )


def _rewind(data: Any) -> None:
    if hasattr(data, "seek"):
        data.seek(0)
