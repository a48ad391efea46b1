#!/usr/bin/env bash
# setup.sh - the CUDA-wheel example: real CUDA userspace from PyPI, no GPU and no nvidia/cuda base.
#
# PyPI's torch 2.1.2 is the CUDA 12.1 build: it pulls cuBLAS 12.1.3.1, cuDNN 8.9.2.26, NCCL 2.18.1
# and the CUDA 12.1 runtime as nvidia-*-cu12 wheels (shared/FACTS.md). This fills ./wheelhouse with
# exactly those wheels for the local Debian base's Python 3.11 on x86_64 Linux, whatever the host.
#
# About 2.5 GB: downloads go to a cache (IMAGEKIT_CACHE, default ~/.cache/imagekit) that reruns
# reuse without asking the index again; ./wheelhouse holds hard links to the cached files (copies
# where the cache is on another file system). Needs root for the base image (scripts/base-images.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
cache=${IMAGEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}/cuda-wheels
# The pip and setuptools every imagekit venv is upgraded to right after it is made
# (imagekit/data/advisories.yaml's venv_tools): a wheelhouse without them cannot build the image.
venv_tools_text=$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    'from imagekit.facts.advisories import load_advisories; print(*load_advisories().venv_requirements())')
read -r -a venv_tools <<< "$venv_tools_text"
# What the matrix installs: torch (its companions are left out: the example is about CUDA's
# libraries), the NumPy 1.x that torch 2.1 was compiled against, and the venv's tools.
requirements=("torch==2.1.2" "numpy<2" "${venv_tools[@]}")
log() { printf '[cuda-wheels] %s\n' "$*" >&2; }

"$repo/scripts/base-images.sh" debian-python
mkdir -p "$cache"
stamp="$cache/complete"
if [[ -f $stamp && $(cat "$stamp") == "${requirements[*]}" ]]; then
    log "wheels cached in $cache"
else
    log "downloading ${requirements[*]} and their CUDA wheels into $cache"
    # pip does not widen --platform: name every manylinux tag the base's glibc (2.36) accepts.
    # A host-wide pip constraint (some machines cap torch) must not change what the image gets.
    PIP_CONSTRAINT="" "$PYTHON" -m pip download --dest "$cache" --only-binary=:all: \
        --python-version 3.11 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --retries 2 --timeout 60 "${requirements[@]}"
    printf '%s' "${requirements[*]}" > "$stamp"
fi
rm -rf "$here/wheelhouse"
mkdir -p "$here/wheelhouse"
for wheel in "$cache"/*.whl; do
    ln "$wheel" "$here/wheelhouse/" 2>/dev/null || cp "$wheel" "$here/wheelhouse/"
done
du -sh "$here/wheelhouse" >&2
