"""The proof an image index carries: publish signs and attaches, after the index reads back, an
attestation of the index digest listing each platform (its digest, cell, verdict, the attestations
of its own digest); `attest verify` on the index digest checks it and each platform's, and refuses
an index whose proof does not hold together (tests.unit.oci_stub: a registry over HTTP without
the referrers API, as in the integration tests)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagekit.attest import statements as attest
from imagekit.attest.attach import Attached, attach_envelopes, find_attestations
from imagekit.attest.index import LeftOutPlatform, PlatformProof, index_predicate, verify_index
from imagekit.core import naming, platforms
from imagekit.publish.policy import Candidate, Group
from imagekit.publish.promote import Publisher, PublishOptions
from imagekit.registry.manifest import OCI_INDEX, Manifest, image_index, referrers_tag
from imagekit.report.store import Staged
from imagekit.report.verification import CheckRecord, Verification
from tests.conftest import CliResult, run_cli
from tests.unit.attest_samples import gpu_verification, in_toto_statement, private_pem, public_pem_of
from tests.unit.oci_stub import OciStub, image_manifest, oci_stub

REPO = "acme/pytorch"
GROUP = "2.11.0-cuda13.0"
PRODUCTS = {"linux/amd64": "NVIDIA H200", "linux/arm64": "NVIDIA GB200"}
CELLS = {"linux/amd64": "c", "linux/arm64": "c-arm64"}


def verification_on(product: str, verdict: str = "validated", cell: str = "c") -> Verification:
    """A GPU runner's verification (tests.unit.attest.test_statements's) on ``product``."""
    base = gpu_verification(verdict)
    smi = replace(base.checks[0], actual=json.dumps({"driver": "570.1", "gpus": [{"name": product}]}))
    checks: tuple[CheckRecord, ...] = (smi, *base.checks[1:])
    return replace(base, target=cell, checks=checks, finished_at=f"2026-11-2{1 + len(product) % 3}T02:00:00Z")


@dataclass
class Published:
    stub: OciStub
    key: attest.SigningKey
    public: Path
    index: Manifest
    images: dict[str, Manifest]  # platform -> its manifest
    said: list[str]
    lock: Path

    @property
    def host(self) -> str:
        return self.stub.host

    def verify(self, digest: str | None = None, *more: str) -> CliResult:
        reference = f"{self.host}/{REPO}@{digest or self.index.digest}"
        return run_cli("attest", "verify", reference, "--key", str(self.public), "--retries", "1", *more)

    def attached(self, digest: str) -> list[dict[str, Any]]:
        """The Statements attached to ``digest`` (read back through the referrers tag)."""
        client = self.stub.client()
        found = find_attestations(
            client, REPO, digest, attest.load_public_key(self.public), attest.Requirement(), _NOW, index=True
        )
        client.close()
        return [dict(f.statement) for f in found if f.statement is not None]

    def attach(self, digest: str, statement: dict[str, Any]) -> Attached:
        subject = (
            self.index
            if digest == self.index.digest
            else next(m for m in self.images.values() if m.digest == digest)
        )
        client = self.stub.client()
        (done,) = attach_envelopes(client, REPO, subject, [statement], self.key)
        client.close()
        return done

    def forget_referrers(self, digest: str) -> None:
        """The registry loses everything listed for ``digest``."""
        del self.stub.manifests[(REPO, referrers_tag(digest))]


_NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)


def publish_group(
    tmp_path: Path, stub: OciStub, verdicts: dict[str, str | None], sign: bool = True
) -> Published:
    """Stage an image per platform in ``stub`` and publish the group with a signing key, as
    `imagekit publish --signing-key` does; ``verdicts``: each platform's (None: never verified)."""
    pem = private_pem()
    (tmp_path / "k.pem").write_bytes(pem)
    (tmp_path / "k.pub").write_bytes(public_pem_of(pem))
    key = attest.load_signing_key(tmp_path / "k.pem", {})
    assert key is not None
    members = []
    images = {}
    for name, verdict in verdicts.items():
        platform = platforms.get(name)
        cell = CELLS[name]
        input_digest = hashlib.sha256(cell.encode()).hexdigest()
        manifest = image_manifest(stub, REPO, platform.arch, {"imagekit.input-digest": input_digest})
        images[name] = manifest
        verification = verification_on(PRODUCTS[name], verdict, cell) if verdict else None
        members.append(
            Candidate(
                cell,
                str(manifest.config_digest),
                input_digest,
                verdict or "built",
                (),
                verification,  # type: ignore[arg-type]
                Staged(stub.host, REPO, f"v-{platform.arch}", manifest.digest),
                None,
                None,
                name,
                date(2026, 12, 1),
            )
        )
    group = Group(GROUP, tuple(members), (), naming.Tagging(REPO, ("{readable}-{digest}",)), False)
    said: list[str] = []
    options = PublishOptions(stub.host, REPO, tmp_path / "lock.json", signing_key=key if sign else None)
    registry = stub.client()
    (done,), refused = Publisher(None, registry, options, "checked", said.append).run([], groups=[group])
    registry.close()
    assert refused == []
    index = stub.manifests[(REPO, done.index.digest)]  # type: ignore[union-attr]
    return Published(
        stub,
        key,
        tmp_path / "k.pub",
        Manifest(done.index.digest, OCI_INDEX, index[1]),
        images,
        said,
        tmp_path / "lock.json",
    )  # type: ignore[union-attr]


