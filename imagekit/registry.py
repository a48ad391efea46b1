"""A small OCI Distribution API client: ping, manifests by digest, tags, with auth and retries.

Promotion needs only manifests: a tag is a manifest PUT under a name, and a manifest whose layers
the registry already holds is accepted without any blob moving. Docker pushes the layers (once,
to the staging tag). Where staging is another repository of the same registry, each blob is
mounted across (``POST /v2/<target>/blobs/uploads/?mount=<digest>&from=<source>``: no bytes
move); only a registry that refuses the mount gets the blob copied through this client.

Credentials come from IMAGEKIT_REGISTRY_USER/IMAGEKIT_REGISTRY_PASSWORD or the Docker config's
``auths``; they live only in request headers and are never part of a message or a record.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from imagekit.errors import EnvironmentProblem, one_line
from imagekit.naming import DIGEST

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
ACCEPT = ", ".join(MANIFEST_TYPES)
USER_ENV = "IMAGEKIT_REGISTRY_USER"
PASSWORD_ENV = "IMAGEKIT_REGISTRY_PASSWORD"
TIMEOUT_S = 30.0
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


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


def docker_config_path() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


def find_credentials(registry: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The environment's pair first, then the Docker config's ``auths`` entry for ``registry``."""
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user and password:
        return Credentials(user, password)
    try:
        config = json.loads(docker_config_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
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


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="..."`` -> ("bearer", {realm, service, ...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    def _json(self) -> dict[str, Any]:
        try:
            data: Any = json.loads(self.body)
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
    def children(self) -> list[str]:
        """An index's (manifest list's) image manifests, by digest; none for a single image."""
        return [
            str(m["digest"])
            for m in self._json().get("manifests") or ()
            if isinstance(m, dict)
            and m.get("mediaType") in MANIFEST_TYPES
            and DIGEST.fullmatch(str(m.get("digest")))
        ]


class RegistryError(Exception):
    """The registry refused one request (4xx other than auth retries); not transient."""


class Registry:
    """One registry host; every call retries connection errors, 5xx and 429 with backoff."""

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        backoff: Backoff = Backoff(),
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.host = host
        self.base = f"{'http' if is_local(host) else 'https'}://{host}"
        self.credentials = credentials
        self.backoff = backoff
        self.sleep = sleep
        self.on_retry = on_retry
        self.session = requests.Session()
        self.session.trust_env = False  # a proxy from the environment must not see credentials
        self._tokens: dict[str, str] = {}  # scope -> bearer token
        self.retries = 0  # how many requests were retried (for reports and tests)

    def close(self) -> None:
        self.session.close()

    # -- transport -----------------------------------------------------------------------------

    def _send(self, method: str, path: str, scope: str, **kwargs: Any) -> requests.Response:
        """One request, retried while transient, answered with auth when challenged.

        ``path`` is below the registry's base, or a full URL on the registry's own host (an upload
        location the registry handed out); a file given as ``data`` is rewound for every try."""
        url = path if path.startswith(("http://", "https://")) else self.base + path
        if registry_hostname(urlsplit(url).netloc) != registry_hostname(self.host):
            raise RegistryError(f"registry {self.host} sent us to {urlsplit(url).netloc}; not following")
        delays = self.backoff.delays()
        while True:
            try:
                response = self._authorised(method, url, scope, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if not delays:
                    raise EnvironmentProblem(
                        f"registry {self.host} unreachable after {self.backoff.attempts} attempts:"
                        f" {one_line(exc)}"
                    ) from None
                problem = type(exc).__name__
            else:
                if response.status_code not in _TRANSIENT_STATUS:
                    return response
                if not delays:
                    raise EnvironmentProblem(
                        f"registry {self.host} kept answering HTTP {response.status_code} to"
                        f" {method} {path} after {self.backoff.attempts} attempts"
                    )
                problem = f"HTTP {response.status_code}"
            delay = delays.pop(0)
            self.retries += 1
            self.on_retry(f"registry {self.host}: {method} {path}: {problem}; retrying in {delay:g}s")
            self.sleep(delay)

    def _authorised(self, method: str, url: str, scope: str, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}))
        token = self._tokens.get(scope)
        if token:
            headers["Authorization"] = token
        _rewind(kwargs.get("data"))
        response = self.session.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
        if response.status_code != 401 or (token and token.startswith("Basic")):
            return response
        scheme, params = _challenge(response.headers.get("WWW-Authenticate", ""))
        if scheme == "basic" and self.credentials:
            self._tokens[scope] = self.credentials.basic()
        elif scheme == "bearer" and params.get("realm"):
            self._tokens[scope] = "Bearer " + self._bearer(params, scope)
        else:
            return response
        headers["Authorization"] = self._tokens[scope]
        _rewind(kwargs.get("data"))
        return self.session.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)

    def _bearer(self, params: Mapping[str, str], scope: str) -> str:
        query: dict[str, str | list[str]] = {"service": params.get("service", "")}
        if scope:
            query["scope"] = scope.split(" ")  # a mount asks for two repositories at once
        if self.credentials:
            self._check_realm(params["realm"])
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        response = self.session.get(params["realm"], params=query, headers=headers, timeout=TIMEOUT_S)
        if response.status_code != 200:
            raise EnvironmentProblem(
                f"registry {self.host}: token service answered HTTP {response.status_code}; check the"
                f" credentials in {docker_config_path()} or {USER_ENV}/{PASSWORD_ENV}"
            )
        body = response.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise EnvironmentProblem(f"registry {self.host}: token service returned no token")
        return str(token)

    def _check_realm(self, realm: str) -> None:
        """Refuse to send the password in clear to another host than the registry.

        A token service over plain http on the registry's own host, or for a local registry,
        is what a test or an in-house registry runs; elsewhere it is a challenge that would
        hand the credentials to whoever answers (or listens) there.
        """
        url = urlsplit(realm)
        if url.scheme.lower() != "http" or is_local(self.host):
            return
        if (url.hostname or "").lower() != registry_hostname(self.host).lower():
            raise EnvironmentProblem(
                f"registry {self.host} sends for a token to {url.scheme}://{url.netloc}, another host"
                " over plain http; refusing to send the credentials there"
            )

    def _check(self, response: requests.Response, what: str) -> None:
        if response.status_code in (401, 403):
            raise EnvironmentProblem(
                f"registry {self.host} denied {what} (HTTP {response.status_code}); log in with"
                f" `docker login {self.host}` or set {USER_ENV}/{PASSWORD_ENV}"
            )
        if response.status_code >= 400:
            detail = " ".join(response.text.split())[:200]
            raise RegistryError(f"registry {self.host}: {what}: HTTP {response.status_code} {detail}")

    # -- the API ----------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/: reachable and speaking the Distribution API (401 still proves that)."""
        response = self._send("GET", "/v2/", "")
        if response.status_code not in (200, 401):
            raise EnvironmentProblem(
                f"registry {self.host} answered HTTP {response.status_code} to /v2/; not an OCI registry?"
            )

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest's exact bytes; a digest reference is checked against those bytes."""
        response = self._send(
            "GET", f"/v2/{repository}/manifests/{reference}", _pull(repository), headers={"Accept": ACCEPT}
        )
        self._check(response, f"GET manifest {repository}:{reference}")
        body = response.content
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if DIGEST.fullmatch(reference) and digest != reference:
            raise RegistryError(f"registry {self.host}: manifest {reference} came back as {digest}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            media_type = str(json.loads(body).get("mediaType") or DOCKER_MANIFEST)
        return Manifest(digest, media_type, body)

    def head_manifest(self, repository: str, reference: str) -> str | None:
        """The digest ``reference`` names now, or None when the registry has no such manifest."""
        response = self._send(
            "HEAD", f"/v2/{repository}/manifests/{reference}", _pull(repository), headers={"Accept": ACCEPT}
        )
        if response.status_code == 404:
            return None
        self._check(response, f"HEAD manifest {repository}:{reference}")
        return response.headers.get("Docker-Content-Digest")

    def put_manifest(self, repository: str, tag: str, manifest: Manifest) -> str:
        """PUT the same bytes under ``tag``; returns the digest the registry stored."""
        response = self._send(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            _push(repository),
            data=manifest.body,
            headers={"Content-Type": manifest.media_type},
        )
        self._check(response, f"PUT manifest {repository}:{tag}")
        stored = response.headers.get("Docker-Content-Digest") or manifest.digest
        if stored != manifest.digest:
            raise RegistryError(
                f"registry {self.host} stored {repository}:{tag} as {stored}, not {manifest.digest}"
            )
        return stored

    def get_blob(self, repository: str, digest: str, limit: int = 8 << 20) -> bytes:
        """A small blob (an image config), checked against its digest."""
        response = self._send("GET", f"/v2/{repository}/blobs/{digest}", _pull(repository))
        self._check(response, f"GET blob {repository}@{digest}")
        body = response.content
        if len(body) > limit:
            raise RegistryError(f"registry {self.host}: blob {digest} is larger than {limit} bytes")
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
        return body

    def has_blob(self, repository: str, digest: str) -> bool:
        response = self._send("HEAD", f"/v2/{repository}/blobs/{digest}", _pull(repository))
        if response.status_code == 404:
            return False
        self._check(response, f"HEAD blob {repository}@{digest}")
        return True

    def mount_blob(self, repository: str, digest: str, source: str) -> str:
        """Make ``digest`` (a blob of ``source``) a blob of ``repository`` on this registry.

        Returns how: ``present`` (nothing to do), ``mounted`` (the registry linked it across, no
        bytes moved) or ``copied`` (the registry declined the mount; the blob went through here).
        """
        if self.has_blob(repository, digest):
            return "present"
        scope = f"{_push(repository)} {_pull(source)}"
        response = self._send(
            "POST",
            f"/v2/{repository}/blobs/uploads/?mount={quote(digest)}&from={quote(source, safe='/')}",
            scope,
        )
        if response.status_code == 201:
            return "mounted"
        self._check(response, f"mount blob {digest} from {source} into {repository}")
        # 202: an upload session instead of a mount; fill it with the blob's bytes.
        self._copy_blob(repository, digest, source, response.headers.get("Location", ""), scope)
        return "copied"

    def _copy_blob(self, repository: str, digest: str, source: str, location: str, scope: str) -> None:
        if not location:
            raise RegistryError(f"registry {self.host}: upload session for {repository} has no Location")
        with tempfile.TemporaryFile() as spool:
            response = self._send("GET", f"/v2/{source}/blobs/{digest}", _pull(source), stream=True)
            self._check(response, f"GET blob {source}@{digest}")
            sha = hashlib.sha256()
            with response:
                for chunk in response.iter_content(1 << 20):
                    sha.update(chunk)
                    spool.write(chunk)
            if "sha256:" + sha.hexdigest() != digest:
                raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
            separator = "&" if "?" in location else "?"
            target = location if location.startswith(("http://", "https://")) else self.base + location
            put = self._send(
                "PUT",
                f"{target}{separator}digest={quote(digest)}",
                scope,
                data=spool,
                headers={"Content-Type": "application/octet-stream"},
            )
            self._check(put, f"upload blob {digest} to {repository}")

    def tags(self, repository: str) -> list[str]:
        """Every tag of ``repository`` (following the ``Link`` pages); [] for an unknown one."""
        found: list[str] = []
        path: str | None = f"/v2/{repository}/tags/list?n=1000"
        while path:
            response = self._send("GET", path, _pull(repository))
            if response.status_code == 404:
                return found
            self._check(response, f"list tags of {repository}")
            found += response.json().get("tags") or []
            link = response.links.get("next", {}).get("url")
            path = link if link and link.startswith("/") else None
        return found


def open_registry(
    host: str, backoff: Backoff = Backoff(), on_retry: Callable[[str], None] = lambda _: None
) -> Registry:
    """A client for ``host`` with the credentials found for it (environment, Docker config)."""
    return Registry(host, find_credentials(host), backoff=backoff, on_retry=on_retry)


def _rewind(data: Any) -> None:
    if hasattr(data, "seek"):
        data.seek(0)


def _pull(repository: str) -> str:
    return f"repository:{repository}:pull"


def _push(repository: str) -> str:
    return f"repository:{repository}:pull,push"
