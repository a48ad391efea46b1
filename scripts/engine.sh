#!/usr/bin/env bash
# engine.sh - bring up the Docker engine of record (and a local registry) for imagekit's demo, tests
# and CI on a plain Debian 12 machine without systemd.
#
# Usage:
#   scripts/engine.sh docker                 # install (if needed) + start the engine of record
#   scripts/engine.sh registry [PORT] [DIR]  # start docker-registry on 127.0.0.1:PORT
#   scripts/engine.sh all [PORT] [DIR]       # both
#   scripts/engine.sh install                # only install what is missing
#   scripts/engine.sh install-engine         # only unpack the engine into its prefix (no links, no apt)
#   scripts/engine.sh status                 # show what is running
#   scripts/engine.sh emulation              # run linux/arm64 containers here (QEMU), then prove it
#   scripts/engine.sh second NAME            # a second engine of its own + Docker context imagekit-NAME
#   scripts/engine.sh stop-second NAME       # stop it and remove everything it wrote
#
# The engine of record is the newest Debian packages (IMAGEKIT_ENGINE_SUITE, default "sid trixie":
# the first suite whose engine runs here): sid's dockerd 28.5, containerd 2.1 and buildx 0.29 on
# 2026-12-07, or trixie's dockerd 26.1.5, containerd 1.7 and buildx 0.13.1 where sid's binaries need a
# newer glibc than the host's. sid moves: the versions got are printed and kept in the prefix's
# .complete. The containerd image store is on (what BuildKit's zstd layers, rewritten timestamps,
# OCI output and registry cache need). Debian 12 has no such packages, so their .debs are fetched
# with a private apt state (the host's apt configuration is not touched), cached per suite in
# /var/cache/imagekit-engine for reruns, and unpacked beside /opt/imagekit-engine, then moved into
# place whole. docker-init (what `docker run --init` runs as the container's pid 1) is the suite's
# static tini: sid's own package tini-static (split out of tini in 0.19.0-5), trixie's tini's
# /usr/bin/tini-static. Before anything is moved into place every binary is run once (--version,
# bounded): dockerd, containerd, its runc shim, the CLI, buildx and docker-init must run, or that
# suite is not used; any other that does not is left out: runc and the dynamic tini need glibc 2.38
# (Debian 12 has 2.36; Debian 12's runc 1.1.5 serves). When no suite's engine runs here, one line
# says why for each, exit 3, and nothing is installed. A cached .deb whose SHA256 is not the
# archive's is downloaded again. The buildx
# plugin is linked into /usr/local/lib/docker/cli-plugins, where every docker CLI looks; the CLI
# into /usr/local/bin when there is none. An installed engine that is running is never replaced.
# An engine already answering on /var/run/docker.sock is used as it is (a user's docker-ce, say).
# An engine started here has CDI on (daemon.json "features": {"cdi": true}, which Docker 25-27 need;
# spec dirs /etc/cdi and /var/run/cdi, CDI's defaults, also for `second`): what `docker run
# --device nvidia.com/gpu=all` and `imagekit verify --gpus cdi:nvidia.com/gpu=all` use on a host
# whose GPUs are set up the CDI way (`nvidia-ctk cdi generate`, the GPU operator since 25.10).
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
#   IMAGEKIT_DOCKERD_LOG     dockerd log file (default /var/log/imagekit-dockerd.log)
#   IMAGEKIT_DOCKER_TIMEOUT  seconds to wait for dockerd (default 60)
#   IMAGEKIT_REGISTRY_TIMEOUT seconds to wait for the registry (default 30)
#   IMAGEKIT_IMAGE_STORE     containerd (default) | overlay2: the image store of an engine started here
#   IMAGEKIT_BUILD_CACHE_KEEP BuildKit cache an engine started here keeps after its garbage
#                            collection (default 8GB; MB or GB)
#   IMAGEKIT_ENGINE_SUITE    the Debian releases whose engine is tried, newest first (default
#                            "sid trixie": the first whose dockerd, containerd, CLI and buildx run on
#                            this libc is installed; "trixie" alone gives dockerd 26.1.5)
#   IMAGEKIT_ENGINE_PREFIX   where the engine is unpacked (default /opt/imagekit-engine). Another
#                            prefix holds another engine beside it, e.g. trixie's 26.1.5 as a
#                            second engine: IMAGEKIT_ENGINE_SUITE=trixie
#                            IMAGEKIT_ENGINE_PREFIX=/opt/imagekit-engine-trixie engine.sh second
#                            trixie (`second` links buildx and the CLI only where none is linked)
#   IMAGEKIT_ENGINE_CACHE    its apt lists and .debs, per suite (default /var/cache/imagekit-engine)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

