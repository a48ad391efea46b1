"""attest: the group, and `attest verify`'s reference and requirement refused before any registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.cli.samples import assert_one_error

BY_DIGEST = "127.0.0.1:9/team/torch@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("127.0.0.1:9/team/torch:1",), "'127.0.0.1:9/team/torch:1': name the image by digest"),
        ((BY_DIGEST, "--policy", "built"), "--policy 'built': use validated or checked"),
        ((BY_DIGEST, "--gpu", ""), "--gpu '': an empty value requires nothing"),
    ],
)
def test_attest_verify_refuses_in_one_line_before_any_registry(
    args: tuple[str, ...], line: str, tmp_path: Path
) -> None:
    key = tmp_path / "key.pub"  # never read: each refusal comes before the key
    result = run_cli("attest", "verify", *args, "--key", str(key))
    assert_one_error(result, line)


def test_attest_alone_lists_its_commands() -> None:
    result = run_cli("attest", "--help")
    assert result.exit_code == 0
    assert "\n  verify  Check that a digest carries a verification attestation" in result.stdout
