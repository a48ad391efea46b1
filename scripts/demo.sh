#!/usr/bin/env bash
# demo.sh - the first command on a fresh Debian 12 machine (as root): install imagekit, start a
# Docker engine, build the offline demo matrix (real images, real torch) and print the report.
#
#   scripts/demo.sh
#
# Steps: a venv in .venv with imagekit; scripts/engine.sh install + docker (the engine of record:
# Debian 13's dockerd 26 + buildx, unpacked into /opt/imagekit-engine, containerd image store, no
# bridge network); scripts/base-images.sh debian-python (debootstrap'd Debian with Python);
# examples/offline/setup.sh (wheelhouse via pip download); imagekit build; imagekit report.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

log() { printf '[demo] %s\n' "$*" >&2; }
[[ $(id -u) -eq 0 ]] || { log "run as root (it installs the engine and starts dockerd)"; exit 1; }

if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    log "installing python3-venv"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip
fi
if [[ ! -x .venv/bin/imagekit ]]; then
    log "creating .venv and installing imagekit"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e .
fi
export PATH="$repo/.venv/bin:$PATH"

# Always (idempotent): installs what is missing by command, so debootstrap and busybox-static are
# there for base-images.sh even when an engine already runs (dockerd 26 is unpacked, not started).
scripts/engine.sh install
# Starts dockerd only when `docker info` fails.
docker info >/dev/null 2>&1 || scripts/engine.sh docker
PYTHON="$repo/.venv/bin/python" examples/offline/setup.sh

log "imagekit build --matrix examples/offline/matrix.yaml"
status=0
imagekit build --matrix examples/offline/matrix.yaml || status=$?
# No GPU here: the checks that need none run for real (torch, a CPU GEMM against a reference);
# the GPU checks say "skipped: no GPU requested". On a GPU host use --gpus all.
log "imagekit verify --matrix examples/offline/matrix.yaml --gpus none"
imagekit verify --matrix examples/offline/matrix.yaml --gpus none || status=$?
imagekit report || true
image=$(imagekit report --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["cells"][0]["tags"][0])')
log "running $image"
docker run --rm --network none "$image" python -c \
    'import torch; a = torch.randn(256, 256); print("torch", torch.__version__, "matmul ok:", bool(torch.allclose(a @ torch.eye(256), a)))'
exit "$status"
