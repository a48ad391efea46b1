#!/usr/bin/env bash
# engine.sh - bring up a local Docker engine (and optionally a local registry)
# for imagekit development/tests on a plain Debian 12 machine without systemd.
#
# Usage:
#   scripts/engine.sh docker                 # install (if needed) + start dockerd
#   scripts/engine.sh registry [PORT] [DIR]  # start docker-registry on 127.0.0.1:PORT
#   scripts/engine.sh all [PORT] [DIR]       # both
#   scripts/engine.sh install                # only install missing packages
#   scripts/engine.sh status                 # show what is running
#
# Idempotent: re-running does not start a second dockerd / registry.
#
# Hard rule: containers must stay off private networks, so dockerd always runs
# with --bridge=none --iptables=false --ip6tables=false (no docker0 bridge, no
# NAT). Builds/containers therefore only have "none" or "host" networking.
#
# Environment overrides:
#   IMAGEKIT_STORAGE_DRIVER  force a storage driver (overlay2|fuse-overlayfs|vfs)
#   IMAGEKIT_DOCKERD_LOG     dockerd log file (default /var/log/imagekit-dockerd.log)
#   IMAGEKIT_DOCKER_TIMEOUT  seconds to wait for dockerd (default 60)
#   IMAGEKIT_REGISTRY_TIMEOUT seconds to wait for the registry (default 30)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

DOCKERD_LOG="${IMAGEKIT_DOCKERD_LOG:-/var/log/imagekit-dockerd.log}"
DOCKER_TIMEOUT="${IMAGEKIT_DOCKER_TIMEOUT:-60}"
REGISTRY_TIMEOUT="${IMAGEKIT_REGISTRY_TIMEOUT:-30}"
DATA_ROOT="/var/lib/docker"
# Debian package -> what it provides. A package is installed only when that is missing, so a
# dockerd from elsewhere (docker-ce on a GitHub ubuntu runner) is used as it is, never replaced.
PACKAGES=(docker.io docker-registry busybox-static debootstrap curl procps)

log() { printf '[engine] %s\n' "$*" >&2; }
die() { printf '[engine] ERROR: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"

# Prefer Debian's client (same version as Debian's dockerd); the newer
# /usr/local/bin/docker also works (it negotiates the API version down).
docker_cli() {
    if [[ -x /usr/bin/docker ]]; then
        /usr/bin/docker "$@"
    else
        docker "$@"
    fi
}

# ---------------------------------------------------------------- install ----
# Whether the command(s) a package is installed for are already here.
package_present() {
    case "$1" in
        docker.io)       command -v dockerd >/dev/null 2>&1 ;;
        docker-registry) registry_bin >/dev/null ;;
        busybox-static)  static_busybox ;;
        debootstrap)     command -v debootstrap >/dev/null 2>&1 ;;
        curl)            command -v curl >/dev/null 2>&1 ;;
        procps)          command -v pgrep >/dev/null 2>&1 ;;
        *) dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' ;;
    esac
}

# A statically linked busybox (what scripts/base-images.sh copies into its scratch image).
static_busybox() {
    local bb=/bin/busybox
    [[ -x $bb ]] || bb=$(command -v busybox 2>/dev/null || true)
    [[ -n $bb && -x $bb ]] || return 1
    ! ldd "$bb" 2>&1 | grep -q '=>'
}

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        package_present "$p" || missing+=("$p")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "packages already installed"
        return 0
    fi
    log "installing: ${missing[*]}"
    # Never let package postinst scripts start services (dockerd with a default
    # bridge, or a registry on 0.0.0.0:5000): use a policy-rc.d that denies all.
    local created_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    local rc=0
    {
        apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    } || rc=$?
    if [[ $created_policy -eq 1 ]]; then
        rm -f /usr/sbin/policy-rc.d
    fi
    [[ $rc -eq 0 ]] || die "apt-get failed (rc=$rc)"
    # docker-registry's postinst may still have started something on some
    # systems; we never rely on it and always run our own instance.
}

# ----------------------------------------------------------------- dockerd ---
docker_up() { docker_cli info >/dev/null 2>&1; }

dockerd_pids() { pgrep -x dockerd 2>/dev/null || true; }

# Pick a storage driver that actually works here.
detect_storage_driver() {
    if [[ -n "${IMAGEKIT_STORAGE_DRIVER:-}" ]]; then
        echo "$IMAGEKIT_STORAGE_DRIVER"
        return
    fi
    mkdir -p "$DATA_ROOT"
    local t
    t=$(mktemp -d "$DATA_ROOT/.ovltest.XXXXXX")
    mkdir -p "$t"/{lower,upper,work,merged}
    echo x > "$t/lower/f"
    local ok=0
    if mount -t overlay overlay \
        -o "lowerdir=$t/lower,upperdir=$t/upper,workdir=$t/work" "$t/merged" 2>/dev/null; then
        # write through the overlay and check the whiteout/copy-up works
        if echo y > "$t/merged/f" && rm -f "$t/merged/f" && [[ ! -e "$t/merged/f" ]]; then
            ok=1
        fi
        umount "$t/merged" 2>/dev/null || umount -l "$t/merged" 2>/dev/null || true
    fi
    rm -rf "$t"
    if [[ $ok -eq 1 ]]; then
        echo overlay2
    elif command -v fuse-overlayfs >/dev/null 2>&1 && [[ -e /dev/fuse ]]; then
        echo fuse-overlayfs
    else
        echo vfs
    fi
}

wait_for_docker() {
    local timeout=$1 i
    for ((i = 0; i < timeout * 2; i++)); do
        docker_up && return 0
        # dockerd died?
        if [[ -z "$(dockerd_pids)" ]] && ((i > 2)); then
            return 1
        fi
        sleep 0.5
    done
    return 1
}

