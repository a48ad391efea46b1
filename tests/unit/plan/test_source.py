"""An image's created, revision and source labels: read from the matrix's real git checkout, never
made up, and left out where the checkout does not say (no git, an edited tree, a local remote)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from imagekit.core.errors import InputError
from imagekit.plan import source
from imagekit.plan.source import (
    CREATED_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    SourceState,
    source_state,
)

COMMIT_TIME = 1_780_000_000  # 2026-05-28T20:26:40Z


def git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "GIT_AUTHOR_DATE": f"@{COMMIT_TIME} +0000",
        "GIT_COMMITTER_DATE": f"@{COMMIT_TIME} +0000",
    }
    done = subprocess.run(
        ["git", "-C", str(root), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git checkout with the matrix in a subdirectory, committed; no SOURCE_DATE_EPOCH."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    source._checkout.cache_clear()
    root = tmp_path / "repo"
    (root / "images").mkdir(parents=True)
    (root / "images" / "matrix.yaml").write_text("matrix: {}\n", encoding="utf-8")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "matrix")
    return root


def test_a_clean_checkout_gives_its_commit_its_time_and_its_public_url(checkout: Path) -> None:
    git(
        checkout,
        "remote",
        "add",
        "origin",
        "https://ci-bot:ghp_secrettoken123@github.example.org/acme/images.git",
    )
    found = source_state(checkout / "images")
    assert found == SourceState(
        COMMIT_TIME, git(checkout, "rev-parse", "HEAD"), "https://github.example.org/acme/images.git"
    )
    assert found.labels() == {
        CREATED_LABEL: "2026-05-28T20:26:40Z",
        REVISION_LABEL: found.revision,
        SOURCE_LABEL: "https://github.example.org/acme/images.git",
    }


def test_an_edited_checkout_names_no_revision(checkout: Path) -> None:
    (checkout / "images" / "matrix.yaml").write_text("matrix: {edited: true}\n", encoding="utf-8")
    found = source_state(checkout / "images")
    assert found.revision is None and REVISION_LABEL not in found.labels()
    assert found.epoch == COMMIT_TIME  # the commit's time is still the inputs' reproducible time


def test_a_staged_change_is_an_edit_too(checkout: Path) -> None:
    (checkout / "images" / "matrix.yaml").write_text("matrix: {staged: true}\n", encoding="utf-8")
    git(checkout, "add", ".")
    assert source_state(checkout / "images").revision is None


@pytest.mark.parametrize(
    "remote",
    [
        "git@github.com:acme/images.git",  # scp-like: no URL
        "/srv/git/images.git",  # a local path: nothing a puller can reach
        'https://example.org/a"b',  # would break the label's quoting
        "file:///srv/git/images.git",
    ],
)
def test_a_remote_that_is_no_public_url_is_left_out(checkout: Path, remote: str) -> None:
    git(checkout, "remote", "add", "origin", remote)
    found = source_state(checkout)
    assert found.url is None and SOURCE_LABEL not in found.labels()
    assert found.revision is not None


def test_outside_a_checkout_nothing_is_invented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path either
    found = source_state(tmp_path)
    assert found == SourceState() and found.labels() == {}


def test_without_git_nothing_is_invented(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(checkout))  # no git on PATH
    assert source_state(checkout) == SourceState()


def test_source_date_epoch_wins_over_the_commits_time(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    found = source_state(checkout)
    assert found.epoch == 1_790_000_000 and found.revision == git(checkout, "rev-parse", "HEAD")


@pytest.mark.parametrize(("value", "match"), [("soon", "not a Unix time"), ("100", "before 1980")])
def test_a_source_date_epoch_no_build_can_use_is_one_line(
    value: str, match: str, checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(InputError, match=match) as raised:
        source_state(checkout)
    assert "\n" not in raised.value.message
