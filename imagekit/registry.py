"""A small OCI Distribution API client: ping, manifests by digest, tags, with auth and retries.

Promotion needs only manifests: a tag is a manifest PUT under a name, and a manifest whose layers
the registry already holds is accepted without any blob moving. Docker pushes the layers (once,
to the staging tag). Where staging is another repository of the same registry, each blob is
mounted across (``POST /v2/<target>/blobs/uploads/?mount=<digest>&from=<source>``: no bytes
move); only a registry that refuses the mount gets the blob copied through this client.

Credentials come from IMAGEKIT_REGISTRY_USER/IMAGEKIT_REGISTRY_PASSWORD or the Docker config's
``auths``; they live only in request headers and are never part of a message or a record.

The registry is a server on the network, trusted no more than a file:

- every body is read through one helper (``Registry._read``) with a byte bound and a monotonic
  deadline per operation (``imagekit.limits``): an endless or drip-fed answer ends in one line;
- requests' own redirects are off; a GET or HEAD follows at most ``REDIRECTS`` to http(s) URLs,
  never in a loop, and without the Authorization header once it leaves the registry's origin
  (scheme, host and port); a redirected write (PUT, POST) is a RegistryError, never a success;
- credentials go only to the registry's own origin, and to a token realm on another origin only
  over https; an error body is shown with the login masked;
- every answer shape that is not what the API promises (not JSON, a list, bad UTF-8, deep
  nesting, a header with control characters, an odd realm) is one RegistryError or
  EnvironmentProblem line naming the registry, never a traceback.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn
from urllib.parse import quote, urljoin, urlsplit

import requests
import urllib3
from requests.structures import CaseInsensitiveDict
from requests.utils import parse_header_links

from imagekit.errors import EnvironmentProblem, ImagekitError, InputError, one_line
from imagekit.limits import (
    BLOB_BYTES,
    BLOB_COPY_DEADLINE_S,
    CHALLENGE_CHARS,
    CONFIG_BYTES,
    DOCKER_CONFIG_BYTES,
    MANIFEST_BYTES,
    MAX_REFERRERS,
    REDIRECTS,
    REGISTRY_DEADLINE_S,
    REGISTRY_ERROR_BYTES,
    TAG_PAGES,
    TAGS_PAGE_BYTES,
    TOKEN_BYTES,
)
from imagekit.naming import DIGEST
from imagekit.paths import read_regular_file
from imagekit.safetypes import parse_json
from imagekit.text import printable, redact, shown

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
IMAGE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join(MANIFEST_TYPES)
# OCI 1.1 artifacts: the empty config an artifact manifest names, and the referrers tag schema.
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()
USER_ENV = "IMAGEKIT_REGISTRY_USER"
PASSWORD_ENV = "IMAGEKIT_REGISTRY_PASSWORD"
TIMEOUT_S = 30.0
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


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)  # repr never shows it: a dataclass in a traceback is printed

    def basic(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"


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


def docker_config_path() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


def find_credentials(registry: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The environment's pair first, then the Docker config's ``auths`` entry for ``registry``.

    The Docker config is read like every other input: a regular file, at most
    ``DOCKER_CONFIG_BYTES`` (a FIFO would block, ``/dev/zero`` never end); anything else is an
    EnvironmentProblem naming it. A missing file, or one that is not a JSON object, holds no login.
    """
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user and password:
        return Credentials(user, password)
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
        return Credentials(name, secret) if name else None
    return None


def docker_auth_config(registry: str) -> dict[str, str] | None:
    """What docker-py's push and pull need to log in: the environment's pair, which the engine
    cannot see itself (it reads the Docker config's ``auths`` on its own)."""
    if os.environ.get(USER_ENV):
        found = find_credentials(registry)
        if found:
            return {"username": found.username, "password": found.password}
    return None


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