DOCKERD_LOG="${IMAGEKIT_DOCKERD_LOG:-/var/log/imagekit-dockerd.log}"
DOCKER_TIMEOUT="${IMAGEKIT_DOCKER_TIMEOUT:-60}"
REGISTRY_TIMEOUT="${IMAGEKIT_REGISTRY_TIMEOUT:-30}"
# Debian 12 package -> what it provides. A package is installed only when that is missing.
# runc: Debian 12's (sid's and trixie's need glibc 2.38); the engine itself comes from ENGINE_SUITES.
PACKAGES=(runc docker-registry busybox-static debootstrap curl procps)

# The engine of record, unpacked from the newest Debian packages that run here (see the header).
# The suites tried, newest first: the first whose engine runs on this libc is installed.
read -r -a ENGINE_SUITES <<<"${IMAGEKIT_ENGINE_SUITE:-sid trixie}"
ENGINE_MIRROR="${IMAGEKIT_ENGINE_MIRROR:-http://deb.debian.org/debian}"
# A|B: A where the suite has it, else B (sid ships the static tini as its own package tini-static;
# trixie's is inside tini).
ENGINE_PACKAGES=(docker.io docker-cli docker-buildx containerd "tini-static|tini")
# The binaries an engine needs (prefix-relative): a suite where one of them does not run is not used.
# containerd-shim-runc-v2 starts every container; docker-init is what `docker run --init` runs.
ENGINE_BINARIES=(usr/sbin/dockerd usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/docker
                 usr/libexec/docker/cli-plugins/docker-buildx usr/bin/tini-static)
# How long one binary may take to answer --version: they answer in well under a second; one that
# hangs (a damaged binary spinning, a daemon that ignores the flag) is killed and counts as not running.
BINARY_CHECK_TIMEOUT=10
# engine.sh's exit codes beside 1 (any other failure) and 2 (usage): no suite's engine runs here (as
# imagekit's ExitCode.ENVIRONMENT: what is missing is outside imagekit).
EXIT_NO_ENGINE=3
ENGINE_PREFIX="${IMAGEKIT_ENGINE_PREFIX:-/opt/imagekit-engine}"
ENGINE_CACHE="${IMAGEKIT_ENGINE_CACHE:-/var/cache/imagekit-engine}"
IMAGE_STORE="${IMAGEKIT_IMAGE_STORE:-containerd}"
BUILD_CACHE_KEEP="${IMAGEKIT_BUILD_CACHE_KEEP:-8GB}"
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins
# Where an engine started here reads CDI specs (CDI's own defaults: the GPU operator and
# `nvidia-ctk cdi generate` write /etc/cdi or /var/run/cdi).
CDI_SPEC_DIRS_JSON='"/etc/cdi", "/var/run/cdi"'

log() { printf '[engine] %s\n' "$*" >&2; }
die() { printf '[engine] ERROR: %s\n' "$*" >&2; exit 1; }
# die_code CODE MESSAGE: die with another exit code than 1 (one of the EXIT_* above).
die_code() { printf '[engine] ERROR: %s\n' "$2" >&2; exit "$1"; }

