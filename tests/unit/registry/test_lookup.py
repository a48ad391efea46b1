"""The digest a base's tag names now (`imagekit pin-bases`): asked of the registry the engine would pull
from, with that registry's own login from the Docker config, never the publishing registry's."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.core.errors import InputError, RegistryError
from imagekit.registry.lookup import registry_of
from tests.unit.plan.test_pins import DEVEL, ONE


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (
            DEVEL,
            ("registry-1.docker.io", "index.docker.io", "nvidia/cuda", "12.1.1-cudnn8-devel-ubuntu22.04"),
        ),
        ("ubuntu", ("registry-1.docker.io", "index.docker.io", "library/ubuntu", "latest")),
        ("docker.io/library/debian:12", ("registry-1.docker.io", "index.docker.io", "library/debian", "12")),
        ("nvcr.io/nvidia/pytorch:23.10-py3", ("nvcr.io", "nvcr.io", "nvidia/pytorch", "23.10-py3")),
        ("127.0.0.1:5000/team/base:v1", ("127.0.0.1:5000", "127.0.0.1:5000", "team/base", "v1")),
    ],
)
def test_pin_bases_asks_the_registry_the_engine_would_pull_from(
    reference: str, expected: tuple[str, str, str, str]
) -> None:
    assert registry_of(reference) == expected


def test_pin_bases_never_sends_the_publishing_registrys_login_to_a_bases_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # IMAGEKIT_REGISTRY_USER/_PASSWORD name no host: they are --registry's login, and pin-bases asks
    # Docker Hub, nvcr.io and mirrors. Only the Docker config's entry for that host goes there.
    from imagekit.registry import lookup

    monkeypatch.setenv("IMAGEKIT_REGISTRY_USER", "ci")
    monkeypatch.setenv("IMAGEKIT_REGISTRY_PASSWORD", "publish-secret")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text('{"auths": {"nvcr.io": {"auth": "JG9hdXRodG9rZW46bmdj"}}}')
    sent: dict[str, object] = {}

    class Asked:
        def __init__(self, host: str, credentials: object, **_: object) -> None:
            sent[host] = credentials

        def tag_digest(self, repository: str, tag: str) -> str:
            return ONE

        def close(self) -> None:
            pass

    monkeypatch.setattr(lookup, "Registry", Asked)
    assert lookup.manifest_digest("nvidia/cuda:12.1.1-base-ubuntu22.04") == ONE
    assert lookup.manifest_digest("nvcr.io/nvidia/pytorch:23.10-py3") == ONE
    assert sent["registry-1.docker.io"] is None
    nvcr = sent["nvcr.io"]
    assert getattr(nvcr, "username", None) == "$oauthtoken" and getattr(nvcr, "password", None) == "ngc"


@pytest.mark.parametrize("reference", ["nvidia/cuda@sha256:" + "a" * 64, "", "Not A Reference", "a" * 300])
def test_what_is_no_reference_by_tag_is_one_line_and_asks_nobody(
    reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.registry import lookup

    monkeypatch.setattr(lookup, "Registry", None)  # asking any registry would raise TypeError
    with pytest.raises(InputError) as caught:
        lookup.manifest_digest(reference)
    assert "not an image reference by tag" in caught.value.message and "\n" not in caught.value.message


def test_a_tag_the_registry_does_not_have_is_a_registry_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imagekit.registry import lookup

    closed: list[str] = []

    class Missing:
        def __init__(self, host: str, credentials: object, **_: object) -> None:
            self.host = host

        def tag_digest(self, repository: str, tag: str) -> None:
            return None

        def close(self) -> None:
            closed.append(self.host)

    monkeypatch.setattr(lookup, "Registry", Missing)
    with pytest.raises(RegistryError) as caught:
        lookup.manifest_digest("nvcr.io/nvidia/pytorch:99.99-py3")
    assert caught.value.message == (
        "registry nvcr.io: nvidia/pytorch has no tag 99.99-py3 (base nvcr.io/nvidia/pytorch:99.99-py3)"
    )
    assert closed == ["nvcr.io"]  # the connection is closed, found or not
