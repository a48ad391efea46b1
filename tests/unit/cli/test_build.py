"""build: its flags are checked before anything is built (a mirror, a label, a credential)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, run_cli


def test_a_mirror_flag_is_an_image_prefix() -> None:
    result = run_cli("build", "--mirror", "nvidia/cuda=evil.example:99999/x", "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2
    assert result.stderr == (
        "imagekit: error: --mirror 'nvidia/cuda=evil.example:99999/x': 'evil.example:99999': port 99999"
        " is past 65535\n"
    )


@pytest.mark.parametrize(
    ("label", "problem"),
    [
        ("team=ml\u202eplatform", "holds U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("team=$(id)", "holds '$('"),
        ("te am=x", "expected SRC=DST"),
        ("<b>=x", "is not a label key"),
    ],
)
def test_a_label_flag_is_checked_before_anything_is_built(label: str, problem: str) -> None:
    result = run_cli("build", "--label", label, "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2 and problem in result.stderr and result.stderr.count("\n") == 1, (
        result.stderr
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--registry", "ci:s3cret@ghcr.io"),
        ("--mirror", "nvidia/cuda=https://ci:s3cret@mirror.example/cuda"),
        ("--mirror", "nvidia/cuda=ci:s3cret@mirror.example/cuda"),
        ("--label", "https://ci:s3cret@x.example=1"),
    ],
)
def test_a_credential_in_a_flag_is_refused_without_repeating_it(flag: str, value: str) -> None:
    result = run_cli("build", "--matrix", str(REPO / "matrix.yaml"), flag, value)
    assert result.exit_code == 2, result
    assert flag in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
