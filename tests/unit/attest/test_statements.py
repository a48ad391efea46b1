"""Verification attestations: the Statement and its predicate, DSSE signing checked by an
independent verifier (securesystemslib's DSSE and in-toto's Statement model, from PyPI), keys
treated as untrusted input, and the verifier's judgement of each tampered case."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from imagekit.attest import statements as attest
from imagekit.core.errors import InputError
from imagekit.core.text import counted
from imagekit.report.verification import Verification
from tests.unit.attest_samples import (
    DIGEST,
    OTHER,
    REPO,
    SUBJECT,
    gpu_verification,
    in_toto_statement,
    private_pem,
    public_pem_of,
)
from tests.unit.report_samples import WAIVED


@pytest.fixture
def keypair(tmp_path: Path) -> tuple[attest.SigningKey, attest.PublicKey, Path]:
    pem = private_pem()
    (tmp_path / "k.pem").write_bytes(pem)
    (tmp_path / "k.pub").write_bytes(public_pem_of(pem))
    signing = attest.load_signing_key(tmp_path / "k.pem", {})
    assert signing is not None
    return signing, attest.load_public_key(tmp_path / "k.pub"), tmp_path / "k.pub"


def signed(key: attest.SigningKey, verification: Verification | None = None, digest: str = DIGEST) -> bytes:
    made = attest.verification_predicate(replace(SUBJECT, digest=digest), verification or gpu_verification())
    assert made is not None
    return attest.sign_statement(attest.statement(REPO, digest, *made), key)


def test_the_predicate_holds_what_the_verdict_rests_on() -> None:
    made = attest.verification_predicate(SUBJECT, gpu_verification(), {"GITHUB_RUN_ID": "77", "SECRET": "x"})
    assert made is not None
    kind, predicate = made
    assert kind == attest.VALIDATED_PREDICATE
    assert predicate["verdict"] == "validated"
    assert predicate["gpu"]["products"] == ["NVIDIA H200"] and predicate["gpu"]["driver"] == "560.35.03"
    assert {"name": "gemm_gpu", "status": "pass", "required": True} in predicate["checks"]
    assert predicate["figures"]["metrics"]["gemm_perf.tflops"] == 790.1
    assert predicate["software"]["torch"] == "2.5.1+cu124"
    assert predicate["software"]["libraries"] == {"cudnn": "9.1.0", "nccl": "2.21.5"}
    assert predicate["cell"]["input_digest"] == "0" * 64
    assert predicate["cell"]["base_digest"].endswith("2" * 64)
    assert predicate["run"]["runner"] == "gpu-runner-7" and predicate["run"]["ci"] == {"GITHUB_RUN_ID": "77"}
    assert predicate["probe"]["schema"] == 1
    assert predicate["advisories"] == []  # none found against this subject's installs
    waived = attest.verification_predicate(replace(SUBJECT, advisories=(WAIVED,)), gpu_verification())
    assert waived is not None
    # the signed statement carries what the matrix waived, and why: a verifier's policy may refuse it
    assert waived[1]["advisories"] == [WAIVED.as_json()]
    assert waived[1]["advisories"][0]["waived"] == "seed row: loads only trusted checkpoints"


def test_the_predicate_counts_the_scanners_findings_of_the_published_digest() -> None:
    from imagekit.report.scans import ScanSummary, SeverityCounts, WaivedFinding

    excused = WaivedFinding("GHSA-53q9-r3pm-6pq6", "torch", "2.5.1", "critical", "CVE-2025-32434", "seed row")
    scan = ScanSummary("trivy", "0.76.0", DIGEST, "critical", SeverityCounts(critical=1, low=3), (excused,))
    made = attest.verification_predicate(replace(SUBJECT, scans=(scan,)), gpu_verification())
    assert made is not None
    (found,) = made[1]["scans"]
    assert found["digest"] == DIGEST and found["threshold"] == "critical"
    assert found["counts"] == {"critical": 1, "high": 0, "medium": 0, "low": 3, "negligible": 0, "unknown": 0}
    assert found["waived"] == [
        {
            "id": "GHSA-53q9-r3pm-6pq6",
            "package": "torch",
            "version": "2.5.1",
            "severity": "critical",
            "advisory": "CVE-2025-32434",
            "reason": "seed row",
        }
    ]
    unscanned = attest.verification_predicate(SUBJECT, gpu_verification())
    assert unscanned is not None and unscanned[1]["scans"] == []


def test_no_gpu_gets_a_different_predicate_type_and_a_failure_none() -> None:
    checked = attest.verification_predicate(SUBJECT, gpu_verification("checked"))
    assert checked is not None and checked[0] == attest.CHECKED_PREDICATE
    assert checked[1]["verdict"] == "checked" and checked[1]["gpu"]["visible"] is False
    failed = replace(gpu_verification(), verdict="failed")
    assert attest.verification_predicate(SUBJECT, failed) is None


def test_an_independent_verifier_accepts_the_envelope(
    keypair: tuple[attest.SigningKey, attest.PublicKey, Path],
) -> None:
    """securesystemslib verifies the DSSE signature over its own PAE with the public key alone,
    and in-toto's Statement model parses the payload."""
    signing, _, pub = keypair
    raw = signed(signing)
    public = serialization.load_pem_public_key(pub.read_bytes())
    independent_id = (
        __import__("hashlib")
        .sha256(
            public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        .hexdigest()
    )
    key = SSlibKey.from_crypto(public, keyid=independent_id, scheme="ecdsa-sha2-nistp256")
    envelope = Envelope.from_dict(json.loads(raw))
    assert key.keyid in envelope.verify([key], 1)
    document = json.loads(envelope.payload)
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["subject"][0]["digest"] == {"sha256": DIGEST.removeprefix("sha256:")}
    # in-toto's Statement v1 model (in-toto-attestation) parses and validates the payload
    parsed = in_toto_statement(envelope.payload)
    assert parsed.pb.predicate_type == attest.VALIDATED_PREDICATE


def test_our_verifier_accepts_it_and_refuses_each_tampered_case(
    keypair: tuple[attest.SigningKey, attest.PublicKey, Path], tmp_path: Path
) -> None:
    signing, public, _ = keypair
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    need = attest.Requirement()
    good = attest.open_envelope(signed(signing), public)
    assert attest.judge(good, DIGEST, need, now) is None

    # a predicate edited after signing: the signature no longer covers it
    envelope = json.loads(signed(signing))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["gpu"]["products"] = ["NVIDIA B200"]
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(attest.AttestationError, match="no signature verifies"):
        attest.open_envelope(json.dumps(envelope).encode(), public)

    # another key
    other_pem = private_pem()
    (tmp_path / "o.pem").write_bytes(other_pem)
    other = attest.load_signing_key(tmp_path / "o.pem", {})
    assert other is not None
    with pytest.raises(attest.AttestationError, match="no signature verifies"):
        attest.open_envelope(signed(other), public)

    # an attestation for another digest
    about_other = attest.open_envelope(signed(signing, digest=OTHER), public)
    assert "not sha256:abab" in str(attest.judge(about_other, DIGEST, need, now))

    # checked without a GPU: refused by default, accepted with policy checked
    checked = attest.open_envelope(signed(signing, gpu_verification("checked")), public)
    assert "only checked without a GPU" in str(attest.judge(checked, DIGEST, need, now))
    assert attest.judge(checked, DIGEST, attest.Requirement("checked"), now) is None

    # a named GPU, an age
    assert attest.judge(good, DIGEST, attest.Requirement(gpu="h200"), now) is None
    assert "not a B200" in str(attest.judge(good, DIGEST, attest.Requirement(gpu="B200"), now))
    assert "not a 200" in str(attest.judge(good, DIGEST, attest.Requirement(gpu="200"), now))

    old = attest.Requirement(max_age=attest.parse_age("12h"))
    assert "older than" in str(attest.judge(good, DIGEST, old, now))


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"payloadType": "text/plain"}',
        b'{"payloadType": "application/vnd.in-toto+json", "payload": "%%%", "signatures": []}',
    ],
)
def test_hostile_envelopes_are_one_line(
    raw: bytes, keypair: tuple[attest.SigningKey, attest.PublicKey, Path]
) -> None:
    with pytest.raises(attest.AttestationError) as caught:
        attest.open_envelope(raw, keypair[1])
    assert "\n" not in caught.value.message


