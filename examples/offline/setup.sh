#!/usr/bin/env bash
# setup.sh - prepare the offline demo: local base images and a wheelhouse of real wheels.
# Needs root (scripts/base-images.sh uses debootstrap and docker import) and, once, pip access
# to an index from the host; the image builds themselves reach no network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

"$repo/scripts/base-images.sh" debian-python
mkdir -p "$here/wheelhouse"
# The image's Python is 3.11 on x86_64 Linux: ask pip for exactly those wheels, whatever the host.
# The CPU build of torch (torch-X+cpu) comes from PyTorch's CPU index when the host's pip is
# configured for it; any torch wheel that matches is checked by the build guard.
"$PYTHON" -m pip download --dest "$here/wheelhouse" --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 --implementation cp \
    "torch==$TORCH_VERSION" numpy
ls -la "$here/wheelhouse"
