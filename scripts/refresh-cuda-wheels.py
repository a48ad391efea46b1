#!/usr/bin/env python3
"""`python -m imagekit.refresh.cuda_wheels`, kept under the path cuda_wheels.yaml and the Dockerfiles name."""

import runpy

runpy.run_module("imagekit.refresh.cuda_wheels", run_name="__main__", alter_sys=True)
