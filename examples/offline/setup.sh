#!/usr/bin/env bash
# setup.sh - prepare the offline demo: local base images and a wheelhouse of real wheels.
# Needs root (scripts/base-images.sh uses debootstrap and docker import) and, once, pip access
# to an index from the host; the image builds themselves reach no network.
#
# Both platforms: the x86_64 cells install PyTorch's torch-X+cpu; the arm64 cell installs PyPI's
# torch 2.10.0 aarch64 wheel, which is the CPU build in effect (every nvidia-*/triton requirement
# of it holds on x86_64 only), on the arm64 debootstrap of the same Debian (built, and on an x86
# host run, under QEMU: scripts/engine.sh emulation). One wheelhouse holds both machines' wheels;
# each cell's closure is resolved for its own machine. WITH_ARM64=0 leaves the arm64 part out;
# ARM64_BASE=0 keeps the arm64 wheels and leaves out only the arm64 base (its debootstrap under QEMU
# takes ~8 minutes on 2 CPUs: the test suite plans the arm64 cell but builds it only in its
# multiarch tier).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
# The front-end cells (frontend: jupyter | ssh): JupyterLab, pinned exactly, and dumb-init, the
# init that runs as PID 1 in front-end images. They resolve to 92 wheels, 50 MB (JupyterLab 17 MB,
# babel 11 MB, debugpy 5 MB, jedi 5 MB, the rest small; jinja2, MarkupSafe and typing-extensions
# are torch's too), next to the 219 MB of torch, numpy and their dependencies.
JUPYTERLAB_VERSION=${JUPYTERLAB_VERSION:-4.6.6}
DUMB_INIT_VERSION=${DUMB_INIT_VERSION:-1.2.5.post1}
WHEELHOUSE=${WHEELHOUSE:-$here/wheelhouse}
WITH_ARM64=${WITH_ARM64:-1}
ARM64_BASE=${ARM64_BASE:-$WITH_ARM64}
ARM64_TORCH_VERSION=${ARM64_TORCH_VERSION:-2.10.0}

# The pip and setuptools every imagekit venv is upgraded to right after it is made
# (imagekit/data/advisories.yaml's venv_tools): a wheelhouse without them cannot build the image.
venv_tools_text=$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    'from imagekit.facts.advisories import load_advisories; print(*load_advisories().venv_requirements())')
read -r -a venv_tools <<< "$venv_tools_text"

# The base has openssh-server (the ssh front end), without host keys.
"$repo/scripts/base-images.sh" debian-python
mkdir -p "$WHEELHOUSE"
# The image's Python is 3.11 on x86_64 Linux: ask pip for exactly those wheels, whatever the host.
# The CPU build of torch (torch-X+cpu) by name, from PyTorch's CPU index (an extra index: numpy and
# torch's dependencies still come from the host's usual index, and a find-links dir or local index
# that already holds torch-X+cpu is used as well). An unreachable index fails fast (--retries 1
# --timeout 15); TORCH_INDEX_URL= (empty) leaves PyTorch's index out entirely, e.g. offline hosts.
TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
# Asked once: an index that does not answer would otherwise print a pip retry warning per package.
if [[ -n "$TORCH_INDEX_URL" ]] && ! "$PYTHON" -c \
    'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15).close()' \
    "${TORCH_INDEX_URL%/}/" 2>/dev/null; then
    echo "[offline] $TORCH_INDEX_URL does not answer from here: torch's CPU wheel must come from the usual index" >&2
    TORCH_INDEX_URL=
fi
index_args=()
if [[ -n "$TORCH_INDEX_URL" ]]; then
    index_args=(--extra-index-url "$TORCH_INDEX_URL")
fi
"$PYTHON" -m pip download --dest "$WHEELHOUSE" --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 --implementation cp \
    --retries 1 --timeout 15 "${index_args[@]}" \
    "torch==${TORCH_VERSION}+cpu" numpy "${venv_tools[@]}"
# Front ends, from the usual index. pip does not widen a --platform of manylinux_2_28 to older
# glibc tags, and dumb-init (and some of JupyterLab's dependencies) ship only manylinux2014
# (glibc 2.17) wheels: name those platforms too (bookworm's glibc 2.36 runs all of them).
"$PYTHON" -m pip download --dest "$WHEELHOUSE" --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --implementation cp --retries 1 --timeout 15 \
    "jupyterlab==${JUPYTERLAB_VERSION}" "dumb-init==${DUMB_INIT_VERSION}"

if [[ $WITH_ARM64 == 1 ]]; then
    if [[ $ARM64_BASE == 1 ]]; then
        # The arm64 base: a foreign debootstrap needs the kernel to run aarch64 binaries (QEMU).
        [[ $(uname -m) == aarch64 ]] || "$repo/scripts/engine.sh" emulation
        "$repo/scripts/base-images.sh" debian-python-arm64
    fi
    # pip on this host judges environment markers for aarch64 (imagekit.render.wheels download): a plain
    # `pip download --platform ..._aarch64` would add torch's CUDA wheels, gated to x86_64.
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m imagekit.render.wheels download \
        --machine aarch64 --python-version 3.11 --glibc 2.36 --dest "$WHEELHOUSE" \
        "torch==${ARM64_TORCH_VERSION}" numpy -- --retries 1 --timeout 60
fi
ls -la "$WHEELHOUSE"
du -sh "$WHEELHOUSE"
