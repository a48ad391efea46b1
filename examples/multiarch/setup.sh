#!/usr/bin/env bash
# setup.sh - the multi-arch example: one cell built for linux/amd64 and linux/arm64 alike.
#
# The torch build a mixed x86 H100 + GH200/GB200 fleet runs: PyPI's torch 2.11.0, which is the CUDA
# 13.0 build on x86_64 and on aarch64 (cuda-toolkit 13.0.2, nvidia-cudnn-cu13, nvidia-nccl-cu13,
# triton: shared/FACTS.md), with NumPy, for the local Debian bookworm base's Python 3.11 and glibc
# 2.36 (scripts/base-images.sh: imagekit-local/debian-python:bookworm-amd64 and -arm64, the arm64
# one debootstrapped under QEMU on an x86 host).
#
# Each machine's wheels are downloaded once into a cache that reruns reuse without asking the
# index again (${IMAGEKIT_CACHE_DIR:-~/.cache/imagekit}/multiarch-wheels/<machine>), by
# `python -m imagekit.render.wheels download`, which judges environment markers for the target machine
# (pip's own --platform does not); ./wheelhouse holds hard links to both machines' cached files
# (copies where the cache is on another file system), and each cell's closure is resolved for its
# own machine. About 3 GB per machine. On a host that is not arm64, registers QEMU emulation
# (scripts/engine.sh emulation). Needs root (base images).
#
# Environment overrides:
#   PLATFORMS      the platforms to prepare (default "linux/amd64 linux/arm64"; a native runner
#                  of one platform names only its own)
#   TORCH_VERSION  default 2.11.0
#   PYTHON         the host's Python that runs pip (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
PYTHON_VERSION=3.11  # bookworm's python3
GLIBC=2.36           # bookworm's glibc
# The pip and setuptools every imagekit venv is upgraded to right after it is made
# (imagekit/data/advisories.yaml's venv_tools): a wheelhouse without them cannot build the image.
venv_tools_text=$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
    'from imagekit.facts.advisories import load_advisories; print(*load_advisories().venv_requirements())')
read -r -a venv_tools <<< "$venv_tools_text"
requirements=("torch==${TORCH_VERSION}" numpy "${venv_tools[@]}")
cache_root=${IMAGEKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/imagekit}/multiarch-wheels
log() { printf '[multiarch] %s\n' "$*" >&2; }

host_machine=$(uname -m)
machines=()
for platform in $PLATFORMS; do
    case "$platform" in
        linux/amd64) arch=amd64 machine=x86_64 ;;
        linux/arm64) arch=arm64 machine=aarch64 ;;
        *) log "unknown platform $platform (linux/amd64 or linux/arm64)"; exit 2 ;;
    esac
    if [[ $machine != "$host_machine" && $host_machine != aarch64 ]]; then
        "$repo/scripts/engine.sh" emulation  # idempotent: once registered, a proof only
    fi
    t0=$SECONDS
    "$repo/scripts/base-images.sh" "debian-python-$arch"
    log "base for $platform ready in $((SECONDS - t0))s"
    machines+=("$machine")
done

for machine in "${machines[@]}"; do
    cache="$cache_root/$machine"
    stamp="$cache/complete"
    want="python $PYTHON_VERSION glibc $GLIBC ${requirements[*]}"
    mkdir -p "$cache"
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
        log "$machine wheels cached in $cache"
        continue
    fi
    log "downloading ${requirements[*]} for $machine into $cache"
    t0=$SECONDS
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m imagekit.render.wheels download \
        --machine "$machine" --python-version "$PYTHON_VERSION" --glibc "$GLIBC" --dest "$cache" \
        "${requirements[@]}" -- --retries 2 --timeout 60
    printf '%s' "$want" > "$stamp"
    log "$machine: $(du -sh "$cache" | cut -f1) in $((SECONDS - t0))s"
done

rm -rf "$here/wheelhouse"
mkdir -p "$here/wheelhouse"
for machine in "${machines[@]}"; do
    for wheel in "$cache_root/$machine"/*.whl; do
        # a pure-Python wheel both machines use is one file
        [[ -e $here/wheelhouse/${wheel##*/} ]] && continue
        ln "$wheel" "$here/wheelhouse/" 2>/dev/null || cp "$wheel" "$here/wheelhouse/"
    done
done
du -sh "$here/wheelhouse" >&2
