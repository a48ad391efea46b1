"""The CEL a DRA claim selects devices with: a product name CEL could misread is refused, an accepted
one is a literal of itself, and versions are written in Kubernetes' strict semver form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagekit.core.errors import InputError
from imagekit.k8s.dra_cel import checked_product_name, product_selector, semver_literal
from tests.unit.k8s.cel_semver import device_activation, evaluate

METACHARACTERS = [
    "NVIDIA H100' || true || '",
    'NVIDIA "H100"',
    "NVIDIA H100\\",
    "NVIDIA H100\n",
    "NVIDIA H100 (PCIe)",
    "NVIDIA\tH100",
    "",
    " NVIDIA H100",
    "x" * 97,
]


@pytest.mark.parametrize("name", METACHARACTERS)
def test_a_product_name_cel_could_misread_is_refused(name: str) -> None:
    with pytest.raises(InputError, match="with --gpu-request dra, the GPU's productName"):
        checked_product_name(name)


# Printable ASCII and then some: whatever is accepted becomes a literal CEL reads back as itself.
@given(st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=40))
def test_an_accepted_product_name_is_a_cel_literal_of_itself(name: str) -> None:
    try:
        selector = product_selector(name)
    except InputError:
        return
    for published, expected in ((name, True), (name + "x", False), (name[:-1], False)):
        device = {"attributes": {"productName": {"string": published}}}
        assert evaluate(selector, device_activation("gpu.nvidia.com", device)) is expected


def test_semver_literals_are_kubernetes_strict_form() -> None:
    assert semver_literal("450.80.02", "x") == "450.80.2"  # as the driver publishes 450.80.02
    assert semver_literal("9.0", "x") == "9.0.0"
    for bad in ("", "1.2.3.4", "v1.0", "1.0-rc1", "1" * 10):
        with pytest.raises(InputError):
            semver_literal(bad, "x")
