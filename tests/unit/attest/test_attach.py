"""`imagekit attest verify` against a registry whose referrers answers are hostile: each case is an
honest registry (tests.unit.oci_stub, no referrers API: the referrers tag schema) with one answer
changed. Whatever the registry says, the command ends in bounded lines that each start with
``imagekit:`` (no control character, no traceback) and the exit code the modules define: 1 for a
registry answer that cannot be used (RegistryError) or an attestation that does not count, 3 for
a registry that cannot be reached, 0 only when a good attestation is there."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from imagekit.attest import statements as attest
from imagekit.attest.attach import Attached, attach_envelopes, cosign_tag
from imagekit.attest.statements import DSSE_MEDIA_TYPE
from imagekit.core.errors import MESSAGE_CHARS, RegistryError
from imagekit.core.limits import CLOCK_SKEW_S, ENVELOPE_BYTES, MANIFEST_BYTES, MAX_REFERRERS
from imagekit.registry.manifest import OCI_INDEX, OCI_MANIFEST, Manifest, referrers_tag
from tests.conftest import CliResult, run_cli
from tests.unit.attest_samples import SUBJECT, gpu_verification, private_pem, public_pem_of
from tests.unit.oci_stub import OciStub, digest_of, image_manifest, oci_stub

REPO = "acme/pytorch"


@dataclass
class World:
    """An image in the stub with one signed verification attestation attached, and the keys."""

    stub: OciStub
    key: attest.SigningKey
    public: Path
    image: Manifest
    attached: Attached

    @property
    def tag(self) -> str:
        return referrers_tag(self.image.digest)

    def verify(self, *more: str) -> CliResult:
        reference = f"{self.stub.host}/{REPO}@{self.image.digest}"
        return run_cli("attest", "verify", reference, "--key", str(self.public), "--retries", "1", *more)

    def statement(self, digest: str | None = None) -> dict[str, object]:
        about = digest or self.image.digest
        made = attest.verification_predicate(replace(SUBJECT, digest=about), gpu_verification())
        assert made is not None
        return attest.statement(f"{self.stub.host}/{REPO}", about, *made)

    def listing(self) -> list[dict[str, object]]:
        return list(self.stub.json(REPO, self.tag)["manifests"])

    def list_only(self, *descriptors: object) -> None:
        """The referrers tag, rewritten to list ``descriptors``."""
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(descriptors)}
        self.stub.replace_manifest(REPO, self.tag, index, OCI_INDEX)

    def artifact(self) -> dict[str, object]:
        return dict(self.stub.json(REPO, self.attached.artifact))

    def swap_envelope(
        self, envelope: bytes, media_type: str = DSSE_MEDIA_TYPE, size: int | None = None
    ) -> None:
        """The attestation's artifact manifest, rewritten to hold ``envelope`` (stored as a blob),
        and the referrers tag to list the rewritten manifest instead."""
        self.stub.blobs[(REPO, digest_of(envelope))] = envelope
        artifact = self.artifact()
        artifact["layers"] = [
            {
                "mediaType": media_type,
                "digest": digest_of(envelope),
                "size": len(envelope) if size is None else size,
            }
        ]
        self.relist(artifact)

    def relist(self, artifact: dict[str, object]) -> str:
        """Store ``artifact`` by its digest and make it the referrers tag's only entry."""
        digest = self.stub.replace_manifest(REPO, "x", artifact, OCI_MANIFEST)
        descriptor = {**self.listing()[0], "digest": digest, "size": len(json.dumps(artifact).encode())}
        self.list_only(descriptor)
        return digest


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    pem = private_pem()
    (tmp_path / "k.pem").write_bytes(pem)
    (tmp_path / "k.pub").write_bytes(public_pem_of(pem))
    key = attest.load_signing_key(tmp_path / "k.pem", {})
    assert key is not None
    with oci_stub() as stub:
        image = image_manifest(stub, REPO)
        made = World(stub, key, tmp_path / "k.pub", image, None)  # type: ignore[arg-type]
        client = stub.client()
        (made.attached,) = attach_envelopes(client, REPO, image, [made.statement()], key)
        client.close()
        yield made


