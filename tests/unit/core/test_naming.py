"""Image naming: references, tags of every kind, label keys."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from imagekit.core import naming
from imagekit.core.errors import InputError
from imagekit.core.naming import split_reference
from imagekit.engine.client import repo_digest

# -- references ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("busybox", ("busybox", None)),
        ("busybox:1.36", ("busybox", "1.36")),
        ("nvidia/cuda:12.1.1-devel-ubuntu22.04", ("nvidia/cuda", "12.1.1-devel-ubuntu22.04")),
        ("localhost:5000/team/app", ("localhost:5000/team/app", None)),
        ("localhost:5000/team/app:v1", ("localhost:5000/team/app", "v1")),
        ("127.0.0.1:5000/app@sha256:" + "b" * 64, ("127.0.0.1:5000/app", "sha256:" + "b" * 64)),
        ("app@sha256:" + "c" * 64, ("app", "sha256:" + "c" * 64)),
    ],
)
def test_split_reference(ref: str, expected: tuple[str, str | None]) -> None:
    assert split_reference(ref) == expected


def test_split_reference_with_tag_and_digest() -> None:
    ref = "nvidia/cuda:12.1@sha256:" + "d" * 64
    assert split_reference(ref) == ("nvidia/cuda", "sha256:" + "d" * 64)


def test_repo_digest_picks_the_references_repository() -> None:
    image = {
        "RepoDigests": [
            "mirror.local/cuda@sha256:" + "1" * 64,
            "nvidia/cuda@sha256:" + "2" * 64,
        ]
    }
    assert repo_digest(image, "nvidia/cuda:12.1") == "nvidia/cuda@sha256:" + "2" * 64
    assert repo_digest(image, "mirror.local/cuda") == "mirror.local/cuda@sha256:" + "1" * 64
    assert repo_digest(image, "nvidia/cudax:12.1") is None
    assert repo_digest(image, "nvidia:12.1") is None


@pytest.mark.parametrize("image", [{}, {"RepoDigests": None}, {"RepoDigests": []}])
def test_repo_digest_of_a_local_image_is_none(image: dict[str, Any]) -> None:
    assert repo_digest(image, "busybox:latest") is None


# -- tags ------------------------------------------------------------------------------------------------


def test_every_tag_kind_comes_from_one_place() -> None:
    digest = "0123456789ab" + "f" * 52
    tags = naming.immutable_tags(
        "2.1.2-cuda12.1",
        ["{readable}-{date}", "{readable}-{digest}", "{readable}"],
        date(2026, 11, 30),
        digest,
    )
    assert tags == ("2.1.2-cuda12.1", "2.1.2-cuda12.1-20261130", "2.1.2-cuda12.1-0123456789ab")
    assert naming.staging_tag(digest) == "staging-0123456789ab"
    assert naming.staging_tag("sha256:" + digest) == "staging-0123456789ab"
    assert naming.published_tags(tags[:2], "checked", "c") == (
        "2.1.2-cuda12.1-checked",
        "2.1.2-cuda12.1-20261130-checked",
    )
    assert naming.published_tags(tags[:1], "validated", "c") == ("2.1.2-cuda12.1",)
    names = naming.ImageNames(naming.repository("ghcr.io", "acme/pytorch"), tags[:2])
    assert names.readable == "2.1.2-cuda12.1"
    assert names.references() == (
        "ghcr.io/acme/pytorch:2.1.2-cuda12.1",
        "ghcr.io/acme/pytorch:2.1.2-cuda12.1-20261130",
    )
    assert (
        naming.by_digest("ghcr.io/acme/pytorch", "sha256:" + digest)
        == f"ghcr.io/acme/pytorch@sha256:{digest}"
    )


def test_tags_over_the_engines_limit_or_malformed_are_refused() -> None:
    with pytest.raises(InputError, match="longer than 128"):
        naming.immutable_tags("x" * 120, ["{readable}-{date}"], date(2026, 11, 30), "a" * 64)
    with pytest.raises(InputError, match="not a valid image tag"):
        naming.immutable_tags("x", ["-{readable}"], date(2026, 11, 30), "a" * 64)
    with pytest.raises(InputError, match="would be longer than 128"):
        naming.published_tags(["x" * 125], "built", "cell")
    with pytest.raises(InputError, match="names no tag"):
        naming.published_tags([], "built", "cell")


def test_readable_tags_and_cell_ids() -> None:
    values = naming.tag_values(
        torch="2.1.0a0+32f93b1",
        cuda="12.2",
        cudnn_major=8,
        flavour="devel",
        os="ubuntu22.04",
        python="3.10",
        base="ngc",
    )
    assert naming.readable_tag("{torch}-{stack}-{flavour}-{os}", values, "here") == (
        "2.1.0a0-32f93b1-cuda12.2-cudnn8-devel-ubuntu22.04"
    )
    assert naming.stack_label("cpu", None) == "cpu"
    assert naming.cell_id("deb", "2.5.1", "cpu", "3.11", "runtime") == "deb-torch2.5.1-cpu-py3.11-runtime"
    with pytest.raises(InputError, match=r"here: unknown placeholder \{nope\}"):
        naming.readable_tag("{nope}", values, "here")
    with pytest.raises(InputError, match="not a valid image tag"):
        naming.readable_tag("{os}/{torch}", values, "here")


def test_placeholders_are_plain_substitution() -> None:
    with pytest.raises(InputError, match="unknown placeholder"):
        naming.fill_placeholders("{torch.__class__}", {"torch": "2.1"}, "here")
    with pytest.raises(InputError, match="unbalanced brace"):
        naming.fill_placeholders("{torch", {"torch": "2.1"}, "here")
    assert naming.fill_placeholders("{a}-{a}", {"a": "x"}, "here") == "x-x"
    with pytest.raises(InputError, match="unbalanced brace"):  # a value never brings new placeholders
        naming.fill_placeholders("{a}", {"a": "{b}"}, "here")


def test_labels_and_expectations() -> None:
    labels = {
        naming.label("torch"): "2.1.2",
        naming.label("cuda"): "12.1",
        naming.label("cudnn"): "",
        "x": "y",
    }
    assert naming.expectations(labels) == {"torch": "2.1.2", "cuda": "12.1"}
    assert naming.CHECK_SCRIPT_LABEL == "imagekit.check-script"
    assert naming.annotation("cell") == "imagekit/cell"
    assert naming.is_reference("nvidia/cuda:12.1.1-devel-ubuntu22.04")
    assert not naming.is_reference("a" * 256)
    assert not naming.is_reference("Nvidia/cuda")


def test_a_reference_names_a_port_a_registry_can_listen_on() -> None:
    assert naming.is_reference("127.0.0.1:65535/a/b:1")
    assert not naming.is_reference("127.0.0.1:65536/a/b:1")
    assert not naming.is_reference("a/" + "b" * 300)
    assert naming.is_reference("ubuntu:22.04") and naming.is_reference("sha256:" + "a" * 64)


def test_placeholders_are_listed_in_order() -> None:
    assert naming.placeholders("{readable}-{date}") == ("readable", "date")


# -- a cell's tags: one owner ---------------------------------------------------------------------------

TAG_DAY = date(2026, 11, 29)


def test_a_matrix_tags_its_cells_by_its_repository_and_patterns() -> None:
    tagging = naming.Tagging("ghcr.io/acme/pytorch", ("{readable}-{date}", "{readable}-{digest}"))
    names = tagging.names("2.1.2-cpu", TAG_DAY, "sha256:" + "a" * 64)
    assert names.references() == (
        "ghcr.io/acme/pytorch:2.1.2-cpu",
        "ghcr.io/acme/pytorch:2.1.2-cpu-20261129",
        "ghcr.io/acme/pytorch:2.1.2-cpu-" + "a" * 12,
    )
    assert tagging.tag_day(TAG_DAY) == TAG_DAY and tagging.tag_day(None) is None
    undated = naming.Tagging("r", ("{readable}-{digest}",))  # no day changes its tags
    assert undated.tag_day(None) == undated.tag_day(TAG_DAY) is not None


def test_render_publish_and_the_no_change_record_take_a_cells_tags_from_one_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imagekit.builds import no_change as unchanged
    from imagekit.plan.matrix import load_plan
    from imagekit.publish.policy import Candidate, Group, final_tags
    from imagekit.render.dockerfile import Renderer
    from imagekit.report.store import CellResult
    from tests.conftest import REPO

    plan = load_plan(REPO / "matrix.yaml")
    publish = plan.matrix.publish
    rendered = Renderer(plan).render(plan.cells[1])
    cell, digest = rendered.cell, rendered.input_digest
    assert cell.image_tag == cell.readable_tag  # the default platform: built and published alike
    result = CellResult(
        id=cell.id,
        kind="cell",
        status="built",
        base_image="b",
        image_id="i",
        input_digest=digest,
        built_on=TAG_DAY,
    )
    member = Candidate(cell.id, "i", digest, "validated", (), None, built_on=TAG_DAY)

    def every_way() -> list[tuple[str, ...]]:
        return [
            rendered.names(publish, TAG_DAY).tags,  # what the build tags
            tuple(
                r.rpartition(":")[2]
                for r in unchanged.Names.of_plan(plan).references(cell.id, TAG_DAY, digest)
            ),
            final_tags(cell, publish, result, "validated") or (),  # what publish pushes
        ]

    owner = publish.tagging.tags(cell.image_tag, TAG_DAY, digest)
    assert len(owner) == 3 and every_way() == [owner] * 3
    group = Group(cell.readable_tag, (member,), (), publish.tagging, False)
    assert group.tags[0] == cell.readable_tag
    # each asks the owner: what it says, they all say
    monkeypatch.setattr(naming.Tagging, "tags", lambda *_: ("owned", "owned-too"))
    assert every_way() == [("owned", "owned-too")] * 3
    assert group.tags == ("owned", "owned-too")


def test_a_registry_is_the_first_component_with_a_dot_a_port_or_localhost() -> None:
    from imagekit.core.naming import registry_and_path

    assert registry_and_path("127.0.0.1:5000/team/torch") == ("127.0.0.1:5000", "team/torch")
    assert registry_and_path("ghcr.io/imagekit/pytorch") == ("ghcr.io", "imagekit/pytorch")
    assert registry_and_path("localhost/torch") == ("localhost", "torch")
    assert registry_and_path("team/torch") is None  # Docker Hub's short form
    assert registry_and_path("ghcr.io") is None  # a host, no repository


def test_repo_digest_of_a_pinned_reference_is_its_pin() -> None:
    # One image of one repository can carry several digests (an index and its platform manifest,
    # pulled by each): the base.digest label must name the pin the lock put in FROM.
    first, pin = "nvidia/cuda@sha256:" + "1" * 64, "nvidia/cuda@sha256:" + "2" * 64
    image = {"RepoDigests": [first, pin]}
    assert repo_digest(image, "nvidia/cuda:12.1@sha256:" + "2" * 64) == pin
    assert repo_digest(image, "nvidia/cuda:12.1") == first


PINNED = "sha256:" + "c" * 64


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("127.0.0.1:5000/team/torch:2.4", "'127.0.0.1:5000/team/torch:2.4': say it by digest"),
        ("127.0.0.1:5000/team/torch@sha256:abc", "not an image reference"),
        ("127.0.0.1:5000/team/torch@sha256:" + "C" * 64, "not an image reference"),
        ("team/torch@" + PINNED, "names no registry host; write it in full"),
        ("127.0.0.1:99999/team/torch@" + PINNED, "not an image reference"),
    ],
)
def test_a_pinned_reference_names_what_it_lacks_in_one_line(ref: str, says: str) -> None:
    """The one parser of an image by digest (rebuild-check's target, attest verify's image): the
    caller's sentence for a missing digest, one line for every other lack."""
    with pytest.raises(InputError) as refused:
        naming.pinned_reference(ref, "say it by digest")
    assert says in refused.value.message and "\n" not in refused.value.message


def test_a_pinned_reference_keeps_its_registry_path_and_digest_and_drops_the_tag() -> None:
    assert naming.pinned_reference("localhost/a/b:1@" + PINNED, "") == ("localhost", "a/b", PINNED)
    assert naming.pinned_reference("reg.example:443/t@" + PINNED, "") == ("reg.example:443", "t", PINNED)
