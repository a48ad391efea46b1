"""What a promoted digest carries (imagekit.publish.attestations): the referrers of its staged
digest, carried into the repository it is promoted to."""

from __future__ import annotations

from pathlib import Path

from imagekit.publish.policy import Candidate
from tests.unit.publish.test_promote import IMAGE, STAGED_DIGEST, FakeRegistry, staged_result


def test_promotion_into_another_repository_carries_the_referrers(tmp_path: Path) -> None:
    """What is attached to the staged digest (an attestation) is attached to the promoted one:
    the artifact's blobs mounted across and the artifact listed for the same subject."""
    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.registry.manifest import Referrer

    registry = FakeRegistry()
    registry.manifest = __import__("dataclasses").replace(registry.manifest, digest=STAGED_DIGEST)
    registry.attached = (Referrer("sha256:" + "a" * 64, "application/vnd.dsse.envelope.v1+json"),)
    staged = staged_result("checked").staged
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t-checked",), staged_result("checked").verification, staged
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    said: list[str] = []
    published, _ = Publisher(None, registry, options, "checked", said.append).run([candidate])  # type: ignore[arg-type]
    assert [p.entry.cell for p in published] == ["c"]
    assert ("attach", "acme/pytorch", registry.manifest.digest, STAGED_DIGEST) in registry.calls
    assert any("carried 1 referrer" in line for line in said)
