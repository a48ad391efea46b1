"""tests/unit/k8s/test_dra.py's slow half: every DRA manifest of the shipped matrices, for each option
set, strictly valid for every Kubernetes release from 1.34 (DRA's GA) to 1.37 (the fast tier checks
the first and the last)."""

from __future__ import annotations

import pytest

from imagekit.k8s.options import JobOptions
from tests.unit.k8s.test_dra import KUBERNETES, OPTIONS, strictly_valid


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_manifest_is_strictly_valid_for_kubernetes_1_34_to_1_37(options: JobOptions) -> None:
    assert KUBERNETES == ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
    strictly_valid(options, KUBERNETES)
