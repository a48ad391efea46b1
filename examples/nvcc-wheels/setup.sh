#!/usr/bin/env bash
# setup.sh - the nvcc-wheels example: a devel image whose CUDA compiler comes from NVIDIA's PyPI
# wheels at the very CUDA release torch pins, on a plain base with no CUDA toolkit: each CUDA
# library is in the image once (issue 36, "Once").
#
# PyPI's torch 2.15.0 is the CUDA 13.2 build: it pins cuda-toolkit[cublas,cudart,...]==13.2.2, and
# that metapackage's nvcc/crt/nvvm/cccl extras hold the compiler of the same release (13.2.86).
# This fills ./wheelhouse with torch's closure plus those extras, for the local Debian base's
# Python 3.11 on x86_64 Linux, whatever the host.
#
# About 3.1 GB: downloads go to a cache (IMAGEKIT_CACHE, default ~/.cache/imagekit) that reruns
# reuse without asking the index again; ./wheelhouse holds hard links to the cached files (copies
# where the cache is on another file system). Needs root for the base image (scripts/base-images.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
cache=${IMAGEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}/nvcc-wheels
# The pip and setuptools every imagekit venv is upgraded to right after it is made
# (imagekit/data/advisories.yaml's venv_tools): a wheelhouse without them cannot build the image.
venv_tools_text=$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    'from imagekit.facts.advisories import load_advisories; print(*load_advisories().venv_requirements())')
read -r -a venv_tools <<< "$venv_tools_text"
# What the matrix installs: torch (no companions: the example is about CUDA's compiler), NumPy,
# ninja (torch's extension builder) and the compiler extras, resolved together: one cuda-toolkit;
# and the venv's tools.
requirements=("torch==2.15.0" "numpy" "ninja" "cuda-toolkit[nvcc,crt,nvvm,cccl]" "${venv_tools[@]}")
log() { printf '[nvcc-wheels] %s\n' "$*" >&2; }

"$repo/scripts/base-images.sh" debian-python
mkdir -p "$cache"
stamp="$cache/complete"
if [[ -f $stamp && $(cat "$stamp") == "${requirements[*]}" ]]; then
    log "wheels cached in $cache"
else
    log "downloading ${requirements[*]} and their CUDA wheels into $cache"
    # pip does not widen --platform: name every manylinux tag the base's glibc (2.36) accepts
    # (the cu13 wheels use 2_27, 2_18, 2_17 and 2_12 among others).
    platforms=()
    for glibc in 36 35 34 33 32 31 30 29 28 27 26 25 24 23 22 21 20 19 18 17 12 5; do
        platforms+=(--platform "manylinux_2_${glibc}_x86_64")
    done
    # A host-wide pip constraint (some machines cap torch) must not change what the image gets.
    PIP_CONSTRAINT="" "$PYTHON" -m pip download --dest "$cache" --only-binary=:all: \
        --python-version 3.11 --implementation cp "${platforms[@]}" \
        --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 \
        --retries 2 --timeout 60 "${requirements[@]}"
    printf '%s' "${requirements[*]}" > "$stamp"
fi
rm -rf "$here/wheelhouse"
mkdir -p "$here/wheelhouse"
for wheel in "$cache"/*.whl; do
    ln "$wheel" "$here/wheelhouse/" 2>/dev/null || cp "$wheel" "$here/wheelhouse/"
done
du -sh "$here/wheelhouse" >&2
