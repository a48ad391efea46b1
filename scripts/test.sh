#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine as root (README command 2; .ci/run calls it).
#
# Installs what it needs (Debian packages, a venv with imagekit and its dev tools), starts the
# Docker engine and a registry on 127.0.0.1 when they are not running, then runs: ruff, mypy
# --strict on imagekit/, the Dockerfile drift check, and pytest (every tier: fast and slow on a
# worker per CPU, then integration serially; Hypothesis's `ci` profile).
#
# `bash scripts/test.sh fast` is the inner loop: no apt, no engine, no network once .venv exists
# (its first run makes it). ruff, mypy, and the fast tier (neither `integration` nor `slow`, see
# tests/conftest.py) on a worker per CPU (8 at most), with Hypothesis's small `dev` profile.
# Further arguments go to pytest in both modes.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test] %s\n' "$*" >&2; }

if [[ ${1:-} == fast ]]; then
    shift
    # The venv as the whole suite leaves it; made here only when it is missing or lacks a dev tool.
    if ! .venv/bin/python -c 'import imagekit, pytest, xdist, hypothesis' 2>/dev/null; then
        if [[ ! -x .venv/bin/python ]] && ! python3 -m venv .venv; then
            log "cannot make .venv (no python3-venv?): run 'bash scripts/test.sh' once, it installs it"
            exit 1
        fi
        log "installing imagekit and its dev tools into .venv"
        .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
    fi
    export PATH="$PWD/.venv/bin:$PATH"
    # Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE): every
    # pytest worker and every imagekit or pip process a test starts would otherwise compile its
    # modules from source (collecting the suite took 4.7 s of CPU instead of 1.5 s). The cache is
    # kept under .venv (ignored by git), never beside the sources.
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"
    log "ruff"
    ruff check imagekit tests bench testbed scripts
    ruff format --check imagekit tests bench testbed scripts
    log "mypy --strict imagekit/"
    mypy imagekit
    log "pytest: the fast tier"
    export IMAGEKIT_HYPOTHESIS_PROFILE="${IMAGEKIT_HYPOTHESIS_PROFILE:-dev}"
    workers=$(nproc)
    exec pytest -p no:cacheprovider -m 'not integration and not slow' -n "$((workers < 8 ? workers : 8))" \
        --durations=15 "$@"
fi

# apt-get update at most once, and only when something is to be installed.
apt_updated=0
apt_install() {
    if [[ $apt_updated -eq 0 ]]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Debian's python3 lacks venv/ensurepip: install it only when a venv cannot be made.
if [[ ! -x .venv/bin/python ]]; then
    if ! python3 -m venv .venv 2>/dev/null; then
        log "installing python3-venv"
        apt_install python3-venv
        rm -rf .venv
        python3 -m venv .venv
    fi
fi
# Headless Chromium for the HTML report test (Debian's package; the test fails without it in CI).
if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium"
    apt_install chromium
fi
log "installing imagekit and its dev tools into .venv"
# The filter only hides a harmless pip warning and never fails itself: with pipefail (set above)
# pip's own exit status decides.
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }; then
    log "pip install -e '.[dev]' failed"
    exit 1
fi
# checkov, the independent Kubernetes policy scanner the k8s tests run on every manifest, in a venv
# of its own (it pins older packaging and pytest than imagekit's dev tools), cached for reruns.
checkov_venv="${XDG_CACHE_HOME:-$HOME/.cache}/imagekit/checkov-venv"
if [[ ! -x $checkov_venv/bin/checkov ]]; then
    log "installing checkov into $checkov_venv"
    rm -rf "$checkov_venv"
    python3 -m venv "$checkov_venv"
    "$checkov_venv/bin/python" -m pip install -q --disable-pip-version-check 'checkov==3.3.30'
fi
export IMAGEKIT_CHECKOV="$checkov_venv/bin/checkov"
# From / (the checkout is then not on sys.path), so a broken install cannot hide behind the sources.
repo=$PWD
(cd / && "$repo/.venv/bin/imagekit" --help >/dev/null) || { log "imagekit failed to install"; exit 1; }
export PATH="$PWD/.venv/bin:$PATH"