@pytest.fixture
def stub() -> Iterator[OciStub]:
    with oci_stub() as server:
        yield server


@pytest.fixture
def published(tmp_path: Path, stub: OciStub) -> Published:
    return publish_group(tmp_path, stub, {"linux/amd64": "validated", "linux/arm64": "validated"})


def lines(result: CliResult, code: int) -> list[str]:
    assert result.exit_code == code, (result.stdout, result.stderr)
    found = result.stderr.splitlines()
    assert all(line.startswith("imagekit: refused: ") and len(line) < 2300 for line in found), found
    return found


# -- what publish attaches -------------------------------------------------------------------------------


def test_publish_attaches_a_signed_index_attestation_naming_each_platforms_proof(
    published: Published,
) -> None:
    (statement,) = published.attached(published.index.digest)
    assert statement["predicateType"] == attest.VALIDATED_PREDICATE
    assert statement["subject"][0]["digest"] == {"sha256": published.index.digest.removeprefix("sha256:")}
    predicate = statement["predicate"]
    # What Kyverno's and policy-controller's conditions read, as on an image's attestation
    assert predicate["verdict"] == "validated" and predicate["gpu"]["visible"] is True
    assert predicate["gpu"]["products"] == sorted(PRODUCTS.values())
    assert predicate["index"] == {
        "group": GROUP,
        "input_digest": predicate["index"]["input_digest"],
        "mediaType": OCI_INDEX,
    }
    listed = {p["platform"]: p for p in predicate["platforms"]}
    assert set(listed) == set(PRODUCTS) and predicate["missing"] == []
    assert predicate["run"]["verified_at"] == min(p["verified_at"] for p in predicate["platforms"])
    for name, image in published.images.items():
        item = listed[name]
        assert (item["digest"], item["cell"], item["verdict"]) == (image.digest, CELLS[name], "validated")
        assert item["gpu"] == {"visible": True, "products": [PRODUCTS[name]]}
        # it names, by digest, the attestations attached to the platform's own digest
        kinds = {a["predicateType"] for a in item["attestations"]}
        assert kinds == {attest.VALIDATED_PREDICATE, attest.SBOM_PREDICATE}
        own = [
            s for s in published.attached(image.digest) if s["predicateType"] == attest.VALIDATED_PREDICATE
        ]
        assert own and own[0]["subject"][0]["digest"]["sha256"] == image.digest.removeprefix("sha256:")
        assert own[0]["predicate"]["cell"]["platform"] == name
        assert own[0]["predicate"]["run"]["emulated"] is False
    assert any(f"{published.index.digest}, the index of 2 platforms" in line for line in published.said)
    cosign = published.stub.json(REPO, referrers_tag(published.index.digest) + ".att")
    assert [x["annotations"]["predicateType"] for x in cosign["layers"]] == [attest.VALIDATED_PREDICATE]


