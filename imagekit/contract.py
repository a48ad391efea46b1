"""Where things live inside every imagekit image: the check script, the pip constraints, the venv.

Kept apart from the renderer so that the stages that only read images (verify, report,
publish) do not import Jinja and the matrix schema. Names and labels are ``imagekit.naming``'s.
"""

from __future__ import annotations

from pathlib import Path

CHECK_SCRIPT_CONTEXT = "imagekit-check.py"  # its name in a build context
CHECK_SCRIPT_PATH = "/opt/imagekit/check.py"  # its path in every image
CONSTRAINTS_FILE = "/etc/imagekit/constraints.txt"  # pins torch for every later pip install
VENV = "/opt/venv"  # where torch lives in images whose base brings no PyTorch of its own


def packaged_check_script() -> Path:
    return Path(__file__).parent / "incontainer" / "check.py"