class RegistryError(ImagekitError):
    """The registry refused one request (4xx other than auth retries; not transient) or answered
    what cannot be used. One line, like every ImagekitError; exit 1 where it is not handled."""


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    def _json(self) -> dict[str, Any]:
        try:
            data: Any = parse_json(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def config_digest(self) -> str | None:
        """The image id (config digest) a single-image manifest names; None for an index."""
        config = self._json().get("config")
        return str(config["digest"]) if isinstance(config, dict) and config.get("digest") else None

    @property
    def blobs(self) -> list[str]:
        """The config and layer digests of a single-image manifest (none for an index)."""
        data = self._json()
        found = [data.get("config"), *(data.get("layers") or ())]
        return [
            str(b["digest"]) for b in found if isinstance(b, dict) and DIGEST.fullmatch(str(b.get("digest")))
        ]

    @property
    def blob_sizes(self) -> dict[str, int]:
        """The sizes the manifest gives its blobs, by digest: a copy of one reads no more."""
        data = self._json()
        found = [data.get("config"), *(data.get("layers") or ())]
        return {
            str(b["digest"]): b["size"]
            for b in found
            if isinstance(b, dict) and type(b.get("size")) is int and b["size"] >= 0 and b.get("digest")
        }

    @property
    def children(self) -> list[str]:
        """An index's (manifest list's) image manifests, by digest; none for a single image."""
        return [
            str(m["digest"])
            for m in self._json().get("manifests") or ()
            if isinstance(m, dict)
            and m.get("mediaType") in MANIFEST_TYPES
            and DIGEST.fullmatch(str(m.get("digest")))
        ]

    def check_promotable(self, where: str, image_only: bool = False) -> None:
        """Refuse (RegistryError, one line) what promotion cannot vouch for: a body that is not a
        JSON object, a mediaType that is not a string or not a manifest's, a single image naming
        no config (no image id to compare with the verified one), an index naming no manifest,
        or one naming an index or anything but image manifests. ``image_only``: an index's child,
        which must itself be an image."""

        def refuse(problem: str) -> NoReturn:
            raise RegistryError(f"{where}: {problem}; nothing promoted from it")

        try:
            data: Any = parse_json(self.body)
        except ValueError as exc:
            refuse(f"the manifest is not JSON ({one_line(exc, 120)})")
        if not isinstance(data, dict):
            refuse(f"the manifest is a JSON {type(data).__name__}, not an object")
        declared = data.get("mediaType")
        if declared is not None and not isinstance(declared, str):
            refuse(f"its mediaType is a JSON {type(declared).__name__}, not a string")
        if self.media_type not in MANIFEST_TYPES or (declared is not None and declared != self.media_type):
            refuse(
                f"its mediaType {shown(str(declared or self.media_type))} is not the manifest type it came as"
            )
        if self.media_type in INDEX_TYPES:
            if image_only:
                refuse("an index inside an index; only an index of image manifests is promoted")
            entries = data.get("manifests")
            if "config" in data or not isinstance(entries, list) or not entries:
                refuse("an index that names no manifest")
            for i, entry in enumerate(entries):
                kind = entry.get("mediaType") if isinstance(entry, dict) else None
                if not isinstance(kind, str):
                    refuse(f"manifests[{i}] has no mediaType string")
                if kind in INDEX_TYPES:
                    refuse(f"manifests[{i}] is itself an index; an index of an index is not promoted")
                if kind not in IMAGE_TYPES:
                    refuse(f"manifests[{i}] is a {shown(kind)}, not an image manifest")
                if not isinstance(entry.get("digest"), str) or not DIGEST.fullmatch(entry["digest"]):
                    refuse(f"manifests[{i}] names no sha256 digest")
            return
        config = data.get("config")
        if "manifests" in data or not isinstance(config, dict):
            refuse("a single-image manifest that names no config (no image id)")
        if not isinstance(config.get("digest"), str) or not DIGEST.fullmatch(config["digest"]):
            refuse("its config names no sha256 digest (no image id)")
        layers = data.get("layers", [])
        if not isinstance(layers, list) or not all(
            isinstance(layer, dict)
            and isinstance(layer.get("digest"), str)
            and DIGEST.fullmatch(layer["digest"])
            for layer in layers
        ):
            refuse("its layers are not a list of sha256 descriptors")


@dataclass(frozen=True)
class Referrer:
    """One manifest whose ``subject`` is an image: its digest, artifact type and annotations, as
    the referrers API (or the referrers tag's index) lists it."""

    digest: str
    artifact_type: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    def descriptor(self, size: int) -> dict[str, Any]:
        return {
            "mediaType": OCI_MANIFEST,
            "digest": self.digest,
            "size": size,
            "artifactType": self.artifact_type,
            "annotations": dict(self.annotations),
        }


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: ``sha256-<hex>`` on the subject's repository."""
    return digest.replace(":", "-", 1)


def artifact_manifest(
    artifact_type: str,
    layer: tuple[str, str, int],
    subject: Manifest,
    annotations: Mapping[str, str],
    layer_annotations: Mapping[str, str] | None = None,
) -> Manifest:
    """An OCI 1.1 artifact: an image manifest with ``artifactType``, the empty config, one layer
    (media type, digest, size) and ``subject`` = the image manifest it is about."""
    media_type, digest, size = layer
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
        "layers": [
            {
                "mediaType": media_type,
                "digest": digest,
                "size": size,
                "annotations": dict(layer_annotations or {}),
            }
        ],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.body)},
        "annotations": dict(annotations),
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_MANIFEST, raw)