# ---------------------------------------------------------------- install ----
# Whether the command(s) a package is installed for are already here.
package_present() {
    case "$1" in
        runc)            [[ -x /usr/sbin/runc ]] || command -v runc >/dev/null 2>&1 ;;
        docker-registry) registry_bin >/dev/null ;;
        busybox-static)  static_busybox ;;
        debootstrap)     command -v debootstrap >/dev/null 2>&1 ;;
        curl)            command -v curl >/dev/null 2>&1 ;;
        procps)          command -v pgrep >/dev/null 2>&1 ;;
        qemu-user-static) [[ -f $BINFMT_CONF && -e $(binfmt_interpreter) ]] ;;
        *) [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == 'install ok installed' ]] ;;
    esac
}

# A statically linked busybox (what scripts/base-images.sh copies into its scratch image).
static_busybox() {
    local bb=/bin/busybox
    [[ -x $bb ]] || bb=$(command -v busybox 2>/dev/null || true)
    [[ -n $bb && -x $bb ]] || return 1
    [[ $(ldd "$bb" 2>&1) != *'=>'* ]]
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

binfmt_line() { awk '!/^[[:space:]]*(#|$)/ {print; exit}' "$BINFMT_CONF"; }
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
# docker_cli [ARGS]: the engine of record's CLI (or the one on PATH, for an engine found running).
docker_cli() {
    if [[ -x $ENGINE_PREFIX/usr/bin/docker ]]; then
        "$ENGINE_PREFIX/usr/bin/docker" "$@"
    else
        docker "$@"
    fi
}

docker_up() { docker_cli info >/dev/null 2>&1; }

# needs_newer_glibc BIN: whether ldd finds a versioned symbol BIN needs missing from this libc.
needs_newer_glibc() { [[ $(ldd "$1" 2>&1) == *"version"*"not found"* ]]; }

glibc_version() { local v; v=$(ldd --version 2>&1) || true; awk 'NR == 1 {print $NF}' <<<"$v"; }

# elf_machine FILE: its ELF e_machine, as od prints it (this host's byte order, as for every file).
elf_machine() { local m; m=$(od -An -tx2 -j18 -N2 "$1") || return 1; echo "${m//[[:space:]]/}"; }

# binary_problem BIN: nothing when BIN runs here (it answers --version, buildx `version`, the
# containerd shims -v, within BINARY_CHECK_TIMEOUT), else what is wrong with it, in a few words.
# The ELF header is read first: a binary of another architecture could run under a registered QEMU
# (`engine.sh emulation`) and pass the run, yet dockerd must be this host's.
binary_problem() {
    local bin=$1 magic machine host out rc=0 arg=--version
    [[ -e $bin ]] || { echo "missing"; return 0; }
    [[ -f $bin && -x $bin ]] || { echo "not an executable file"; return 0; }
    magic=$(od -An -tx1 -N4 "$bin") || magic=""
    machine=$(elf_machine "$bin") || machine=""  # empty where the file ends before it
    [[ ${magic//[[:space:]]/} == 7f454c46 && -n $machine ]] ||
        { echo "not an ELF program (truncated or damaged)"; return 0; }
    host=$(elf_machine "$BASH") || host=""
    [[ $machine == "$host" ]] ||
        { echo "built for another machine (ELF machine 0x$machine, this host's is 0x$host)"; return 0; }
    case ${bin##*/} in
        docker-buildx) arg=version ;;
        containerd-shim*) arg=-v ;;  # its flags are Go's single-dash ones: --version is refused
    esac
    out=$(timeout -k 2 "$BINARY_CHECK_TIMEOUT" "$bin" "$arg" 2>&1 </dev/null) || rc=$?
    ((rc == 0)) && return 0
    if needs_newer_glibc "$bin"; then
        echo "needs a newer glibc than this system's ($(glibc_version))"
    elif ((rc == 124 || rc == 137)); then
        echo "did not answer $arg within ${BINARY_CHECK_TIMEOUT}s"
    elif ((rc > 128)); then
        echo "died of signal $((rc - 128)) on $arg (truncated or damaged)"
    else
        out=$(awk 'NF {print; exit}' <<<"$out")  # the first line that says something
        echo "exit $rc on $arg${out:+: ${out:0:200}}"
    fi
}

# engine_problem PREFIX: nothing when every binary of ENGINE_BINARIES runs here, else the first that
# does not and why. sid's builds move to a newer glibc from time to time; then the next suite is used.
engine_problem() {
    local rel why
    for rel in "${ENGINE_BINARIES[@]}"; do
        why=$(binary_problem "$1/$rel")
        [[ -z $why ]] || { echo "${rel##*/} $why"; return 0; }
    done
}

# engine_running_from PREFIX: whether a dockerd or containerd started here runs a binary of PREFIX.
engine_running_from() {
    local f pid exe
    for f in /run/imagekit-engine*/dockerd.pid /run/imagekit-engine*/containerd.pid; do
        [[ -f $f ]] || continue
        pid=$(<"$f")
        [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || continue
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
        [[ $exe == "$1"/* ]] && return 0
    done
    return 1
}

# engine_versions PREFIX: what was installed, one line (dockerd, containerd, buildx).
engine_versions() {
    local d c b
    d=$("$1/usr/sbin/dockerd" --version 2>/dev/null) || d="dockerd ?"
    c=$("$1/usr/bin/containerd" --version 2>/dev/null) || c="containerd ?"
    b=$("$1/usr/libexec/docker/cli-plugins/docker-buildx" version 2>/dev/null) || b="buildx ?"
    # "Docker version 28.5.2+dfsg1, build ..." -> 28.5.2+dfsg1; containerd and buildx likewise
    printf 'dockerd %s, containerd %s, buildx %s\n' "$(awk '{print $3}' <<<"$d" | tr -d ,)" \
        "$(awk '{print $3}' <<<"$c")" "$(awk '{print $2}' <<<"$b")"
}

# suite_failed REASON: why the suite being tried is not used (logged, and kept for the last line).
suite_failed() { SUITE_PROBLEM=$1; log "$1"; }

# deb_matches DEB SHA256: whether DEB is the archive's file (the SHA256 its signed index gives).
deb_matches() { local sum; [[ -n $2 ]] && sum=$(sha256sum <"$1") && [[ $sum == "$2  -" ]]; }

# unpack_suite SUITE DEST: SUITE's engine packages unpacked into DEST, with a private apt state
# (lists and .debs cached per suite in ENGINE_CACHE for reruns; the host's apt is not touched).
unpack_suite() {
    local suite=$1 dest=$2 apt=$ENGINE_CACHE/$1
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$dest"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $ENGINE_MIRROR $suite main" \
        > "$apt/sources.list"
    : > "$apt/status"  # an empty dpkg status: nothing resolves against the host's packages
    local opts=(
        -o "Dir::Etc::sourcelist=$apt/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status"
        -o "Dir::Cache=$apt/cache" -o "Dir::Cache::archives=$apt/cache/archives"
        -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1"
        -o "APT::Sandbox::User=root"  # the cache is root's: no "_apt couldn't access" warning
    )
    log "resolving $suite's ${ENGINE_PACKAGES[*]} (private apt lists in $apt)"
    apt-get "${opts[@]}" update -qq >&2 || { suite_failed "apt-get update of $suite failed"; return 1; }
    local want candidate pkg version arch sha deb policy show
    for want in "${ENGINE_PACKAGES[@]}"; do
        # Each answer is read whole before it is parsed: a reader that stops early (awk's exit,
        # head, grep -q) kills the writer with SIGPIPE, and under pipefail the step then fails
        # at random (141). tests/unit/test_shell_scripts.py refuses such pipelines everywhere.
        pkg=""
        for candidate in ${want//|/ }; do
            policy=$(apt-cache "${opts[@]}" policy "$candidate") ||
                { suite_failed "apt-cache policy $candidate failed"; return 1; }
            version=$(awk '/Candidate:/ {v = $2} END {print v}' <<<"$policy")
            if [[ -n $version && $version != "(none)" ]]; then pkg=$candidate; break; fi
        done
        [[ -n $pkg ]] || { suite_failed "$suite has no ${want//|/ or }"; return 1; }
        show=$(apt-cache "${opts[@]}" show "$pkg=$version") ||
            { suite_failed "apt-cache show $pkg=$version failed"; return 1; }
        arch=$(awk '/^Architecture:/ && a == "" {a = $2} END {print a}' <<<"$show")
        sha=$(awk '/^SHA256:/ && s == "" {s = $2} END {print s}' <<<"$show")
        deb="$apt/debs/${pkg}_${version//:/%3a}_${arch}.deb"
        # A cached .deb is checked as apt checks a download: a truncated or damaged one (a disk
        # filled up, an interrupted copy) would otherwise be unpacked on every rerun.
        if [[ -s $deb ]] && ! deb_matches "$deb" "$sha"; then
            log "cached $deb is not the archive's (SHA256 differs): downloading it again"
            rm -f "$deb"
        fi
        if [[ ! -s $deb ]]; then
            log "downloading $suite's $pkg $version"
            (cd "$apt/debs" && apt-get "${opts[@]}" download -qq "$pkg=$version" >&2) ||
                { suite_failed "cannot download $pkg $version"; return 1; }
        fi
        [[ -s $deb ]] || { suite_failed "expected $deb after the download"; return 1; }
        deb_matches "$deb" "$sha" || { suite_failed "$deb is not the archive's (SHA256 differs)"; return 1; }
        dpkg-deb -x "$deb" "$dest" || { suite_failed "cannot unpack $deb"; return 1; }
    done
}

# install_engine: the newest suite in ENGINE_SUITES whose engine runs here, into ENGINE_PREFIX.
# Unpacked beside it first and moved into place whole: an interrupted install leaves no half engine.
install_engine() {
    local wanted="suites=${ENGINE_SUITES[*]} packages=${ENGINE_PACKAGES[*]}"
    if [[ -f $ENGINE_PREFIX/.complete ]] && [[ $(head -n1 "$ENGINE_PREFIX/.complete") == "$wanted" ]]; then
        return 0
    fi
    if engine_running_from "$ENGINE_PREFIX"; then
        log "an engine from $ENGINE_PREFIX is running ($(engine_versions "$ENGINE_PREFIX")); not replacing it under it: stop it to install ${ENGINE_SUITES[*]}'s"
        return 0
    fi
    local suite staging="$ENGINE_PREFIX.new" got="" why=()
    for suite in "${ENGINE_SUITES[@]}"; do
        rm -rf "$staging"
        SUITE_PROBLEM=""
        if unpack_suite "$suite" "$staging"; then
            SUITE_PROBLEM=$(engine_problem "$staging")
            [[ -z $SUITE_PROBLEM ]] && { got=$suite; break; }
            SUITE_PROBLEM="$suite's $SUITE_PROBLEM"
            log "$SUITE_PROBLEM"
        fi
        why+=("${SUITE_PROBLEM:-$suite: its packages could not be unpacked}")
        log "not using $suite's engine; trying the next suite"
    done
    if [[ -z $got ]]; then
        rm -rf "$staging"
        local reasons
        printf -v reasons '%s; ' "${why[@]}"
        die_code "$EXIT_NO_ENGINE" "no engine of ${ENGINE_SUITES[*]} installs and runs here (${reasons%; }); nothing was installed into $ENGINE_PREFIX: set IMAGEKIT_ENGINE_SUITE to a suite whose engine runs here"
    fi
    promote_engine "$got" "$staging" "$wanted"
}

# promote_engine SUITE STAGING WANTED: STAGING (SUITE's engine, its ENGINE_BINARIES running) into
# ENGINE_PREFIX, whole, with .complete saying WANTED and what was got. Every other binary that
# does not run here is dropped first (sid's and trixie's runc and dynamic tini need glibc 2.38),
# so nothing first on the engine's PATH shadows a working host binary with a broken one.
promote_engine() {
    local got=$1 staging=$2 wanted=$3 bin why
    for bin in "$staging"/usr/bin/* "$staging"/usr/sbin/*; do
        [[ -f $bin && ! -L $bin ]] || continue
        why=$(binary_problem "$bin")
        if [[ -n $why ]]; then
            log "not using $got's ${bin##*/}: $why"
            rm -f "$bin"
        fi
    done
    # what dockerd looks for on its PATH for `docker run --init` (docker.io links it itself)
    ln -sfn tini-static "$staging/usr/bin/docker-init"
    find "$staging/usr/bin" "$staging/usr/sbin" -xtype l -delete
    printf '%s\nsuite=%s %s\n' "$wanted" "$got" "$(engine_versions "$staging")" > "$staging/.complete"
    # the old engine aside, the new one in, the old one gone: never a moment with a half prefix
    rm -rf "$ENGINE_PREFIX.old"
    if [[ -e $ENGINE_PREFIX ]]; then mv "$ENGINE_PREFIX" "$ENGINE_PREFIX.old"; fi
    mv "$staging" "$ENGINE_PREFIX"
    rm -rf "$ENGINE_PREFIX.old"
    log "installed $got's engine into $ENGINE_PREFIX: $(engine_versions "$ENGINE_PREFIX")"
}

# link_clients [if-missing]: buildx where every docker CLI finds it, and the CLI on PATH when none
# is. if-missing (a second engine): buildx only where no working one is linked, so a second engine
# of another prefix (trixie's, a test's) leaves every docker CLI's buildx as it was.
link_clients() {
    mkdir -p "$PLUGIN_DIR"
    if [[ ${1:-} == if-missing && -x $PLUGIN_DIR/docker-buildx ]]; then
        log "buildx stays $(readlink -f "$PLUGIN_DIR/docker-buildx")"
        return 0
    fi
    ln -sfn "$ENGINE_PREFIX/usr/libexec/docker/cli-plugins/docker-buildx" "$PLUGIN_DIR/docker-buildx"
    if ! command -v docker >/dev/null 2>&1; then
        ln -sfn "$ENGINE_PREFIX/usr/bin/docker" /usr/local/bin/docker
    fi
}

# instance NAME: the paths of one engine. "" is the engine of record (on /var/run/docker.sock);
# any other name is a second engine beside it (its own socket, data, containerd and namespace).
instance() {
    local name=$1 suffix=${1:+-$1}
    RUN_DIR=/run/imagekit-engine$suffix
    DATA_DIR=/var/lib/imagekit-engine$suffix
    CONF_DIR=/etc/imagekit-engine$suffix
    NAMESPACE=imagekit${name:+-$name}
    if [[ -z $name ]]; then SOCKET=/var/run/docker.sock; else SOCKET=$RUN_DIR/docker.sock; fi
    ENGINE_LOG=${DOCKERD_LOG%.log}$suffix.log
}

# note_cdi_off SOCKET: an engine started before this script turned CDI on keeps it off until it
# restarts; it is not restarted here (others may be using it), only named.
note_cdi_off() {
    if [[ $(docker_cli -H "unix://$1" info -f '{{len .CDISpecDirs}}' 2>/dev/null || echo 0) == 0 ]]; then
        log "CDI is off on the engine at $1 (verify --gpus cdi:... needs it): stop that engine, then rerun this script"
    fi
}

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for_socket() {
    local socket=$1 i
    for ((i = 0; i < DOCKER_TIMEOUT * 2; i++)); do
        docker_cli -H "unix://$socket" version >/dev/null 2>&1 && return 0
        pid_alive "$RUN_DIR/dockerd.pid" || ((i < 4)) || return 1
        sleep 0.5
    done
    return 1
}

# start_engine NAME [STORE]: containerd, then dockerd, of instance NAME (see instance()).
start_engine() {
    instance "$1"
    local store=${2:-$IMAGE_STORE} snapshotter
    case $store in
        containerd) snapshotter=true ;;
        overlay2) snapshotter=false ;;
        *) die "IMAGEKIT_IMAGE_STORE: $store is neither containerd nor overlay2" ;;
    esac
    [[ $BUILD_CACHE_KEEP =~ ^[0-9]+(MB|GB)$ ]] ||
        die "IMAGEKIT_BUILD_CACHE_KEEP: '$BUILD_CACHE_KEEP' is not a size such as 8GB"
    if docker_cli -H "unix://$SOCKET" version >/dev/null 2>&1; then
        log "dockerd already answers on $SOCKET ($(docker_cli -H "unix://$SOCKET" info -f 'server {{.ServerVersion}}, store {{.Driver}}'))"
        note_cdi_off "$SOCKET"
        return 0
    fi
    pid_alive "$RUN_DIR/dockerd.pid" &&
        die "dockerd pid $(cat "$RUN_DIR/dockerd.pid") does not answer on $SOCKET; not starting another. Log: $ENGINE_LOG"
    mkdir -p "$RUN_DIR" "$DATA_DIR" "$CONF_DIR" "$(dirname "$ENGINE_LOG")"
    # Its own containerd, never a system one at /run/containerd/containerd.sock (which dockerd
    # would otherwise share, namespace and all). Version 2 of the config is read by containerd 1.7
    # and 2.x alike. NRI is off (2.x listens on /var/run/nri/nri.sock by default, one socket for
    # every containerd on the host), and the opt plugin's path is this instance's own.
    printf '%s\n' 'version = 2' "root = \"$DATA_DIR/containerd\"" "state = \"$RUN_DIR/containerd\"" \
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.nri.v1.nri"]' \
        '[grpc]' "  address = \"$RUN_DIR/containerd.sock\"" \
        '[plugins."io.containerd.internal.v1.opt"]' "  path = \"$DATA_DIR/containerd-opt\"" \
        '[ttrpc]' '  address = ""' '[debug]' '  address = ""' '[metrics]' '  address = ""' \
        > "$CONF_DIR/containerd.toml"
    # --config-file: otherwise dockerd reads the host's /etc/docker/daemon.json. The build cache
    # is collected down to BUILD_CACHE_KEEP after builds: dockerd's own default keeps a share of the
    # disk, and one CUDA-wheel cell left 20 GB of BuildKit cache here. CDI (`--device
    # nvidia.com/gpu=all`, imagekit's `verify --gpus cdi:...`) is behind a feature flag on 25-27;
    # its spec directories are CDI's defaults, named so that `docker info` and a reader see them.
    printf '{"features": {"containerd-snapshotter": %s, "cdi": true}, "cdi-spec-dirs": [%s], "builder": {"gc": {"enabled": true, "defaultKeepStorage": "%s"}}}\n' \
        "$snapshotter" "$CDI_SPEC_DIRS_JSON" "$BUILD_CACHE_KEEP" > "$CONF_DIR/daemon.json"
    local path="$ENGINE_PREFIX/usr/bin:$ENGINE_PREFIX/usr/sbin:$PATH" i
    if ! pid_alive "$RUN_DIR/containerd.pid"; then
        rm -f "$RUN_DIR/containerd.sock"
        printf '\n==== %s containerd --config %s\n' "$(date -Is)" "$CONF_DIR/containerd.toml" >> "$ENGINE_LOG"
        PATH=$path setsid nohup containerd --config "$CONF_DIR/containerd.toml" >> "$ENGINE_LOG" 2>&1 < /dev/null &
        echo $! > "$RUN_DIR/containerd.pid"
        disown || true
        for ((i = 0; i < DOCKER_TIMEOUT * 2; i++)); do [[ -S $RUN_DIR/containerd.sock ]] && break; sleep 0.5; done
        [[ -S $RUN_DIR/containerd.sock ]] || { tail -n 20 "$ENGINE_LOG" >&2; die "containerd did not start"; }
    fi
    local args=(
        --config-file "$CONF_DIR/daemon.json"
        --host "unix://$SOCKET"
        --data-root "$DATA_DIR/docker"
        --exec-root "$RUN_DIR/docker"
        --pidfile "$RUN_DIR/dockerd.pid"
        --containerd "$RUN_DIR/containerd.sock"
        --containerd-namespace "$NAMESPACE"
        --containerd-plugins-namespace "$NAMESPACE-plugins"
        --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false
        --userland-proxy=false
    )
    log "starting dockerd ${args[*]} (log: $ENGINE_LOG)"
    printf '\n==== %s dockerd %s\n' "$(date -Is)" "${args[*]}" >> "$ENGINE_LOG"
    PATH=$path setsid nohup dockerd "${args[@]}" >> "$ENGINE_LOG" 2>&1 < /dev/null &
    disown || true
    if ! wait_for_socket "$SOCKET"; then
        tail -n 30 "$ENGINE_LOG" >&2 || true
        die "dockerd did not answer on $SOCKET within ${DOCKER_TIMEOUT}s"
    fi
    log "dockerd is up on $SOCKET: $(docker_cli -H "unix://$SOCKET" info -f 'server {{.ServerVersion}}, store {{.Driver}}'), $(docker_cli buildx version 2>/dev/null || echo 'no buildx')"
}

# stop_engine NAME [purge]: SIGTERM dockerd, then containerd; purge removes its data too.
stop_engine() {
    instance "$1"
    local f pid i
    for f in "$RUN_DIR/dockerd.pid" "$RUN_DIR/containerd.pid"; do
        if pid_alive "$f"; then
            pid=$(cat "$f")
            kill "$pid"
            for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
        fi
        rm -f "$f"
    done
    if [[ ${2:-} == purge ]]; then
        # a mount a killed engine left would keep its files busy
        awk -v d="$DATA_DIR/" -v r="$RUN_DIR/" 'index($2, d) == 1 || index($2, r) == 1 {print $2}' /proc/mounts \
            | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
        rm -rf "$DATA_DIR" "$RUN_DIR" "$CONF_DIR"
    fi
}

start_docker() {
    if docker_up; then
        log "dockerd already running ($(docker_cli info -f 'server {{.ServerVersion}}, store {{.Driver}}' 2>/dev/null))"
        note_cdi_off /var/run/docker.sock
        return 0
    fi
    install_engine
    link_clients
    start_engine ""
}

valid_name() { [[ $1 =~ ^[a-z0-9]{1,20}$ ]] || die "NAME must be 1-20 of [a-z0-9], not '$1'"; }

# second NAME: another engine of record beside the first, registered as Docker context
# imagekit-NAME (how a test stands in for a remote BuildKit). IMAGEKIT_IMAGE_STORE applies.
start_second() {
    valid_name "${1:-}"
    install_engine
    link_clients if-missing
    start_engine "$1"
    docker_cli context inspect "imagekit-$1" >/dev/null 2>&1 ||
        docker_cli context create "imagekit-$1" --docker "host=unix://$SOCKET" >/dev/null
    log "Docker context imagekit-$1 -> unix://$SOCKET"
}

stop_second() {
    valid_name "${1:-}"
    docker_cli context rm -f "imagekit-$1" >/dev/null 2>&1 || true
    stop_engine "$1" purge
    log "engine $1 stopped; its data removed"
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
        docker_cli info -f 'dockerd: {{.ServerVersion}} store={{.Driver}} cgroup={{.CgroupDriver}}'
        echo "buildx: $(docker_cli buildx version 2>/dev/null || echo missing)"
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
    # the header: every comment line from the second to the first line that is not one
    awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
}

main() {
    local cmd="${1:-all}"
    shift || true
    [[ $cmd == @(-h|--help|help) || $(id -u) -eq 0 ]] || die "must run as root"
    case "$cmd" in
        install)  install_packages; install_engine; link_clients ;;
        install-engine) install_engine ;;
        docker)   install_packages; start_docker ;;
        second)   install_packages; start_second "$@" ;;
        stop-second) stop_second "$@" ;;
        registry) install_packages; start_registry "$@" ;;
        all)      install_packages; start_docker; start_registry "$@" ;;
        status)   show_status ;;
        emulation) setup_emulation ;;
        -h|--help|help) usage ;;
        *) usage; exit 2 ;;
    esac
}

# Sourced (tests/unit/test_engine_sh.py runs its functions on binaries that do not run), it only
# defines them.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main "$@"
fi
