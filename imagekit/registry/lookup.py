"""The digest a tag names now, asked of the registry the reference names (``imagekit pin-bases``).

A reference without a registry host is Docker Hub's, as the engine reads it: its API is at
registry-1.docker.io, a one-part name is under ``library/``, and a login the Docker config keeps
for it is under ``https://index.docker.io/v1/``. Any other registry (nvcr.io, a mirror,
127.0.0.1:5000) is asked at its own host, with the login the Docker config keeps for it
(``imagekit.registry.credentials``): never ``IMAGEKIT_REGISTRY_USER``/``_PASSWORD``, which are the
login of the registry imagekit publishes to and name no host, so they would go to every registry
a matrix's bases come from.
"""

from __future__ import annotations

from imagekit.core import naming
from imagekit.core.errors import InputError, RegistryError
from imagekit.core.text import shown
from imagekit.registry.client import Registry
from imagekit.registry.credentials import find_credentials
from imagekit.registry.transport import deadline_setting

DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_LOGIN = "index.docker.io"  # the key `docker login` writes: https://index.docker.io/v1/
_DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", DOCKER_HUB_API)


def registry_of(reference: str) -> tuple[str, str, str, str]:
    """(API host, host whose login is used, repository, tag) of ``name[:tag]``; no tag is latest."""
    if "@" in reference or not naming.is_reference(reference):
        raise InputError(f"{shown(reference)}: not an image reference by tag (name[:tag])")
    name, tag = naming.split_reference(reference)
    named = naming.registry_and_path(name)
    host, path = named if named is not None else (DOCKER_HUB_API, name)
    if host in _DOCKER_HUB_NAMES:
        host, login = DOCKER_HUB_API, DOCKER_HUB_LOGIN
        path = path if "/" in path else f"library/{path}"
    else:
        login = host
    return host, login, path, tag or "latest"


def manifest_digest(reference: str) -> str:
    """The digest of the manifest (an index, for a multi-platform image) ``reference``'s tag names
    now. A tag the registry does not have is a RegistryError naming it; an unreachable registry an
    EnvironmentProblem (the transport's)."""
    host, login, repository, tag = registry_of(reference)
    registry = Registry(host, find_credentials(login, environment_pair=False), deadline_s=deadline_setting())
    try:
        digest = registry.tag_digest(repository, tag)
    finally:
        registry.close()
    if digest is None:
        raise RegistryError(f"registry {host}: {repository} has no tag {tag} (base {reference})")
    return digest