def test_an_independent_verifier_accepts_the_index_envelope(published: Published) -> None:
    listing = published.stub.json(REPO, referrers_tag(published.index.digest))
    (descriptor,) = listing["manifests"]
    artifact = published.stub.json(REPO, descriptor["digest"])
    assert artifact["subject"] == {
        "mediaType": OCI_INDEX,
        "digest": published.index.digest,
        "size": len(published.index.body),
    }
    blob = published.stub.blobs[(REPO, artifact["layers"][0]["digest"])]
    public = serialization.load_pem_public_key(published.public.read_bytes())
    keyid = hashlib.sha256(
        public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ).hexdigest()
    key = SSlibKey.from_crypto(public, keyid=keyid, scheme="ecdsa-sha2-nistp256")
    envelope = Envelope.from_dict(json.loads(blob))
    assert keyid in envelope.verify([key], 1)
    assert in_toto_statement(envelope.payload).pb.predicate_type == attest.VALIDATED_PREDICATE


def test_attest_verify_checks_the_index_and_each_platform(published: Published) -> None:
    result = published.verify()
    assert result.exit_code == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0].startswith(
        f"ok: index {published.index.digest[:19]}: verification attestation (gpu-validated)"
    )
    assert out[0].endswith("(2 platforms)")
    assert [line.split(":")[1].strip().split()[0] for line in out[1:]] == ["linux/amd64", "linux/arm64"]
    # policy per platform: the arm64 image ran on a GB200, not an H200
    (line,) = lines(published.verify(None, "--gpu", "H200"), 1)
    assert "linux/arm64" in line and "not a H200" in line
    assert published.verify(None, "--gpu", "NVIDIA").exit_code == 0
    # and each platform digest alone is verified as before
    for image in published.images.values():
        assert published.verify(image.digest).stdout.startswith(
            "ok: verification attestation (gpu-validated)"
        )


def test_a_checked_platform_makes_a_checked_index(tmp_path: Path, stub: OciStub) -> None:
    done = publish_group(tmp_path, stub, {"linux/amd64": "validated", "linux/arm64": "checked"})
    (statement,) = done.attached(done.index.digest)
    assert statement["predicateType"] == attest.CHECKED_PREDICATE
    assert (
        statement["predicate"]["verdict"] == "checked" and statement["predicate"]["gpu"]["visible"] is False
    )
    refused = lines(done.verify(), 1)
    assert any(
        line.startswith(f"imagekit: refused: index {done.index.digest[:19]}") and "only checked" in line
        for line in refused
    )
    assert any("linux/arm64" in line and "only checked" in line for line in refused)
    assert not any("linux/amd64" in line for line in refused)
    assert done.verify(None, "--policy", "checked").exit_code == 0


def test_an_index_with_a_platform_never_verified_gets_no_attestation(tmp_path: Path, stub: OciStub) -> None:
    done = publish_group(tmp_path, stub, {"linux/amd64": "validated", "linux/arm64": None})
    assert (REPO, referrers_tag(done.index.digest)) not in stub.manifests
    assert any(line.startswith("no index attestation for") for line in done.said)
    refused = lines(done.verify(), 1)
    assert refused[0].endswith("no signed verification attestation is attached")


def test_without_a_key_nothing_is_attached_to_the_index(tmp_path: Path, stub: OciStub) -> None:
    done = publish_group(tmp_path, stub, {"linux/amd64": "validated", "linux/arm64": "validated"}, sign=False)
    assert (REPO, referrers_tag(done.index.digest)) not in stub.manifests


# -- an index whose proof does not hold together -----------------------------------------------------------


def test_an_index_without_its_own_attestation_is_refused(published: Published) -> None:
    published.forget_referrers(published.index.digest)
    (line,) = lines(published.verify(), 1)
    assert line.startswith(f"imagekit: refused: index {published.index.digest[:19]}: ")
    assert line.endswith(": no signed verification attestation is attached")


def test_a_platform_without_its_attestation_is_refused(published: Published) -> None:
    arm = published.images["linux/arm64"]
    published.forget_referrers(arm.digest)
    (line,) = lines(published.verify(), 1)
    assert (
        line
        == f"imagekit: refused: linux/arm64 {arm.digest[:19]}: no signed verification attestation is attached"
    )


