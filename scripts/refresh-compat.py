#!/usr/bin/env python3
"""`python -m imagekit.refresh.compat`, kept under the path compat.yaml's note and `imagekit plan` name."""

import runpy

runpy.run_module("imagekit.refresh.compat", run_name="__main__", alter_sys=True)