start_docker() {
    if docker_up; then
        log "dockerd already running ($(docker_cli version -f '{{.Server.Version}} API {{.Server.APIVersion}}' 2>/dev/null))"
        return 0
    fi
    if [[ -n "$(dockerd_pids)" ]]; then
        log "dockerd process exists (pid $(dockerd_pids | tr '\n' ' ')) but is not answering yet; waiting"
        wait_for_docker "$DOCKER_TIMEOUT" && { log "dockerd is up"; return 0; }
        die "a dockerd process exists but 'docker info' fails; not starting another. Log: $DOCKERD_LOG"
    fi
    command -v dockerd >/dev/null 2>&1 || die "dockerd not found (run: $0 install)"

    local driver
    driver=$(detect_storage_driver)
    local args=(
        --bridge=none
        --iptables=false
        --ip6tables=false
        --ip-forward=false
        --ip-masq=false
        --storage-driver="$driver"
        --data-root="$DATA_ROOT"
        --host=unix:///var/run/docker.sock
    )
    # Older dockerd builds may not know --ip6tables; drop it then (IPv6 NAT is
    # off anyway without --ipv6).
    if ! dockerd --help 2>&1 | grep -q -- '--ip6tables'; then
        local a=() x
        for x in "${args[@]}"; do [[ $x == --ip6tables=* ]] || a+=("$x"); done
        args=("${a[@]}")
    fi

    mkdir -p "$(dirname "$DOCKERD_LOG")"
    rm -f /var/run/docker.pid
    log "starting dockerd ${args[*]} (log: $DOCKERD_LOG)"
    printf '\n==== %s dockerd %s\n' "$(date -Is)" "${args[*]}" >> "$DOCKERD_LOG"
    setsid nohup dockerd "${args[@]}" >> "$DOCKERD_LOG" 2>&1 < /dev/null &
    disown || true

    if ! wait_for_docker "$DOCKER_TIMEOUT"; then
        log "dockerd did not come up within ${DOCKER_TIMEOUT}s; last log lines:"
        tail -n 30 "$DOCKERD_LOG" >&2 || true
        die "dockerd failed to start"
    fi
    log "dockerd is up: $(docker_cli version -f 'server {{.Server.Version}} API {{.Server.APIVersion}}' 2>/dev/null), storage driver $(docker_cli info -f '{{.Driver}}' 2>/dev/null)"
}

# ---------------------------------------------------------------- registry ---
registry_bin() {
    local b
    for b in /usr/bin/docker-registry "$(command -v docker-registry 2>/dev/null || true)" \
             "$(command -v registry 2>/dev/null || true)"; do
        [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
    done
    return 1
}

registry_up() { curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$1/v2/" 2>/dev/null; }

start_registry() {
    local port="${1:-5000}" dir="${2:-/var/lib/imagekit-registry}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "invalid port: $port"
    command -v curl >/dev/null 2>&1 || die "curl missing (run: $0 install)"
    if registry_up "$port"; then
        log "registry already answering on 127.0.0.1:$port"
        return 0
    fi
    local bin
    bin=$(registry_bin) || die "docker-registry binary not found (run: $0 install)"
    local pidfile="/run/imagekit-registry-$port.pid"
    if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        log "registry pid $(cat "$pidfile") exists but 127.0.0.1:$port does not answer yet; waiting"
    else
        mkdir -p "$dir"
        dir=$(cd "$dir" && pwd)
        local conf="/run/imagekit-registry-$port.yml"
        local rlog="/var/log/imagekit-registry-$port.log"
        cat > "$conf" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: 127.0.0.1:$port
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: false
EOF
        log "starting $bin serve $conf (storage $dir, log $rlog)"
        # Avoid any REGISTRY_* env from the caller overriding our config.
        setsid nohup env -u REGISTRY_HTTP_ADDR "$bin" serve "$conf" >> "$rlog" 2>&1 < /dev/null &
        echo $! > "$pidfile"
        disown || true
    fi
    local i
    for ((i = 0; i < REGISTRY_TIMEOUT * 4; i++)); do
        if registry_up "$port"; then
            log "registry up on http://127.0.0.1:$port (pid $(cat "$pidfile"))"
            return 0
        fi
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            tail -n 20 "/var/log/imagekit-registry-$port.log" >&2 || true
            die "registry process exited"
        fi
        sleep 0.25
    done
    tail -n 20 "/var/log/imagekit-registry-$port.log" >&2 || true
    die "registry did not answer on 127.0.0.1:$port within ${REGISTRY_TIMEOUT}s"
}

show_status() {
    if docker_up; then
        docker_cli info -f 'dockerd: {{.ServerVersion}} driver={{.Driver}} cgroup={{.CgroupDriver}}'
    else
        echo "dockerd: down"
    fi
    local f p
    for f in /run/imagekit-registry-*.pid; do
        [[ -e "$f" ]] || continue
        p=${f#/run/imagekit-registry-}; p=${p%.pid}
        if registry_up "$p"; then echo "registry: up on 127.0.0.1:$p"; else echo "registry: down on 127.0.0.1:$p"; fi
    done
}

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
}

main() {
    local cmd="${1:-all}"
    shift || true
    case "$cmd" in
        install)  install_packages ;;
        docker)   install_packages; start_docker ;;
        registry) install_packages; start_registry "$@" ;;
        all)      install_packages; start_docker; start_registry "$@" ;;
        status)   show_status ;;
        -h|--help|help) usage ;;
        *) usage; exit 2 ;;
    esac
}

main "$@"