def test_an_index_attestation_listing_other_digests_is_refused(published: Published) -> None:
    published.forget_referrers(published.index.digest)
    statement = _index_statement_from_scratch(published)
    wrong = [dict(p) for p in statement["predicate"]["platforms"]]
    wrong[1]["digest"] = "sha256:" + "9" * 64
    published.attach(
        published.index.digest, {**statement, "predicate": {**statement["predicate"], "platforms": wrong}}
    )
    (line,) = lines(published.verify(), 1)
    assert "it lists 'linux/arm64' as sha256:9999" in line


def test_an_index_attestation_that_leaves_a_platform_out_is_refused(published: Published) -> None:
    published.forget_referrers(published.index.digest)
    statement = _index_statement_from_scratch(published)
    only = statement["predicate"]["platforms"][:1]
    published.attach(
        published.index.digest, {**statement, "predicate": {**statement["predicate"], "platforms": only}}
    )
    (line,) = lines(published.verify(), 1)
    assert "it does not list the index's 'linux/arm64'" in line


def test_an_index_attestation_naming_other_platform_attestations_is_refused(published: Published) -> None:
    published.forget_referrers(published.index.digest)
    statement = _index_statement_from_scratch(published)
    renamed = [dict(p) for p in statement["predicate"]["platforms"]]
    renamed[0]["attestations"] = [
        {
            "predicateType": attest.VALIDATED_PREDICATE,
            "artifact": "sha256:" + "7" * 64,
            "envelope": "sha256:" + "7" * 64,
        }
    ]
    published.attach(
        published.index.digest, {**statement, "predicate": {**statement["predicate"], "platforms": renamed}}
    )
    (line,) = lines(published.verify(), 1)
    assert (
        line.startswith("imagekit: refused: linux/amd64")
        and "names its verification attestation as sha256:7777" in line
    )


def test_an_image_attestation_on_the_index_and_an_index_attestation_on_an_image_do_not_count(
    published: Published,
) -> None:
    index_statement = _index_statement_from_scratch(published)
    amd = published.images["linux/amd64"]
    published.forget_referrers(published.index.digest)
    published.forget_referrers(amd.digest)
    # the index's predicate, signed about the amd64 image: it lists platforms, an image's never does
    published.attach(
        amd.digest,
        attest.statement(REPO, amd.digest, attest.VALIDATED_PREDICATE, index_statement["predicate"]),
    )
    (line,) = lines(published.verify(amd.digest), 1)
    assert "it attests an image index" in line
    # an image's predicate (no platforms), signed about the index
    image_predicate = {
        k: v for k, v in index_statement["predicate"].items() if k not in ("platforms", "missing", "index")
    }
    published.attach(
        published.index.digest,
        attest.statement(REPO, published.index.digest, attest.VALIDATED_PREDICATE, image_predicate),
    )
    refused = lines(published.verify(), 1)
    assert any("it attests a single image, not this index's platforms" in line for line in refused)


def test_a_tampered_index_attestation_is_refused(published: Published) -> None:
    listing = published.stub.json(REPO, referrers_tag(published.index.digest))
    artifact = published.stub.json(REPO, listing["manifests"][0]["digest"])
    where = (REPO, artifact["layers"][0]["digest"])
    envelope = json.loads(published.stub.blobs[where])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["platforms"][1]["verdict"] = "validated-by-hand"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    # stored as a blob of its own and re-listed (a registry serving other bytes for the old
    # digest is refused before the signature is even looked at)
    raw = json.dumps(envelope).encode()
    published.stub.blobs[(REPO, "sha256:" + hashlib.sha256(raw).hexdigest())] = raw
    artifact["layers"][0].update(digest="sha256:" + hashlib.sha256(raw).hexdigest(), size=len(raw))
    digest = published.stub.replace_manifest(REPO, "tampered", artifact, listing["manifests"][0]["mediaType"])
    listing["manifests"][0]["digest"] = digest
    published.stub.replace_manifest(REPO, referrers_tag(published.index.digest), listing, OCI_INDEX)
    (line,) = lines(published.verify(), 1)
    assert "no signature verifies" in line