@dataclass(frozen=True)
class _Answer:
    """A registry's answer with its body read (bounded): what every caller works from."""

    status: int
    headers: CaseInsensitiveDict[str]
    body: bytes
    url: str  # where it came from, after any redirect


class _Spool:
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


class Registry:
    """One registry host; every call retries connection errors, 5xx and 429 with backoff.

    ``deadline_s`` bounds one operation (all its attempts, waits, redirects and reads);
    ``copy_deadline_s`` one blob copied through imagekit."""

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        backoff: Backoff = Backoff(),
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
        self.retries = 0  # how many requests were retried (for reports and tests)

    def close(self) -> None:
        self.session.close()

    # -- transport -----------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        scope: str,
        *,
        limit: int = REGISTRY_ERROR_BYTES,
        strict: bool = False,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        sink: _Spool | None = None,
        deadline_s: float | None = None,
    ) -> _Answer:
        """One operation: a request, retried while transient, answered with auth when challenged,
        its body read up to ``limit`` bytes (``strict``: more is a RegistryError; else the rest is
        left unread), all before the operation's deadline.

        ``path`` is below the registry's base, or a full URL on the registry's own origin (an
        upload location the registry handed out); a file given as ``data`` is rewound for every
        try; ``sink`` takes the body instead of memory (a blob being copied)."""
        url = path if path.startswith(("http://", "https://")) else self.base + path
        if origin(url) != self.origin:
            raise RegistryError(
                f"registry {self.host} sent us to {shown(url)}, not its own origin; not following"
            )
        budget = self.deadline_s if deadline_s is None else deadline_s
        deadline = time.monotonic() + budget
        what = f"{method} {path}"
        delays = self.backoff.delays()
        while True:
            try:
                answer = self._attempt(
                    method, url, scope, limit, strict, data, dict(headers or {}), sink, deadline, what
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                if time.monotonic() >= deadline:
                    raise self._late(what, budget) from None
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
                raise self._late(f"{what} ({problem})", budget)
            self.retries += 1
            self.on_retry(f"registry {self.host}: {method} {path}: {problem}; retrying in {delay:g}s")
            self.sleep(delay)

    def _late(self, what: str, budget: float) -> EnvironmentProblem:
        return EnvironmentProblem(
            f"registry {self.host}: {what}: no whole answer within {budget:g}s; a slow or stuck registry"
        )

    def _attempt(
        self,
        method: str,
        url: str,
        scope: str,
        limit: int,
        strict: bool,
        data: Any,
        headers: dict[str, str],
        sink: _Spool | None,
        deadline: float,
        what: str,
    ) -> _Answer:
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
                if status in _TRANSIENT_STATUS:
                    body = b""  # retried: its body is not read (the connection is dropped)
                elif not 200 <= status < 300:
                    body = self._read(response, REGISTRY_ERROR_BYTES, False, deadline, what)
                else:
                    if sink is not None:
                        sink.reset()
                    body = self._read(response, limit, strict, deadline, what, sink)
                return _Answer(status, response.headers, body, url)
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
        sink: _Spool | None = None,
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
        try:
            while total <= limit:
                if time.monotonic() >= deadline:
                    raise requests.Timeout(f"{what}: the body did not end before the deadline")
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
        return _before(
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
        if challenge is None:
            response.close()
            raise RegistryError(
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
        response = self._request("GET", realm, headers, None, deadline, params=query)
        service = f"{where[0]}://{urlsplit(realm).netloc}"
        try:
            if response.status_code != 200:  # a redirect too: credentials are never re-sent
                raise EnvironmentProblem(
                    f"registry {self.host}: token service {service} answered HTTP {response.status_code};"
                    f" check the credentials in {docker_config_path()} or {USER_ENV}/{PASSWORD_ENV}"
                )
            raw = self._read(response, TOKEN_BYTES, True, deadline, f"token from {service}")
        finally:
            response.close()
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

    def _masked(self, text: str) -> str:
        """A registry's text as an error line may show it: the login, the password and any token
        this client holds masked wherever the registry echoed them, then as every output is."""
        secrets = [value.split(" ", 1)[-1] for value in self._tokens.values()]
        if self.credentials:
            login = f"{self.credentials.username}:{self.credentials.password}"
            secrets += [login, self.credentials.basic().split(" ", 1)[1], self.credentials.password]
        for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
            else:  # a very short password: masked where it stands alone, not inside every word
                text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
        return redact(printable(text))

    def _check(self, answer: _Answer, what: str) -> None:
        if answer.status in (401, 403):
            raise EnvironmentProblem(
                f"registry {self.host} denied {what} (HTTP {answer.status}); log in with"
                f" `docker login {self.host}` or set {USER_ENV}/{PASSWORD_ENV}"
            )
        if not 200 <= answer.status < 300:
            text = answer.body.decode("utf-8", errors="replace")
            detail = " ".join(self._masked(text).split())[:200]
            raise RegistryError(f"registry {self.host}: {what}: HTTP {answer.status} {detail}")

    def _json_object(self, body: bytes, what: str) -> dict[str, Any]:
        try:
            data: Any = parse_json(body)
        except ValueError as exc:
            raise RegistryError(
                f"registry {self.host}: {what}: answered what is not JSON ({one_line(exc, 120)})"
            ) from None
        if not isinstance(data, dict):
            raise RegistryError(
                f"registry {self.host}: {what}: answered a JSON {type(data).__name__}, not an object"
            )
        return data

    def _digest_header(self, answer: _Answer, what: str) -> str | None:
        value = answer.headers.get("Docker-Content-Digest")
        if value is not None and not DIGEST.fullmatch(value):
            raise RegistryError(
                f"registry {self.host}: {what}: answered Docker-Content-Digest {shown(value)}, not a"
                " sha256 digest"
            )
        return value

    # -- the API ----------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/: reachable and speaking the Distribution API (401 still proves that)."""
        answer = self._send("GET", "/v2/", "")
        if answer.status not in (200, 401):
            raise EnvironmentProblem(
                f"registry {self.host} answered HTTP {answer.status} to /v2/; not an OCI registry?"
            )

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest's exact bytes, at most ``MANIFEST_BYTES``; a digest reference is checked
        against those bytes; the body must be a JSON object whose mediaType (if any) is a string
        naming a manifest type, and the one its Content-Type names."""
        what = f"GET manifest {repository}:{reference}"
        answer = self._send(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            _pull(repository),
            limit=MANIFEST_BYTES,
            strict=True,
            headers={"Accept": ACCEPT},
        )
        self._check(answer, what)
        body = answer.body
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if DIGEST.fullmatch(reference) and digest != reference:
            raise RegistryError(f"registry {self.host}: manifest {reference} came back as {digest}")
        declared = self._json_object(body, what).get("mediaType")
        if declared is not None and not isinstance(declared, str):
            raise RegistryError(
                f"registry {self.host}: {what}: its mediaType is a JSON {type(declared).__name__},"
                " not a string"
            )
        sent = answer.headers.get("Content-Type", "").split(";")[0].strip()
        media_type = sent if sent in MANIFEST_TYPES else declared or DOCKER_MANIFEST
        if media_type not in MANIFEST_TYPES or (declared is not None and declared != media_type):
            raise RegistryError(
                f"registry {self.host}: {what}: answered a {shown(declared or sent)} as {shown(sent)};"
                " not an image manifest or index"
            )
        return Manifest(digest, media_type, body)

    def head_manifest(self, repository: str, reference: str) -> str | None:
        """The digest ``reference`` names now, or None when the registry has no such manifest."""
        what = f"HEAD manifest {repository}:{reference}"
        answer = self._send(
            "HEAD", f"/v2/{repository}/manifests/{reference}", _pull(repository), headers={"Accept": ACCEPT}
        )
        if answer.status == 404:
            return None
        self._check(answer, what)
        return self._digest_header(answer, what)

    def put_manifest(self, repository: str, tag: str, manifest: Manifest) -> str:
        """PUT the same bytes under ``tag``; returns the digest the registry stored."""
        self._put_manifest(repository, tag, manifest)
        return manifest.digest

    def _put_manifest(self, repository: str, tag: str, manifest: Manifest) -> _Answer:
        what = f"PUT manifest {repository}:{tag}"
        answer = self._send(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            _push(repository),
            data=manifest.body,
            headers={"Content-Type": manifest.media_type},
        )
        self._check(answer, what)
        stored = self._digest_header(answer, what) or manifest.digest
        if stored != manifest.digest:
            raise RegistryError(
                f"registry {self.host} stored {repository}:{tag} as {stored}, not {manifest.digest}"
            )
        return answer

    # -- OCI 1.1 artifacts and their referrers ---------------------------------------------------

    def put_blob(self, repository: str, data: bytes) -> str:
        """Upload a small blob (an envelope, the empty config) in one PUT; its digest. A blob the
        repository already holds is not sent again."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.has_blob(repository, digest):
            return digest
        what = f"upload blob {digest} to {repository}"
        answer = self._send("POST", f"/v2/{repository}/blobs/uploads/", _push(repository))
        self._check(answer, what)
        location = self._header(answer.headers, "Location")
        if answer.status != 202 or not location:
            raise RegistryError(
                f"registry {self.host}: {what}: answered HTTP {answer.status} with no upload Location"
            )
        url = urljoin(answer.url, location)
        separator = "&" if "?" in url else "?"
        put = self._send(
            "PUT",
            f"{url}{separator}digest={quote(digest)}",
            _push(repository),
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        self._check(put, what)
        return digest

    def attach(self, repository: str, artifact: Manifest, subject: str) -> bool:
        """PUT an artifact manifest (whose ``subject`` is ``subject``) by digest, and list it in the
        referrers tag unless the registry says it indexed the subject itself (``OCI-Subject``, a
        registry with the referrers API). Returns whether the registry indexed it."""
        answer = self._put_manifest(repository, artifact.digest, artifact)
        if self._header(answer.headers, "OCI-Subject"):
            return True
        data = artifact._json()
        referrer = Referrer(
            artifact.digest,
            str(data.get("artifactType") or ""),
            {str(k): str(v) for k, v in (data.get("annotations") or {}).items()},
        )
        self._add_to_referrers_tag(repository, subject, referrer.descriptor(len(artifact.body)))
        return False

    def _add_to_referrers_tag(self, repository: str, subject: str, descriptor: Mapping[str, Any]) -> None:
        tag = referrers_tag(subject)
        entries: list[Any] = []
        if self.head_manifest(repository, tag) is not None:
            current = self.get_manifest(repository, tag)
            if current.media_type != OCI_INDEX:
                raise RegistryError(
                    f"registry {self.host}: {repository}:{tag} is a {shown(current.media_type)}, not the"
                    " OCI index the referrers tag schema keeps; not replacing it"
                )
            found = current._json().get("manifests")
            entries = list(found) if isinstance(found, list) else []
        if any(isinstance(e, dict) and e.get("digest") == descriptor["digest"] for e in entries):
            return
        if len(entries) >= MAX_REFERRERS:
            raise RegistryError(
                f"registry {self.host}: {repository}:{tag} lists {len(entries):,} referrers already;"
                f" at most {MAX_REFERRERS:,} are kept"
            )
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*entries, dict(descriptor)]}
        raw = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()
        self.put_manifest(
            repository, tag, Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_INDEX, raw)
        )

    def referrers(self, repository: str, subject: str) -> list[Referrer]:
        """The manifests whose subject is ``subject``: from the referrers API where the registry
        has it, else from the referrers tag (``sha256-<hex>``); [] when neither lists any."""
        what = f"list referrers of {repository}@{subject}"
        answer = self._send(
            "GET",
            f"/v2/{repository}/referrers/{subject}",
            _pull(repository),
            limit=MANIFEST_BYTES,
            strict=True,
            headers={"Accept": OCI_INDEX},
        )
        kind = self._header(answer.headers, "Content-Type").split(";")[0].strip()
        if answer.status == 200 and kind == OCI_INDEX:
            return self._listed(self._json_object(answer.body, what), what)
        if answer.status not in (200, 400, 404, 405):
            self._check(answer, what)
        # No referrers API (docker-registry 2.8 answers 404): the tag schema.
        if self.head_manifest(repository, referrers_tag(subject)) is None:
            return []
        index = self.get_manifest(repository, referrers_tag(subject))
        if index.media_type != OCI_INDEX:
            raise RegistryError(f"registry {self.host}: {what}: its referrers tag is not an OCI index")
        return self._listed(index._json(), what)

    def _listed(self, index: Mapping[str, Any], what: str) -> list[Referrer]:
        entries = index.get("manifests")
        if not isinstance(entries, list):
            raise RegistryError(f"registry {self.host}: {what}: the index lists no manifests")
        if len(entries) > MAX_REFERRERS:
            raise RegistryError(
                f"registry {self.host}: {what}: {len(entries):,} referrers, more than the"
                f" {MAX_REFERRERS:,} looked at; refused"
            )
        found: list[Referrer] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str):
                raise RegistryError(f"registry {self.host}: {what}: manifests[{i}] is no descriptor")
            if not DIGEST.fullmatch(entry["digest"]):
                raise RegistryError(f"registry {self.host}: {what}: manifests[{i}] names no sha256 digest")
            notes = entry.get("annotations")
            notes = notes if isinstance(notes, dict) else {}
            kind = entry.get("artifactType")
            found.append(
                Referrer(
                    entry["digest"],
                    kind if isinstance(kind, str) else "",
                    {str(k): str(v) for k, v in notes.items() if isinstance(v, str)},
                )
            )
        return found

    def get_blob(self, repository: str, digest: str, limit: int = CONFIG_BYTES) -> bytes:
        """A small blob (an image config), at most ``limit`` bytes, checked against its digest."""
        answer = self._send(
            "GET", f"/v2/{repository}/blobs/{digest}", _pull(repository), limit=limit, strict=True
        )
        self._check(answer, f"GET blob {repository}@{digest}")
        if "sha256:" + hashlib.sha256(answer.body).hexdigest() != digest:
            raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
        return answer.body

    def has_blob(self, repository: str, digest: str) -> bool:
        answer = self._send("HEAD", f"/v2/{repository}/blobs/{digest}", _pull(repository))
        if answer.status == 404:
            return False
        self._check(answer, f"HEAD blob {repository}@{digest}")
        return True

    def mount_blob(self, repository: str, digest: str, source: str, size: int | None = None) -> str:
        """Make ``digest`` (a blob of ``source``) a blob of ``repository`` on this registry.

        Returns how: ``present`` (nothing to do), ``mounted`` (the registry linked it across, no
        bytes moved) or ``copied`` (the registry declined the mount; the blob went through here,
        at most ``size`` bytes, the manifest's word for it, or ``BLOB_BYTES`` without one).
        """
        if self.has_blob(repository, digest):
            return "present"
        scope = f"{_push(repository)} {_pull(source)}"
        answer = self._send(
            "POST",
            f"/v2/{repository}/blobs/uploads/?mount={quote(digest)}&from={quote(source, safe='/')}",
            scope,
        )
        if answer.status == 201:
            return "mounted"
        what = f"mount blob {digest} from {source} into {repository}"
        self._check(answer, what)
        # 202: an upload session instead of a mount; fill it with the blob's bytes.
        location = self._header(answer.headers, "Location")
        if not location:
            raise RegistryError(f"registry {self.host}: upload session for {repository} has no Location")
        self._copy_blob(repository, digest, source, urljoin(answer.url, location), scope, size)
        return "copied"

    def _copy_blob(
        self, repository: str, digest: str, source: str, location: str, scope: str, size: int | None
    ) -> None:
        if origin(location) != self.origin:  # checked before a byte moves (``_send`` checks again)
            raise RegistryError(
                f"registry {self.host} sent us to {shown(location)} to upload, not its own origin;"
                " not following"
            )
        with tempfile.TemporaryFile() as file:
            spool = _Spool(file)
            answer = self._send(
                "GET",
                f"/v2/{source}/blobs/{digest}",
                _pull(source),
                limit=BLOB_BYTES if size is None else size,
                strict=True,
                sink=spool,
                deadline_s=self.copy_deadline_s,
            )
            self._check(answer, f"GET blob {source}@{digest}")
            if spool.digest != digest:
                raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
            separator = "&" if "?" in location else "?"
            put = self._send(
                "PUT",
                f"{location}{separator}digest={quote(digest)}",
                scope,
                data=file,
                headers={"Content-Type": "application/octet-stream"},
                deadline_s=self.copy_deadline_s,
            )
            self._check(put, f"upload blob {digest} to {repository}")

    def tags(self, repository: str) -> list[str]:
        """Every tag of ``repository`` (following the ``Link`` pages); [] for an unknown one."""
        found: list[str] = []
        path = f"/v2/{repository}/tags/list?n=1000"
        seen = {path}
        what = f"list tags of {repository}"
        for _ in range(TAG_PAGES):
            answer = self._send("GET", path, _pull(repository), limit=TAGS_PAGE_BYTES, strict=True)
            if answer.status == 404:
                return found
            self._check(answer, what)
            tags = self._json_object(answer.body, what).get("tags") or []
            if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
                raise RegistryError(f"registry {self.host}: {what}: its tags are not a list of strings")
            found += tags
            links = parse_header_links(self._header(answer.headers, "Link"))
            link = next((str(x.get("url")) for x in links if x.get("rel") == "next"), "")
            if not link.startswith("/"):
                return found
            if link in seen:
                raise RegistryError(f"registry {self.host}: {what}: its pages link in a loop")
            seen.add(link)
            path = link
        raise RegistryError(f"registry {self.host}: {what}: more than {TAG_PAGES} pages")