# The engine (dockerd --bridge=none --iptables=false) and a registry on 127.0.0.1.
bash scripts/engine.sh docker
export IMAGEKIT_TEST_REGISTRY="${IMAGEKIT_TEST_REGISTRY:-127.0.0.1:5000}"
bash scripts/engine.sh registry "${IMAGEKIT_TEST_REGISTRY##*:}"

log "ruff"
ruff check imagekit tests bench testbed scripts
ruff format --check imagekit tests bench testbed scripts
log "mypy --strict imagekit/"
mypy imagekit
log "drift check: committed Dockerfiles equal what matrix.yaml renders"
imagekit render --matrix matrix.yaml --check
# Integration tests fail (never skip) when the engine they were promised is not there.
export IMAGEKIT_REQUIRE_DOCKER=1 TESTCONTAINERS_RYUK_DISABLED=true
export IMAGEKIT_HYPOTHESIS_PROFILE="${IMAGEKIT_HYPOTHESIS_PROFILE:-ci}"
# Two runs at once, tiers chosen by mark (tests/conftest.py marks each tier's folder), so paths and
# -k given here narrow both: the fast and slow tiers on a worker per CPU (they share nothing and
# touch no engine), beside the integration tier, run serially (its tests share one engine and
# registry). Side by side because neither fills the machine alone: on 2 CPUs the fast and slow tiers
# kept 1.1 of them busy, the integration tier (waiting on the engine and the disk) 1.0 to 1.7; one
# after the other the suite took 61.6 minutes here, side by side 54.9 (BENCHMARKS.md, "Test tiers").
# The fast and slow tiers' output is printed after the integration tier's. The multiarch tier
# (tests/integration/multiarch: linux/arm64 under QEMU, ~40 minutes here, beyond CI's budget beside
# the rest) only with IMAGEKIT_MULTIARCH=1; the cuda13 tier (tests/integration/cuda13: torch 2.15's
# CUDA 13 wheels and the wheels' nvcc, ~4 GB fetched and a ~30 minute build) only with IMAGEKIT_CUDA13=1.
integration='integration'
[[ ${IMAGEKIT_MULTIARCH:-0} == 1 ]] || integration+=' and not multiarch'
[[ ${IMAGEKIT_CUDA13:-0} == 1 ]] || integration+=' and not cuda13'
# The offline demo's base and wheelhouse: the slow tier runs the probe on its torch CPU wheel and
# plans the demo (its arm64 cell too), the integration tier builds it (idempotent; without the arm64
# base, the multiarch tier's).
log "examples/offline/setup.sh (ARM64_BASE=0)"
ARM64_BASE=0 bash examples/offline/setup.sh >&2
workers=$(nproc)
log "pytest: the fast and slow tiers, in the background (their output follows the integration tier's)"
fast_slow_log=$(mktemp -t imagekit-fast-slow.XXXXXX)
pytest -p no:cacheprovider --durations=15 -m 'not integration' -n "$((workers < 8 ? workers : 8))" "$@" \
    > "$fast_slow_log" 2>&1 &
fast_slow=$!
# Interrupted: the background run goes too, and its log. `|| true`: under set -e a failed kill (the
# run already over, as it always is at a normal exit) would end the trap, and the script, with 1.
trap 'kill "$fast_slow" 2>/dev/null || true; rm -f "$fast_slow_log"' EXIT
log "pytest: the integration tier"
second=0
pytest -p no:cacheprovider --durations=25 -m "$integration" "$@" || second=$?
first=0
wait "$fast_slow" || first=$?
log "pytest: the fast and slow tiers (exit status $first)"
cat "$fast_slow_log"
# pytest's 5 is "no test collected": arguments naming tests of one run only leave the other empty,
# which fails nothing; both empty is still 5.
if [[ $first -eq 5 && $second -eq 5 ]]; then exit 5; fi
[[ $first -eq 5 ]] && first=0
[[ $second -eq 5 ]] && second=0
exit $((first != 0 ? first : second))