def test_keys_are_untrusted_input_and_never_echoed(tmp_path: Path) -> None:
    pem = private_pem()
    env_key = attest.load_signing_key(None, {attest.KEY_ENV: pem.decode()})
    assert env_key is not None and env_key.source == attest.KEY_ENV
    assert attest.load_signing_key(None, {}) is None
    secret_line = pem.decode().splitlines()[1]
    assert secret_line not in repr(env_key)

    broken = pem.decode().replace(secret_line, secret_line[::-1])
    with pytest.raises(InputError) as caught:
        attest.load_signing_key(None, {attest.KEY_ENV: broken})
    assert secret_line[::-1] not in caught.value.message and attest.KEY_ENV in caught.value.message

    (tmp_path / "p384.pem").write_bytes(private_pem(ec.SECP384R1()))
    with pytest.raises(InputError, match="P-256"):
        attest.load_signing_key(tmp_path / "p384.pem", {})
    rsa_pem = rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "rsa.pem").write_bytes(rsa_pem)
    with pytest.raises(InputError, match="P-256"):
        attest.load_signing_key(tmp_path / "rsa.pem", {})
    encrypted = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    (tmp_path / "enc.pem").write_bytes(encrypted)
    with pytest.raises(InputError, match="encrypted"):
        attest.load_signing_key(tmp_path / "enc.pem", {})
    (tmp_path / "big.pem").write_bytes(b"A" * (attest.KEY_BYTES + 1))
    with pytest.raises(InputError, match="larger than"):
        attest.load_signing_key(tmp_path / "big.pem", {})
    with pytest.raises(InputError, match="no such file"):
        attest.load_signing_key(tmp_path / "missing.pem", {})
    with pytest.raises(InputError, match="private key"):
        attest.load_public_key(tmp_path / "p384.pem")


