"""The requirement a digest is held to (`attest verify`'s flags; `images` and `k8s` name a policy)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from imagekit.attest.required import requirement, split_digest_reference
from imagekit.attest.statements import Requirement
from imagekit.core.errors import InputError


def test_the_flags_make_one_requirement() -> None:
    assert requirement("validated", None, None) == Requirement("validated", None, None)
    assert requirement("checked", " H100 ", "12h") == Requirement("checked", "H100", timedelta(hours=12))


@pytest.mark.parametrize(
    ("policy", "gpu", "max_age", "line"),
    [
        ("gpu-validated", None, None, "--policy 'gpu-validated': use validated or checked"),
        (
            "validated",
            " ",
            None,
            "--gpu ' ': an empty value requires nothing; name a GPU product (H100, GH200)",
        ),
        ("validated", None, "", "--max-age '': an empty value requires nothing; give a number and a unit"),
    ],
)
def test_a_wrong_flag_is_one_line(policy: str, gpu: str | None, max_age: str | None, line: str) -> None:
    with pytest.raises(InputError) as caught:
        requirement(policy, gpu, max_age)
    assert caught.value.message.startswith(line)


DIGEST = "sha256:" + "a" * 64


def test_a_reference_by_digest_names_its_registry_repository_and_digest() -> None:
    assert split_digest_reference(f"127.0.0.1:5000/team/torch@{DIGEST}") == (
        "127.0.0.1:5000",
        "team/torch",
        DIGEST,
    )


@pytest.mark.parametrize(
    ("reference", "line"),
    [
        ("127.0.0.1:5000/team/torch:2.4", "name the image by digest, REGISTRY/REPOSITORY@sha256:<64 hex>"),
        ("127.0.0.1:5000/team/torch@sha256:abc", "not an image reference"),
        (f"team/torch@{DIGEST}", "names no registry host; write it in full"),
    ],
)
def test_a_reference_not_by_digest_is_one_line(reference: str, line: str) -> None:
    with pytest.raises(InputError) as caught:
        split_digest_reference(reference)
    assert line in caught.value.message, caught.value.message
