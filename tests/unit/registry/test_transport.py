"""The registry transport's deadlines as set: a small answer's (a manifest, a token, tags) is short
by default and set by IMAGEKIT_REGISTRY_DEADLINE_S, a bad setting is one line and exit 2; only a
blob copied or read whole keeps the long one. Their real-time tests (dripped answers against a
short setting) are the slow tier's (``tests/slow/registry/test_client_deadlines.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import BLOB_COPY_DEADLINE_S, REGISTRY_DEADLINE_S
from imagekit.registry.client import open_registry
from imagekit.registry.transport import DEADLINE_ENV, TIMEOUT_S, deadline_setting
from tests.conftest import run_cli
from tests.unit.attest_samples import private_pem, public_pem_of


def test_a_small_answer_gets_a_deadline_that_fits_it_and_a_blob_copy_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: 600 s for a manifest or a token, undocumented and not settable. A small answer's
    deadline now leaves room for one read's timeout and little more; the blob copy's is hours."""
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert TIMEOUT_S <= REGISTRY_DEADLINE_S <= 2 * TIMEOUT_S
    registry = open_registry("127.0.0.1:1")
    try:
        assert registry.deadline_s == REGISTRY_DEADLINE_S
        assert registry.copy_deadline_s == BLOB_COPY_DEADLINE_S
    finally:
        registry.close()
    monkeypatch.setenv(DEADLINE_ENV, "90")
    registry = open_registry("127.0.0.1:1")
    try:
        assert (registry.deadline_s, registry.copy_deadline_s) == (90.0, BLOB_COPY_DEADLINE_S)
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("value", "seconds"), [("", REGISTRY_DEADLINE_S), ("  ", REGISTRY_DEADLINE_S), ("2", 2.0), ("7.5 ", 7.5)]
)
def test_the_setting_is_seconds_or_the_default(value: str, seconds: float) -> None:
    assert deadline_setting({DEADLINE_ENV: value}) == seconds
    assert deadline_setting({}) == REGISTRY_DEADLINE_S


@pytest.mark.parametrize(
    "value", ["0", "0.5", "-3", "abc", "nan", "inf", "1e9", "604801", "3" * 400, "2\x00", "30s", "1_0x"]
)
def test_a_bad_setting_is_one_line_naming_it(value: str) -> None:
    with pytest.raises(InputError) as refused:
        deadline_setting({DEADLINE_ENV: value})
    message = refused.value.message
    assert message.startswith(f"{DEADLINE_ENV}=") and "from 1 to 604,800" in message
    assert "\n" not in message and "\x00" not in message and len(message) < 300
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


def test_a_bad_setting_stops_a_command_before_it_asks_the_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Exit 2 and one line, not exit 3 for a registry that is not there (nothing listens on
    127.0.0.1:1): the setting is read before the first request."""
    key = tmp_path / "key.pub"
    key.write_bytes(public_pem_of(private_pem()))
    monkeypatch.setenv(DEADLINE_ENV, "soon")
    result = run_cli(
        "attest", "verify", f"127.0.0.1:1/team/torch@sha256:{'a' * 64}", "--key", str(key), "--retries", "1"
    )
    assert result.exit_code == ExitCode.INVALID_INPUT, result.stderr
    assert result.stderr.count("\n") == 1 and f"{DEADLINE_ENV}='soon'" in result.stderr