def open_registry(
    host: str, backoff: Backoff = Backoff(), on_retry: Callable[[str], None] = lambda _: None
) -> Registry:
    """A client for ``host`` with the credentials found for it (environment, Docker config)."""
    return Registry(host, find_credentials(host), backoff=backoff, on_retry=on_retry)


def _before(seconds: float, request: Callable[[], requests.Response]) -> requests.Response:
    """``request`` (up to its status line and headers) if it answers within ``seconds``.

    The per-read timeout bounds each read, not the whole: a server that drips its status line or
    headers a byte at a time (up to http.client's 100 lines of 64 KiB) would hold an operation for
    hours. The request runs in a thread of its own and is abandoned at the deadline; it then ends
    on its own read timeout, and a response that still comes is closed, never used.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()
    abandoned = threading.Event()

    def run() -> None:
        try:
            outcome["response"] = request()
        except BaseException as exc:  # handed to the caller's thread, which raises it
            outcome["error"] = exc
        finally:
            finished.set()
            if abandoned.is_set() and "response" in outcome:
                outcome["response"].close()

    threading.Thread(target=run, name="imagekit-registry-request", daemon=True).start()
    if not finished.wait(max(seconds, 0.0)):
        abandoned.set()
        if finished.is_set() and "response" in outcome:  # it came in between: still too late
            outcome["response"].close()
        raise requests.Timeout("the status line and headers did not come before the deadline")
    if "error" in outcome:
        raise outcome["error"]
    response: requests.Response = outcome["response"]
    return response


def _rewind(data: Any) -> None:
    if hasattr(data, "seek"):
        data.seek(0)


def _pull(repository: str) -> str:
    return f"repository:{repository}:pull"


def _push(repository: str) -> str:
    return f"repository:{repository}:pull,push"
