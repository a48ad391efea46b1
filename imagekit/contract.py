"""What every imagekit image carries and where: label names and the in-image check script.

Kept apart from the renderer so that the stages that only read images (verify, report,
publish) do not import Jinja and the matrix schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

LABEL_PREFIX = "imagekit."
CHECK_SCRIPT_CONTEXT = "imagekit-check.py"  # its name in a build context
CHECK_SCRIPT_PATH = "/opt/imagekit/check.py"  # its path in every image
CONSTRAINTS_FILE = "/etc/imagekit/constraints.txt"  # pins torch for every later pip install
VENV = "/opt/venv"  # where torch lives in images whose base brings no PyTorch of its own
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")  # an image id or a manifest digest


def packaged_check_script() -> Path:
    return Path(__file__).parent / "incontainer" / "check.py"


# The labels that tell the check script what an image must hold (its --expect-* options).
EXPECTED_LABELS = ("torch", "cuda", "cudnn", "python", "flavour")


def expectations(labels: Mapping[str, str]) -> dict[str, str]:
    """What an image promises, from its ``imagekit.*`` labels (absent or empty ones left out)."""
    return {k: labels[f"{LABEL_PREFIX}{k}"] for k in EXPECTED_LABELS if labels.get(f"{LABEL_PREFIX}{k}")}
