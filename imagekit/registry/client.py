"""A small OCI Distribution API client: ping, manifests by digest, tags, with auth and retries.

Promotion needs only manifests: a tag is a manifest PUT under a name, and a manifest whose layers
the registry already holds is accepted without any blob moving. Docker pushes the layers (once,
to the staging tag). Where staging is another repository of the same registry, each blob is
mounted across (``POST /v2/<target>/blobs/uploads/?mount=<digest>&from=<source>``: no bytes
move); only a registry that refuses the mount gets the blob copied through this client.

Credentials come from IMAGEKIT_REGISTRY_USER/IMAGEKIT_REGISTRY_PASSWORD or the Docker config's
``auths`` (``imagekit.registry.credentials``); they live only in request headers and are never part of a
message or a record: an error body is shown with the login masked (``Registry._masked``).

Transport (bounded reads, deadlines, redirects, origin-scoped credentials) is
``imagekit.registry.transport``'s; the manifest record and its checks ``imagekit.registry.manifest``'s.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Mapping
from typing import IO, Any
from urllib.parse import quote, urljoin

from requests.utils import parse_header_links

from imagekit.core.errors import EnvironmentProblem, RegistryError, one_line
from imagekit.core.limits import (
    BLOB_BYTES,
    CONFIG_BYTES,
    MANIFEST_BYTES,
    MAX_REFERRERS,
    TAG_PAGES,
    TAGS_PAGE_BYTES,
)
from imagekit.core.naming import DIGEST
from imagekit.core.platforms import Platform
from imagekit.core.safetypes import parse_json
from imagekit.core.text import printable, redact, shown
from imagekit.registry.credentials import PASSWORD_ENV, USER_ENV, find_credentials
from imagekit.registry.manifest import (
    ACCEPT,
    DOCKER_MANIFEST,
    INDEX_TYPES,
    MANIFEST_TYPES,
    OCI_INDEX,
    Manifest,
    Referrer,
    check_index,
    referrers_tag,
)
from imagekit.registry.transport import (
    DEFAULT_BACKOFF,
    Answer,
    Backoff,
    Spool,
    Transport,
    deadline_setting,
    origin,
)

__all__ = ["Backoff", "Registry", "open_registry"]  # Backoff: open_registry takes one


class Registry(Transport):
    """One registry host's Distribution API: manifests, blobs, tags and referrers, each call one
    operation of the transport (retried, bounded, before its deadline)."""

    # -- checking answers -------------------------------------------------------------------------

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

    def _check(self, answer: Answer, what: str) -> None:
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

    def _digest_header(self, answer: Answer, what: str) -> str | None:
        value = answer.headers.get("Docker-Content-Digest")
        if value is not None and not DIGEST.fullmatch(value):
            raise RegistryError(
                f"registry {self.host}: {what}: answered Docker-Content-Digest {shown(value)}, not a"
                " sha256 digest"
            )
        return value

    # -- the API ----------------------------------------------------------------------------------

    def ping(self) -> None:
        """GET /v2/: reachable and speaking the Distribution API (401 still proves that). Any
        refusal here (a redirect off http(s), an odd challenge) is about the registry configured,
        not about an image: an EnvironmentProblem."""
        try:
            answer = self._send("GET", "/v2/", "")
        except RegistryError as exc:
            raise EnvironmentProblem(f"{exc.message}; is {self.host} an OCI registry?") from None
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

    def _head(self, repository: str, reference: str) -> Answer | None:
        """HEAD the manifest ``reference`` names: its answer, or None when the registry has none."""
        answer = self._send(
            "HEAD", f"/v2/{repository}/manifests/{reference}", _pull(repository), headers={"Accept": ACCEPT}
        )
        if answer.status == 404:
            return None
        self._check(answer, f"HEAD manifest {repository}:{reference}")
        return answer

    def head_manifest(self, repository: str, reference: str) -> str | None:
        """The digest ``reference`` names now, or None when the registry has no such manifest."""
        answer = self._head(repository, reference)
        return (
            None if answer is None else self._digest_header(answer, f"HEAD manifest {repository}:{reference}")
        )

    def tag_digest(self, repository: str, tag: str) -> str | None:
        """The manifest digest ``tag`` names now, None when no manifest has that tag; where the
        HEAD answer carries no Docker-Content-Digest, the digest of the bytes GET returns (a
        missing header must never read as a free tag)."""
        answer = self._head(repository, tag)
        if answer is None:
            return None
        found = self._digest_header(answer, f"HEAD manifest {repository}:{tag}")
        return found or self.get_manifest(repository, tag).digest

    def put_manifest(self, repository: str, tag: str, manifest: Manifest) -> str:
        """PUT the same bytes under ``tag``; returns the digest the registry stored."""
        self._put_manifest(repository, tag, manifest)
        return manifest.digest

    def _put_manifest(self, repository: str, tag: str, manifest: Manifest) -> Answer:
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

    def read_back_index(
        self, repository: str, reference: str, index: Manifest, expected: Mapping[str, Manifest]
    ) -> None:
        """GET ``reference`` (a tag or the digest just written) and check that it is ``index`` and
        that each entry resolves, in ``repository`` itself, to the manifest ``expected`` names for
        its platform: a pull through the index gets exactly the promoted images."""
        where = f"registry {self.host}: {repository}:{reference}"
        found = self.get_manifest(repository, reference)
        if found.digest != index.digest:
            raise RegistryError(f"{where} names {found.digest}, not the index {index.digest} just written")
        check_index(found, expected, where)
        for manifest in expected.values():
            # by digest: get_manifest checks the bytes against it, so nothing else can answer
            self.get_manifest(repository, manifest.digest)

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
        answer = self._send("GET", f"/v2/{repository}/blobs/{digest}", _pull(repository), limit=limit)
        self._check(answer, f"GET blob {repository}@{digest}")
        if "sha256:" + hashlib.sha256(answer.body).hexdigest() != digest:
            raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
        return answer.body

    def image_for(self, repository: str, digest: str, platform: Platform) -> tuple[Manifest, bytes]:
        """The image manifest ``repository@digest`` names for ``platform`` (an index resolved to
        that platform's child) and its config's bytes: what a node reads before any layer."""
        manifest = self.get_manifest(repository, digest)
        if manifest.media_type in INDEX_TYPES:
            child = manifest.child_for(platform)
            if child is None:
                raise RegistryError(
                    f"registry {self.host}: {repository}@{digest} is an index with no image for"
                    f" {platform.name}"
                )
            manifest = self.get_manifest(repository, child)
        config = manifest.config_digest
        if config is None or not DIGEST.fullmatch(config):
            raise RegistryError(f"registry {self.host}: {repository}@{manifest.digest} names no image config")
        return manifest, self.get_blob(repository, config)

    def blob_length(self, repository: str, digest: str) -> int | None:
        """The Content-Length the registry answers to a HEAD of the blob; None when it gives none."""
        answer = self._send("HEAD", f"/v2/{repository}/blobs/{digest}", _pull(repository))
        self._check(answer, f"HEAD blob {repository}@{digest}")
        value = self._header(answer.headers, "Content-Length")
        return int(value) if value.isdigit() and len(value) <= 19 else None

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

    def read_blob(self, repository: str, digest: str, file: IO[bytes], size: int | None) -> None:
        """A blob of any size streamed into ``file`` (never memory), at most ``size`` bytes (the
        manifest's word for it; ``BLOB_BYTES`` without one), checked against its digest."""
        spool = Spool(file)
        answer = self._send(
            "GET",
            f"/v2/{repository}/blobs/{digest}",
            _pull(repository),
            limit=BLOB_BYTES if size is None else size,
            sink=spool,
            deadline_s=self.copy_deadline_s,
        )
        self._check(answer, f"GET blob {repository}@{digest}")
        if spool.digest != digest:
            raise RegistryError(f"registry {self.host}: blob {digest} came back with other content")
        file.seek(0)

    def _copy_blob(
        self, repository: str, digest: str, source: str, location: str, scope: str, size: int | None
    ) -> None:
        if origin(location) != self.origin:  # checked before a byte moves (``_send`` checks again)
            raise RegistryError(
                f"registry {self.host} sent us to {shown(location)} to upload, not its own origin;"
                " not following"
            )
        with tempfile.TemporaryFile() as file:
            self.read_blob(source, digest, file, size)
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
            answer = self._send("GET", path, _pull(repository), limit=TAGS_PAGE_BYTES)
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
    host: str, backoff: Backoff = DEFAULT_BACKOFF, on_retry: Callable[[str], None] = lambda _: None
) -> Registry:
    """A client for ``host`` with the credentials found for it (environment, Docker config) and
    the small answers' deadline the environment sets (``DEADLINE_ENV``; a bad one: InputError)."""
    deadline_s = deadline_setting()  # before the credentials: a bad setting is the first word
    return Registry(host, find_credentials(host), backoff=backoff, on_retry=on_retry, deadline_s=deadline_s)


def _pull(repository: str) -> str:
    return f"repository:{repository}:pull"


def _push(repository: str) -> str:
    return f"repository:{repository}:pull,push"
