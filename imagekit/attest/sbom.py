"""An image's SBOM (CycloneDX 1.6 JSON, through cyclonedx-python-lib) from what the probe read
inside it while it was verified: the Python distributions (torch, its nvidia-*/cuda-* wheels and
companions), the Debian packages dpkg lists as installed, the CUDA libraries the check process
loaded (with the cuDNN and NCCL versions torch reported), and the base image by digest.

Only what was read is written: an image whose verification has no inventory (an earlier
release's probe) gets no SBOM, and a list the probe clipped is marked so in the BOM's properties.
"""

from __future__ import annotations

import json
from typing import Any

from imagekit.report.verification import Inventory

# How the BOM names what it holds, beyond CycloneDX's own fields.
PROPERTY_PREFIX = "imagekit:"


def _bom_ref(kind: str, name: str, version: str) -> str:
    return f"{kind}:{name}@{version}"


def build_sbom(
    repository: str,
    digest: str,
    inventory: Inventory,
    base_image: str | None,
    base_digest: str | None,
    cell: str,
) -> dict[str, Any]:
    """The CycloneDX document (as JSON values) for the image ``repository@digest``."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.bom_ref import BomRef
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom()
    path = repository.partition("/")[2]
    image = Component(
        name=repository,
        version=digest,
        type=ComponentType.CONTAINER,
        bom_ref=BomRef(f"image:{digest}"),
        purl=PackageURL("oci", None, path.rsplit("/", 1)[-1], digest, {"repository_url": repository}),
        properties=[Property(name=f"{PROPERTY_PREFIX}cell", value=cell)],
    )
    bom.metadata.component = image
    parts: list[Component] = []
    if base_image or base_digest:
        reference = base_digest or base_image or ""
        base_name, _, base_version = reference.partition("@")
        parts.append(
            Component(
                name=base_name,
                version=base_version or None,
                type=ComponentType.CONTAINER,
                bom_ref=BomRef(f"base:{reference}"),
                description="base image",
                properties=[Property(name=f"{PROPERTY_PREFIX}role", value="base-image")],
            )
        )
    os_release = dict(inventory.os_release)
    distro = os_release.get("ID", "")
    if inventory.os_packages is not None:
        parts.append(
            Component(
                name=distro or "linux",
                version=os_release.get("VERSION_ID"),
                type=ComponentType.OPERATING_SYSTEM,
                bom_ref=BomRef("os"),
            )
        )
        for package in inventory.os_packages:
            qualifiers = {"arch": package.arch} if package.arch else {}
            if os_release.get("VERSION_CODENAME"):
                qualifiers["distro"] = f"{distro}-{os_release['VERSION_ID']}" if distro else ""
            parts.append(
                Component(
                    name=package.name,
                    version=package.version,
                    type=ComponentType.LIBRARY,
                    bom_ref=BomRef(_bom_ref("deb", package.name, package.version)),
                    purl=PackageURL("deb", distro or None, package.name, package.version, qualifiers or None),
                )
            )
    for package in inventory.python_packages:
        parts.append(
            Component(
                name=package.name,
                version=package.version,
                type=ComponentType.LIBRARY,
                bom_ref=BomRef(_bom_ref("pypi", package.name, package.version)),
                purl=PackageURL("pypi", None, package.name.lower().replace("_", "-"), package.version),
            )
        )
    for library, version in sorted(inventory.cuda_libraries.items()):
        parts.append(
            Component(
                name=library,
                version=version,
                type=ComponentType.LIBRARY,
                bom_ref=BomRef(_bom_ref("cuda", library, version)),
                description="loaded by torch in the image (as torch reported it)",
                properties=[Property(name=f"{PROPERTY_PREFIX}role", value="cuda-library")],
            )
        )
    for path in inventory.loaded_libraries:
        parts.append(
            Component(
                name=path.rsplit("/", 1)[-1],
                type=ComponentType.FILE,
                bom_ref=BomRef(f"file:{path}"),
                properties=[Property(name=f"{PROPERTY_PREFIX}loaded-from", value=path)],
            )
        )
    seen: set[str] = set()
    for part in parts:
        if str(part.bom_ref) not in seen:  # a package listed twice (two dist-info dirs) once
            seen.add(str(part.bom_ref))
            bom.components.add(part)
    bom.register_dependency(image, list(bom.components))
    if inventory.clipped:
        bom.metadata.properties.add(
            Property(name=f"{PROPERTY_PREFIX}clipped", value="the image held more than the probe lists")
        )
    data: dict[str, Any] = json.loads(JsonV1Dot6(bom).output_as_string(indent=None))
    return data
