#!/usr/bin/env python3
"""imagekit in-image check: report what this image holds, as one JSON document.

Copied into every image at /opt/imagekit/check.py; standard library only (torch is imported when
present), so `docker run IMAGE python3 /opt/imagekit/check.py`, a CI job or a Kubernetes job can
run it without imagekit. This first version reports the software stack; the verification
harness extends it with the GPU checks.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time


def _torch_facts() -> dict[str, object]:
    started = time.monotonic()
    try:
        import torch
    except ImportError as exc:
        return {
            "name": "torch",
            "status": "fail",
            "detail": f"cannot import torch: {exc}",
            "duration_s": round(time.monotonic() - started, 3),
        }
    expected = os.environ.get("IMAGEKIT_EXPECT_TORCH")
    actual = torch.__version__
    ok = expected is None or actual.split("+")[0] == expected or actual == expected
    return {
        "name": "torch",
        "status": "pass" if ok else "fail",
        "expected": expected,
        "actual": actual,
        "detail": {"cuda_compiled": torch.cuda._is_compiled(), "torch_cuda": torch.version.cuda},
        "duration_s": round(time.monotonic() - started, 3),
    }


def main() -> int:
    checks = [
        {
            "name": "python",
            "status": "pass",
            "actual": platform.python_version(),
            "detail": sys.executable,
            "duration_s": 0.0,
        },
        _torch_facts(),
    ]
    print(json.dumps({"checks": checks}, indent=2))
    return 0 if all(c["status"] != "fail" for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