@pytest.mark.parametrize(
    ("wanted", "product", "names"),
    [
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("h100 80gb", "NVIDIA H100 80GB HBM3", True),
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("GH200", "NVIDIA GH200 480GB", True),
        ("H200", "NVIDIA GH200 480GB", False),  # another GPU, in a Grace machine
        ("H100", "NVIDIA H100-PCIe", True),
        ("H10", "NVIDIA H100 80GB HBM3", False),
        ("B200", "NVIDIA GB200", False),
        ("", "NVIDIA H100 80GB HBM3", False),
    ],
)
def test_a_gpu_requirement_names_whole_words(wanted: str, product: str, names: bool) -> None:
    assert attest.names_product(wanted, product) is names


@pytest.mark.parametrize(
    ("private", "named"),
    [
        (rsa.generate_private_key(65537, 2048), "an RSA public key"),
        (ec.generate_private_key(ec.SECP384R1()), "an EC secp384r1 public key"),
    ],
)
def test_a_wrong_type_public_key_is_named_and_a_public_key_asked_for(
    tmp_path: Path, private: object, named: str
) -> None:
    """`attest verify --key` given an RSA or P-384 public key was told to give a private key."""
    pem = private.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "k.pub").write_bytes(pem)
    with pytest.raises(InputError) as caught:
        attest.load_public_key(tmp_path / "k.pub")
    message = caught.value.message
    assert f"k.pub: {named};" in message and "public key in PEM" in message
    assert "private key" not in message and "-pubout" in message


def test_counts_are_pluralised_in_one_place() -> None:
    assert [counted(n, "problem") for n in (0, 1, 2, 1000)] == [
        "0 problems",
        "1 problem",
        "2 problems",
        "1,000 problems",
    ]
    assert counted(1, "cell") == "1 cell" and counted(3, "index", "indexes") == "3 indexes"
