"""Publishing decisions without an engine: levels and policies, published tags, push errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import EnvironmentProblem
from imagekit.publish import ADMITS, final_tags, level_of
from imagekit.store import CellResult, CheckRecord, Verification

DIGEST = "sha256:" + "ab" * 32


def result(verdict: str | None, status: str = "built") -> CellResult:
    verification = None
    if verdict is not None:
        checks = (CheckRecord("torch_import", "pass" if verdict != "failed" else "fail", True),)
        verification = Verification("c", "sha256:img", "none", verdict, False, False, checks, 1.0)  # type: ignore[arg-type]
    return CellResult(
        id="c",
        kind="cell",
        status=status,  # type: ignore[arg-type]
        image_id="sha256:img",
        tags=(
            "acme/pytorch:2.1.2-cu121",
            "acme/pytorch:2.1.2-cu121-20261129",
            "acme/pytorch:2.1.2-cu121-abc",
        ),
        size=1,
        input_digest="f" * 64,
        base_image="b",
        base_digest=None,
        duration_s=1.0,
        log=None,
        error=None,
        verification=verification,
    )


def test_levels_and_policies() -> None:
    assert level_of(result("validated")) == "validated"
    assert level_of(result("checked")) == "checked"
    assert level_of(result(None)) == "built"
    assert level_of(result("failed")) is None  # never published, whatever the policy
    assert level_of(result(None, status="failed")) is None
    assert ADMITS["gpu-validated"] == {"validated"}
    assert "checked" in ADMITS["checked"] and "built" not in ADMITS["checked"]


def test_tags_say_how_far_an_image_was_verified() -> None:
    assert final_tags(result("validated"), "validated")[0] == "2.1.2-cu121"
    assert final_tags(result("checked"), "checked") == (
        "2.1.2-cu121-checked",
        "2.1.2-cu121-20261129-checked",
        "2.1.2-cu121-abc-checked",
    )
    assert all(t.endswith("-unverified") for t in final_tags(result(None), "built"))


def test_transient_push_errors_match_whole_words() -> None:
    from imagekit.engine import transient_push_error

    for text in (
        "received unexpected HTTP status: 503 Service Unavailable",
        "toomanyrequests: too many requests",
        "Patch https://r/v2/x/blobs/uploads/1: EOF",
        "dial tcp 1.2.3.4:443: connect: connection refused",
        "net/http: TLS handshake timeout",
    ):
        assert transient_push_error(text), text
    for text in (
        "manifest invalid: sha256:5000abc blob unknown",
        "denied: requested access to the resource is denied",
        "blob upload invalid: size 5001 exceeds the limit",
        "name unknown: repository thereof",
    ):
        assert not transient_push_error(text), text


def test_publish_closes_its_registry_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from imagekit import publish as publishing
    from imagekit import store
    from tests.conftest import REPO, run_cli

    closed: list[bool] = []

    class FakeRegistry:
        def close(self) -> None:
            closed.append(True)

    class FakePublisher:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def present(self, candidates: Any) -> Any:
            raise EnvironmentProblem("registry down")

    candidate = publishing.Candidate("c", "sha256:img", "f" * 64, "validated", ("t",), None)
    monkeypatch.setattr(store, "read_previous", lambda _: object())
    monkeypatch.setattr(publishing, "select", lambda *_: ([candidate], []))
    monkeypatch.setattr(publishing, "connect_registry", lambda *_: FakeRegistry())
    monkeypatch.setattr(publishing, "Publisher", FakePublisher)
    monkeypatch.setattr(publishing, "connect", lambda **_: object())
    result = run_cli(
        "publish", "-m", str(REPO / "matrix.yaml"), "--registry", "127.0.0.1:5000",
        "--state-dir", str(tmp_path), "--lock", str(tmp_path / "lock.json"),
    )  # fmt: skip
    assert result.exit_code == 3, result.stderr
    assert closed == [True]
