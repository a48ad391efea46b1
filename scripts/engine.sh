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
#   scripts/engine.sh emulation              # run linux/arm64 containers here (QEMU), then prove it
#
# Idempotent: re-running does not start a second dockerd / registry.
#
# emulation (an x86_64 host): installs Debian's qemu-user-static when missing, mounts binfmt_misc
# at /proc/sys/fs/binfmt_misc when it is not, registers qemu-aarch64 from
# /usr/lib/binfmt.d/qemu-aarch64.conf when it is not registered (the conf's F flag makes the kernel
# open the interpreter once, so it works inside every container's mount namespace), starts dockerd
# if needed, then runs a 196-byte aarch64 program in a `--platform linux/arm64 --network none`
# container (image imagekit-test/uname-m:arm64, built FROM scratch here, nothing pulled) and prints
# the machine uname(2) reports there: `aarch64`. The registration lasts until reboot (binfmt_misc
# is the kernel's, shared by every container on the host). On an aarch64 host it does nothing.
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
        qemu-user-static) [[ -f $BINFMT_CONF && -e $(binfmt_interpreter) ]] ;;
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

# install_packages [PACKAGE...]: the given ones (default: PACKAGES) that are missing.
install_packages() {
    local missing=() p wanted=("$@")
    [[ ${#wanted[@]} -gt 0 ]] || wanted=("${PACKAGES[@]}")
    for p in "${wanted[@]}"; do
        package_present "$p" || missing+=("$p")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "packages already installed (${wanted[*]})"
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
    # apt's and dpkg's progress goes to stderr: `engine.sh emulation` answers on stdout with the
    # machine an arm64 container reports, and its first run (which installs QEMU) must too.
    {
        apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    } >&2 || rc=$?
    if [[ $created_policy -eq 1 ]]; then
        rm -f /usr/sbin/policy-rc.d
    fi
    [[ $rc -eq 0 ]] || die "apt-get failed (rc=$rc)"
    # docker-registry's postinst may still have started something on some
    # systems; we never rely on it and always run our own instance.
}

# --------------------------------------------------------------- emulation ---
# Debian's qemu-user-static ships the binfmt_misc registration as a systemd-binfmt file; without
# systemd it is written to the kernel by hand. Its fields: :name:type:offset:magic:mask:interpreter:flags
BINFMT_DIR=/proc/sys/fs/binfmt_misc
BINFMT_CONF=/usr/lib/binfmt.d/qemu-aarch64.conf
BINFMT_ENTRY=$BINFMT_DIR/qemu-aarch64
ARM64_PROBE_IMAGE=imagekit-test/uname-m:arm64

binfmt_line() { grep -v '^[[:space:]]*\(#\|$\)' "$BINFMT_CONF" | head -n1; }
binfmt_interpreter() { [[ -f $BINFMT_CONF ]] && binfmt_line | cut -d: -f7; }
binfmt_mounted() { awk -v d="$BINFMT_DIR" '$2 == d && $3 == "binfmt_misc" {f = 1} END {exit !f}' /proc/mounts; }

# A static aarch64 ELF (196 bytes): uname(2), then write(1) of utsname.machine and a newline,
# exit(0). Assembled once with `llvm-mc -triple=aarch64-linux-gnu -filetype=obj` (instructions
# below); the two headers map the whole file at 0x400000. The proof needs no image from a registry
# and no package for the foreign architecture.
ARM64_UNAME_M='
7f 45 4c 46 02 01 01 00 00 00 00 00 00 00 00 00  # ELF, 64-bit, little endian, version 1
02 00 b7 00 01 00 00 00                          # ET_EXEC, EM_AARCH64
78 00 40 00 00 00 00 00                          # entry 0x400078 (after the headers)
40 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # program headers at 64, no sections
00 00 00 00 40 00 38 00 01 00 00 00 00 00 00 00  # flags, header 64, 1 program header of 56
01 00 00 00 05 00 00 00                          # PT_LOAD, read + execute
00 00 00 00 00 00 00 00                          # file offset 0
00 00 40 00 00 00 00 00 00 00 40 00 00 00 00 00  # at 0x400000
c4 00 00 00 00 00 00 00 c4 00 00 00 00 00 00 00  # 196 bytes in the file and in memory
00 10 00 00 00 00 00 00                          # page aligned
ff 43 06 d1  # sub  sp, sp, #400     room for struct utsname (6 x 65 bytes)
e0 03 00 91  # mov  x0, sp
08 14 80 d2  # mov  x8, #160         uname
01 00 00 d4  # svc  #0
e1 13 04 91  # add  x1, sp, #260     .machine, the 5th field
02 00 80 d2  # mov  x2, #0
23 68 62 38  # 1: ldrb w3, [x1, x2]
63 00 00 34  # cbz  w3, 2f
42 04 00 91  # add  x2, x2, #1
fd ff ff 17  # b    1b
43 01 80 52  # 2: mov w3, #10        the NUL becomes a newline
23 68 22 38  # strb w3, [x1, x2]
42 04 00 91  # add  x2, x2, #1
20 00 80 d2  # mov  x0, #1
08 08 80 d2  # mov  x8, #64          write(1, machine, length + 1)
01 00 00 d4  # svc  #0
00 00 80 d2  # mov  x0, #0
a8 0b 80 d2  # mov  x8, #93          exit(0)
01 00 00 d4  # svc  #0
'

write_arm64_uname_m() {
    local byte
    for byte in $(sed 's/#.*//' <<<"$ARM64_UNAME_M"); do
        printf "\\x$byte"
    done > "$1"
    chmod 0755 "$1"
}

register_emulation() {
    if ! binfmt_mounted; then
        log "mounting binfmt_misc at $BINFMT_DIR"
        mount -t binfmt_misc binfmt_misc "$BINFMT_DIR" || die "cannot mount binfmt_misc (a container without CAP_SYS_ADMIN?)"
    fi
    if [[ -e $BINFMT_ENTRY ]]; then
        if [[ $(head -n1 "$BINFMT_ENTRY") != enabled ]]; then
            log "qemu-aarch64 is registered but disabled: enabling it"
            echo 1 > "$BINFMT_ENTRY"
        fi
        log "qemu-aarch64 already registered ($(sed -n 's/^interpreter //p' "$BINFMT_ENTRY"), flags $(sed -n 's/^flags: //p' "$BINFMT_ENTRY"))"
    else
        install_packages qemu-user-static
        [[ -f $BINFMT_CONF ]] || die "$BINFMT_CONF missing after installing qemu-user-static"
        log "registering qemu-aarch64 from $BINFMT_CONF"
        binfmt_line > "$BINFMT_DIR/register" || die "the kernel refused $BINFMT_CONF"
    fi
    # Without F the kernel looks the interpreter up in each container's own file system, where it
    # is not: arm64 containers would fail with "exec format error" or "no such file".
    grep -q '^flags: .*F' "$BINFMT_ENTRY" ||
        log "WARNING: qemu-aarch64 lacks the F flag; containers may not find the interpreter (echo -1 > $BINFMT_ENTRY and rerun)"
}

# Build the probe image (FROM scratch, --platform linux/arm64: Debian's engine 20.10 ignores
# `docker import --platform`, the classic builder does not) and run it with no network.
prove_emulation() {
    local work machine arch
    work=$(mktemp -d /var/tmp/imagekit-uname-m.XXXXXX)
    mkdir "$work/rootfs"
    write_arm64_uname_m "$work/rootfs/uname-m"
    tar -C "$work/rootfs" --numeric-owner --owner=0 --group=0 -cf "$work/rootfs.tar" .
    printf 'FROM scratch\nADD rootfs.tar /\nLABEL imagekit.test=true\nCMD ["/uname-m"]\n' > "$work/Dockerfile"
    rm -rf "$work/rootfs"
    DOCKER_BUILDKIT=0 docker_cli build -q --platform linux/arm64 -t "$ARM64_PROBE_IMAGE" "$work" >/dev/null ||
        { rm -rf "$work"; die "cannot build $ARM64_PROBE_IMAGE"; }
    arch=$(docker_cli image inspect -f '{{.Os}}/{{.Architecture}}' "$ARM64_PROBE_IMAGE")
    [[ $arch == linux/arm64 ]] || { rm -rf "$work"; die "$ARM64_PROBE_IMAGE reads $arch, not linux/arm64"; }
    # stdout alone is the answer: the engine's warnings go to stderr
    if ! machine=$(docker_cli run --rm --platform linux/arm64 --network none "$ARM64_PROBE_IMAGE" 2>"$work/stderr"); then
        log "an arm64 container does not run: $(tail -n 3 "$work/stderr")"
        rm -rf "$work"
        die "linux/arm64 emulation does not work (is $(binfmt_interpreter) registered with the F flag?)"
    fi
    rm -rf "$work"
    [[ $machine == aarch64 ]] || die "an arm64 container reports machine '$machine', not aarch64"
    log "a linux/arm64 container ran under QEMU and reports:"
    echo "$machine"
}

setup_emulation() {
    local host
    host=$(uname -m)
    if [[ $host == aarch64 ]]; then
        log "host is aarch64: linux/arm64 images run natively, nothing to register"
        return 0
    fi
    register_emulation
    start_docker
    prove_emulation
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
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
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
        emulation) setup_emulation ;;
        -h|--help|help) usage ;;
        *) usage; exit 2 ;;
    esac
}

main "$@"
