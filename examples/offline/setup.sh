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
# The CPU build of torch (torch-X+cpu) by name, from PyTorch's CPU index (an extra index: numpy and
# torch's dependencies still come from the host's usual index, and a find-links dir or local index
# that already holds torch-X+cpu is used as well). An unreachable index fails fast (--retries 1
# --timeout 15); TORCH_INDEX_URL= (empty) leaves PyTorch's index out entirely, e.g. offline hosts.
TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
index_args=()
if [[ -n "$TORCH_INDEX_URL" ]]; then
    index_args=(--extra-index-url "$TORCH_INDEX_URL")
fi
"$PYTHON" -m pip download --dest "$here/wheelhouse" --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 --implementation cp \
    --retries 1 --timeout 15 "${index_args[@]}" \
    "torch==${TORCH_VERSION}+cpu" numpy
ls -la "$here/wheelhouse"
