"""Shared samples of the attestation tests: keys, a GPU runner's verification, its subject, and
in-toto's own Statement parser (the independent verifier)."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement

from imagekit.attest import statements as attest
from imagekit.report.verification import CheckRecord, Inventory, Package, Verification

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
REPO = "127.0.0.1:5000/acme/pytorch"


def private_pem(curve: ec.EllipticCurve | None = None) -> bytes:
    key = ec.generate_private_key(curve or ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_pem_of(pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(pem, None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def signing_key(pem: bytes) -> attest.SigningKey:
    """``pem``'s key, as imagekit loads one from the environment."""
    key = attest.load_signing_key(None, {attest.KEY_ENV: pem.decode()})
    assert key is not None
    return key


def gpu_verification(verdict: str = "validated") -> Verification:
    """A verification as a GPU runner records it (the probe's H200 figures)."""
    gpu = verdict == "validated"
    checks = (
        CheckRecord(
            "nvidia_smi",
            "pass" if gpu else "skip",
            True,
            actual='{"driver": "560.35.03", "gpus": [{"name": "NVIDIA H200"}]}',
        ),
        CheckRecord("torch", "pass", True, expected="2.5.1", actual="2.5.1+cu124"),
        CheckRecord("torch_cuda", "pass", True, expected="12.4", actual="12.4"),
        CheckRecord("cuda_available", "pass" if gpu else "skip", True),
        CheckRecord("gemm_gpu", "pass" if gpu else "skip", True),
        CheckRecord("gemm_perf", "pass" if gpu else "skip", False, actual="790.1"),
    )
    return Verification(
        target="cell-a",
        image="sha256:" + "1" * 64,
        gpus="all" if gpu else "none",
        verdict=verdict,  # type: ignore[arg-type]
        gpu_requested=gpu,
        gpu_visible=gpu,
        checks=checks,
        duration_s=42.0,
        metrics={"gemm_perf.tflops": 790.1, "gemm_perf.device": "NVIDIA H200"} if gpu else {},
        finished_at="2026-12-01T02:00:00Z",
        image_digest=DIGEST,
        inventory=Inventory(
            python="3.12.3",
            python_packages=(Package("torch", "2.5.1+cu124"), Package("nvidia-cudnn-cu12", "9.1.0.70")),
            cuda_libraries={"cudnn": "9.1.0", "nccl": "2.21.5"},
            probe_schema=1,
        ),
        runner="gpu-runner-7",
    )


SUBJECT = attest.Subject(
    REPO, DIGEST, "cell-a", "0" * 64, "sha256:" + "1" * 64, "nvidia/cuda:12.4.1-devel-ubuntu22.04",
    "nvidia/cuda@sha256:" + "2" * 64, ("NVIDIA H200",), "560.35.03", "12.6",
)  # fmt: skip


def in_toto_statement(payload: bytes) -> Statement:
    """The payload through in-toto's own Statement v1 model, validated (ValueError otherwise)."""
    parsed = Statement.copy_from_pb(json_format.Parse(payload, statement_pb2.Statement()))
    parsed.validate()
    return parsed