def test_an_index_whose_platform_is_no_platform_word_is_one_short_line(published: Published) -> None:
    body = json.loads(published.index.body)
    body["manifests"][1]["platform"]["architecture"] = "arm64\x1b[2J" + "x" * 100_000
    digest = published.stub.replace_manifest(REPO, "odd", json.dumps(body).encode(), OCI_INDEX)
    (line,) = lines(published.verify(digest), 1)
    assert line.endswith("manifests[1] names no platform or no sha256 digest") and len(line) < 200


def test_an_index_with_two_entries_for_one_platform_is_refused(published: Published) -> None:
    amd = published.images["linux/amd64"]
    doubled = image_index([(platforms.get("linux/amd64"), amd), (platforms.get("linux/amd64"), amd)])
    published.stub.replace_manifest(REPO, "doubled", doubled.body, OCI_INDEX)
    (line,) = lines(published.verify(doubled.digest), 1)
    assert "manifests[1] is a second entry for 'linux/amd64'" in line


def _index_statement_from_scratch(published: Published) -> dict[str, Any]:
    """The honest index Statement, read back (before it is forgotten)."""
    client = published.stub.client()
    found = find_attestations(
        client,
        REPO,
        published.index.digest,
        attest.load_public_key(published.public),
        attest.Requirement(),
        _NOW,
        index=True,
    )
    client.close()
    if found and found[0].statement is not None:
        return dict(found[0].statement)
    # forgotten already: made again from the lock's record of the platforms
    proofs = []
    for name, image in published.images.items():
        verification = verification_on(PRODUCTS[name], cell=CELLS[name])
        attached = tuple(_attached_to(published, image.digest))
        proofs.append(
            PlatformProof(name, CELLS[name], image.digest, verification, (PRODUCTS[name],), attached)
        )
    made = index_predicate(GROUP, "0" * 64, proofs)
    assert made is not None
    return attest.statement(REPO, published.index.digest, *made)


def _attached_to(published: Published, digest: str) -> list[Attached]:
    listing = published.stub.json(REPO, referrers_tag(digest))
    return [
        Attached(
            d["annotations"]["in-toto.io/predicate-type"],
            d["digest"],
            published.stub.json(REPO, d["digest"])["layers"][0]["digest"],
        )
        for d in listing["manifests"]
    ]


# -- the predicate -----------------------------------------------------------------------------------------


def test_the_index_predicate_is_as_weak_as_its_weakest_platform() -> None:
    amd = PlatformProof(
        "linux/amd64", "c", "sha256:" + "a" * 64, verification_on("NVIDIA H200"), ("NVIDIA H200",)
    )
    arm = PlatformProof(
        "linux/arm64", "c-arm64", "sha256:" + "b" * 64, verification_on("NVIDIA GH200", "checked")
    )
    left = LeftOutPlatform("linux/arm64", "c-arm64", "failed verification")
    made = index_predicate(GROUP, "0" * 64, [amd], [left], {"GITHUB_RUN_ID": "9", "TOKEN": "x"})
    assert made is not None and made[0] == attest.VALIDATED_PREDICATE
    assert made[1]["missing"] == [
        {"platform": "linux/arm64", "cell": "c-arm64", "reason": "failed verification"}
    ]
    assert made[1]["run"]["ci"] == {"GITHUB_RUN_ID": "9"}
    both = index_predicate(GROUP, "0" * 64, [amd, arm], environ={})
    assert both is not None and both[0] == attest.CHECKED_PREDICATE and both[1]["gpu"]["visible"] is False
    failed = replace(arm, verification=replace(verification_on("x"), verdict="failed"))
    assert index_predicate(GROUP, "0" * 64, [amd, failed], environ={}) is None
    assert index_predicate(GROUP, "0" * 64, [amd, replace(arm, verification=None)], environ={}) is None
    assert index_predicate(GROUP, "0" * 64, [], environ={}) is None


def test_verify_index_reads_nothing_past_an_index_it_cannot_read(published: Published) -> None:
    broken = Manifest("sha256:" + "5" * 64, OCI_INDEX, b'{"manifests": "all of them"}')
    client = published.stub.client()
    checked = verify_index(
        client, REPO, broken, attest.load_public_key(published.public), attest.Requirement(), _NOW
    )
    client.close()
    assert checked.ok == [] and checked.refused == [
        f"index {broken.digest[:19]}: the index names no manifests"
    ]