def lines_of(result: CliResult, code: int) -> list[str]:
    """stderr's lines, each checked: one bounded line starting ``imagekit:``, nothing that moves
    a terminal's cursor; the exit code the case expects."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines, "no reason given"
    for line in lines:
        assert line.startswith("imagekit: "), line
        assert len(line) <= MESSAGE_CHARS + 200, len(line)
        assert not any(ord(c) < 32 or c == "\x7f" for c in line), repr(line)
        assert "Traceback" not in line
    return lines


def test_the_honest_registry_passes(world: World) -> None:
    result = world.verify()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"ok: verification attestation (gpu-validated) {world.attached.artifact[:19]}"
    ]
    assert (
        world.stub.json(REPO, cosign_tag(world.image.digest))["layers"][0]["digest"]
        == world.attached.envelope
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"size": -1}, "layers[0] says it is -1 bytes"),
        ({"digest": "sha256:short"}, "layers[0] names no sha256"),
    ],
    ids=["size", "digest"],
)
def test_an_existing_cosign_manifest_of_malformed_layers_is_refused_not_copied(
    world: World, change: dict[str, object], said: str
) -> None:
    # its layers would be carried into the manifest written (issue 45: read as every manifest is)
    tag = cosign_tag(world.image.digest)
    document = world.stub.json(REPO, tag)
    document["layers"][0].update(change)
    world.stub.replace_manifest(REPO, tag, document, OCI_MANIFEST)
    before = world.stub.manifests[(REPO, tag)]
    client = world.stub.client()
    with pytest.raises(
        RegistryError, match=re.escape(f"{tag}: {said}") + ".*; no attestation attached$"
    ) as refused:
        attach_envelopes(client, REPO, world.image, [world.statement()], world.key)
    client.close()
    assert "\n" not in refused.value.message
    assert world.stub.manifests[(REPO, tag)] == before


# -- the referrers tag itself ------------------------------------------------------------------------------


def _huge(w: World) -> None:
    padding = " " * (MANIFEST_BYTES + 1)
    w.stub.replace_manifest(
        REPO, w.tag, f'{{"mediaType": "{OCI_INDEX}", "manifests": []{padding}}}'.encode(), OCI_INDEX
    )


def _too_many(w: World) -> None:
    w.list_only(*([w.listing()[0]] * (MAX_REFERRERS + 1)))


def _not_json(w: World) -> None:
    w.stub.replace_manifest(REPO, w.tag, b"<html><body>502 Bad Gateway</body></html>", OCI_INDEX)


def _a_json_list(w: World) -> None:
    w.stub.replace_manifest(REPO, w.tag, b"[1, 2, 3]", OCI_INDEX)


def _not_an_index(w: World) -> None:
    w.stub.replace_manifest(REPO, w.tag, w.image.body, OCI_MANIFEST)


def _no_manifests(w: World) -> None:
    w.stub.replace_manifest(REPO, w.tag, {"schemaVersion": 2, "mediaType": OCI_INDEX}, OCI_INDEX)


def _descriptor_not_sha256(w: World) -> None:
    w.list_only({**w.listing()[0], "digest": "md5:" + "0" * 32})


def _descriptor_not_an_object(w: World) -> None:
    w.list_only("sha256:" + "0" * 64)


def _answered_as_other_bytes(w: World) -> None:
    w.stub.answers[("GET", f"/v2/{REPO}/manifests/{w.tag}")] = (
        200,
        {"Content-Type": OCI_INDEX, "Docker-Content-Digest": "sha256:" + "1" * 64},
        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()[:-1] + b"\x1b[2J",
    )


# Each: the registry's answer, what the one line says. All end in exit 1 ("imagekit: error: ...").
LISTING_CASES: dict[str, tuple[Callable[[World], None], str]] = {
    "huge": (_huge, f"answered more than {MANIFEST_BYTES:,} bytes"),
    "more referrers than are looked at": (_too_many, f"more than the {MAX_REFERRERS:,} looked at"),
    "not JSON": (_not_json, "answered what is not JSON"),
    "a JSON list": (_a_json_list, "answered a JSON list, not an object"),
    "an image manifest, not an index": (_not_an_index, "its referrers tag is not an OCI index"),
    "an index without manifests": (_no_manifests, "the index lists no manifests"),
    "a descriptor without a sha256 digest": (_descriptor_not_sha256, "manifests[0] names no sha256 digest"),
    "a descriptor that is a string": (_descriptor_not_an_object, "manifests[0] is no descriptor"),
    "bytes that are not JSON, with an escape sequence": (
        _answered_as_other_bytes,
        "answered what is not JSON",
    ),
}


@pytest.mark.parametrize("case", LISTING_CASES, ids=list(LISTING_CASES))
def test_a_hostile_referrers_tag_is_one_line_and_exit_1(world: World, case: str) -> None:
    change, said = LISTING_CASES[case]
    change(world)
    (line,) = lines_of(world.verify(), 1)
    assert line.startswith(f"imagekit: error: registry {world.stub.host}:") and said in line, line


# -- what it lists -----------------------------------------------------------------------------------------


def _for_another_subject(w: World) -> None:
    """The tag lists an artifact attached to another image (its manifest's subject)."""
    other = image_manifest(w.stub, REPO, "arm64")
    client = w.stub.client()
    (theirs,) = attach_envelopes(client, REPO, other, [w.statement(other.digest)], w.key)
    client.close()
    w.list_only({**w.listing()[0], "digest": theirs.artifact})


def _statement_about_another_digest(w: World) -> None:
    """An artifact about this image whose signed Statement is about another digest."""
    w.swap_envelope(attest.sign_statement(w.statement("sha256:" + "e" * 64), w.key))


def _missing_artifact(w: World) -> None:
    w.list_only({**w.listing()[0], "digest": "sha256:" + "2" * 64})


def _missing_blob(w: World) -> None:
    del w.stub.blobs[(REPO, w.attached.envelope)]


def _blob_with_other_content(w: World) -> None:
    w.stub.blobs[(REPO, w.attached.envelope)] = b'{"payloadType": "application/vnd.in-toto+json"}'


def _not_dsse(w: World) -> None:
    w.swap_envelope(json.dumps({"critical": {"type": "cosign container image signature"}}).encode())


def _simple_signing_layer(w: World) -> None:
    w.swap_envelope(b'{"critical": {}}', media_type="application/vnd.dev.cosign.simplesigning.v1+json")


def _signature_for_another_payload(w: World) -> None:
    ours = json.loads(attest.sign_statement(w.statement(), w.key))
    other = w.statement()
    other["predicate"] = {**other["predicate"], "verdict": "checked"}  # type: ignore[dict-item]
    theirs = json.loads(attest.sign_statement(other, w.key))
    ours["signatures"] = theirs["signatures"]  # a real signature, by the right key, of other bytes
    w.swap_envelope(json.dumps(ours).encode())


def _hostile_payload_type(w: World) -> None:
    w.swap_envelope(json.dumps({"payloadType": "\x1b[31mok\r\nimagekit: ok: forged" + "x" * 5000}).encode())


def _envelope_size_over_the_bound(w: World) -> None:
    w.swap_envelope(attest.sign_statement(w.statement(), w.key), size=ENVELOPE_BYTES + 1)


def _envelope_longer_than_said(w: World) -> None:
    w.swap_envelope(attest.sign_statement(w.statement(), w.key), size=10)


def _two_layers(w: World) -> None:
    artifact = w.artifact()
    layers = list(artifact["layers"])  # type: ignore[call-overload]
    artifact["layers"] = layers + layers
    w.relist(artifact)


def _artifact_not_json(w: World) -> None:
    w.stub.replace_manifest(REPO, "x", b"not json at all", OCI_MANIFEST)
    w.list_only({**w.listing()[0], "digest": digest_of(b"not json at all")})


def _duplicate_bad_entries(w: World) -> None:
    _missing_blob(w)
    w.list_only(*([w.listing()[0]] * 3))


# Each: the registry's answer, what the one refused line says (exit 1, "imagekit: refused: ...").
REFERRER_CASES: dict[str, tuple[Callable[[World], None], str]] = {
    "an artifact of another subject": (_for_another_subject, "its manifest is about sha256:"),
    "a Statement about another digest": (_statement_about_another_digest, "it is about sha256:eeee"),
    "an artifact manifest that is not there": (_missing_artifact, "HTTP 404"),
    "an envelope blob that is not there": (_missing_blob, "HTTP 404"),
    "an envelope blob with other content": (_blob_with_other_content, "came back with other content"),
    "an envelope that is not DSSE": (
        _not_dsse,
        "its payloadType is 'None', not application/vnd.in-toto+json",
    ),
    "a simple-signing layer": (_simple_signing_layer, "its layer is not a DSSE envelope"),
    "a signature over another payload": (_signature_for_another_payload, "no signature verifies"),
    "a payloadType with control characters": (_hostile_payload_type, "its payloadType is"),
    "an envelope size over the bound": (_envelope_size_over_the_bound, "its envelope's size is not a number"),
    "an envelope longer than its size": (_envelope_longer_than_said, "answered more than 10 bytes"),
    "two layers": (_two_layers, "does not hold exactly one layer"),
    "an artifact manifest that is not JSON": (_artifact_not_json, "not JSON"),
    "a bad entry listed three times": (_duplicate_bad_entries, "HTTP 404"),
}


@pytest.mark.parametrize("case", REFERRER_CASES, ids=list(REFERRER_CASES))
def test_a_hostile_referrer_is_one_refused_line_and_exit_1(world: World, case: str) -> None:
    change, said = REFERRER_CASES[case]
    change(world)
    result = world.verify()
    (line,) = lines_of(result, 1)
    assert line.startswith("imagekit: refused: sha256:") and said in line, line
    assert result.stdout == ""


def test_a_good_entry_listed_three_times_counts_once(world: World) -> None:
    world.list_only(*([world.listing()[0]] * 3))
    result = world.verify()
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1


def test_a_listing_of_other_artifact_types_only_attaches_nothing(world: World) -> None:
    world.list_only({**world.listing()[0], "artifactType": "application/vnd.example.sbom+json"})
    (line,) = lines_of(world.verify(), 1)
    assert line.endswith("no signed verification attestation is attached"), line


def test_a_good_attestation_beside_hostile_ones_still_counts(world: World) -> None:
    good = world.listing()[0]
    world.list_only(good, {**good, "digest": "sha256:" + "3" * 64}, good)
    result = world.verify()
    assert result.exit_code == 0 and result.stdout.startswith("ok: "), result.stderr


def test_a_registry_that_cannot_be_reached_is_exit_3(world: World) -> None:
    host = world.stub.host
    world.stub.close()
    result = run_cli(
        "attest",
        "verify",
        f"{host}/{REPO}@{world.image.digest}",
        "--key",
        str(world.public),
        "--retries",
        "1",
    )
    (line,) = lines_of(result, 3)
    assert host in line


def test_a_digest_the_registry_does_not_hold_has_nothing_attached(world: World) -> None:
    missing = "sha256:" + hashlib.sha256(b"nothing").hexdigest()
    result = run_cli(
        "attest",
        "verify",
        f"{world.stub.host}/{REPO}@{missing}",
        "--key",
        str(world.public),
        "--retries",
        "1",
    )
    (line,) = lines_of(result, 1)
    assert line.endswith("no signed verification attestation is attached")


def test_an_envelope_with_a_url_safe_signature_is_read(world: World) -> None:
    """DSSE allows the URL-safe base64 alphabet; a re-encoded honest envelope still verifies."""
    envelope = json.loads(attest.sign_statement(world.statement(), world.key))
    raw = base64.b64decode(envelope["signatures"][0]["sig"])
    envelope["signatures"][0]["sig"] = base64.urlsafe_b64encode(raw).decode()
    world.swap_envelope(json.dumps(envelope).encode())
    assert world.verify().exit_code == 0


# -- what the verifier is asked (issue 33) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"), [("--gpu", ""), ("--gpu", "  "), ("--max-age", ""), ("--max-age", " ")]
)
def test_an_empty_requirement_is_refused_not_read_as_none(world: World, flag: str, value: str) -> None:
    """`--gpu "$GPU"` with GPU unset must not pass an image verified on any GPU (before: exit 0)."""
    (line,) = lines_of(world.verify(flag, value), 2)
    assert f"{flag} {value!r}: an empty value requires nothing" in line


def _dated(w: World, delta: timedelta) -> None:
    """The attestation, signed again with its verification finished ``delta`` from now."""
    when = (datetime.now(tz=timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")
    about = w.image.digest
    made = attest.verification_predicate(
        replace(SUBJECT, digest=about), replace(gpu_verification(), finished_at=when)
    )
    assert made is not None
    w.swap_envelope(attest.sign_statement(attest.statement(f"{w.stub.host}/{REPO}", about, *made), w.key))


@pytest.mark.parametrize("more", [(), ("--max-age", "30d")])
def test_a_verification_dated_in_the_future_is_refused(world: World, more: tuple[str, ...]) -> None:
    """A verified_at years ahead passed every --max-age (before: exit 0)."""
    _dated(world, timedelta(days=3650))
    (line,) = lines_of(world.verify(*more), 1)
    assert "is in the future" in line and "verified_at" in line
    assert str(datetime.now(tz=timezone.utc).year + 10) in line  # the time itself is named


def test_a_verification_within_the_clock_skew_counts(world: World) -> None:
    _dated(world, timedelta(seconds=CLOCK_SKEW_S // 2))
    result = world.verify("--max-age", "1h")
    assert result.exit_code == 0, result.stderr
