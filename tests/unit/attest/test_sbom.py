"""An image's SBOM from what the probe read inside it: a CycloneDX 1.6 document its own schema
accepts, naming the image by digest, its base, the Debian and Python packages with their package
URLs (each once), the CUDA libraries torch loaded, and a clipped inventory marked so."""

from __future__ import annotations

import json
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from imagekit.attest.sbom import build_sbom
from imagekit.report.verification import Inventory, Package

DIGEST = "sha256:" + "ab" * 32
BASE = "nvidia/cuda@sha256:" + "cd" * 32
INVENTORY = Inventory(
    python="3.12.3",
    os_release={"ID": "ubuntu", "VERSION_ID": "24.04", "VERSION_CODENAME": "noble"},
    python_packages=(
        Package("torch", "2.11.0"),
        Package("nvidia_cudnn_cu12", "9.10.2.21"),
        Package("torch", "2.11.0"),  # two dist-info dirs of one distribution
    ),
    os_packages=(Package("libc6", "2.39-0ubuntu8", "amd64"), Package("ca-certificates", "20240203")),
    cuda_libraries={"nccl": "2.27.3", "cudnn": "9.10.2"},
    loaded_libraries=("/opt/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",),
)


def sbom(inventory: Inventory = INVENTORY, base: str | None = BASE) -> dict[str, Any]:
    return build_sbom("ghcr.io/acme/pytorch", DIGEST, inventory, None, base, "cell-a")


def by_ref(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in document["components"]}


def test_the_document_is_cyclonedx_1_6_as_its_schema_says() -> None:
    document = sbom()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document)) is None
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    image = document["metadata"]["component"]
    assert (image["name"], image["version"], image["type"]) == ("ghcr.io/acme/pytorch", DIGEST, "container")
    assert image["purl"] == f"pkg:oci/pytorch@{DIGEST}?repository_url=ghcr.io/acme/pytorch"
    assert {"name": "imagekit:cell", "value": "cell-a"} in image["properties"]


def test_every_part_the_probe_read_is_named_once_with_its_package_url() -> None:
    parts = by_ref(sbom())
    assert parts[f"base:{BASE}"]["version"] == "sha256:" + "cd" * 32
    assert parts["os"]["name"] == "ubuntu" and parts["os"]["version"] == "24.04"
    assert (
        parts["deb:libc6@2.39-0ubuntu8"]["purl"]
        == "pkg:deb/ubuntu/libc6@2.39-0ubuntu8?arch=amd64&distro=ubuntu-24.04"
    )
    assert parts["pypi:nvidia_cudnn_cu12@9.10.2.21"]["purl"] == "pkg:pypi/nvidia-cudnn-cu12@9.10.2.21"
    assert parts["cuda:nccl@2.27.3"]["type"] == "library"
    assert parts["file:" + INVENTORY.loaded_libraries[0]]["name"] == "libcudnn.so.9"
    assert sum(1 for ref in parts if ref.startswith("pypi:torch@")) == 1
    assert len(parts) == 1 + 1 + 2 + 2 + 2 + 1  # base, os, debs, wheels, CUDA libraries, files
    (depends,) = [d for d in sbom()["dependencies"] if d["ref"] == f"image:{DIGEST}"]
    assert set(depends["dependsOn"]) == set(parts)  # the image holds every part


def test_only_what_was_read_is_written() -> None:
    bare = Inventory(python_packages=(Package("torch", "2.11.0"),))  # no dpkg, no base named
    parts = by_ref(sbom(bare, base=None))
    assert list(parts) == ["pypi:torch@2.11.0"]
    assert "properties" not in sbom(bare)["metadata"]


def test_a_clipped_inventory_is_marked_in_the_documents_properties() -> None:
    clipped = Inventory(python_packages=(Package("torch", "2.11.0"),), clipped=True)
    properties = sbom(clipped)["metadata"]["properties"]
    assert {p["name"] for p in properties} == {"imagekit:clipped"}
