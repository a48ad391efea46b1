#!/usr/bin/env bash
# base-images.sh - build small local base images without pulling from any
# registry (no Docker Hub access here).
#
# Usage:
#   scripts/base-images.sh [--force] [busybox|debian-python|debian-python-amd64|debian-python-arm64|all]
#
# Images:
#   imagekit-test/busybox:latest           FROM scratch + static busybox + applet
#                                          symlinks, LABEL imagekit.test=true
#   imagekit-local/debian-python:bookworm  debootstrap --variant=minbase bookworm
#                                          + python3 python3-venv python3-pip
#                                          ca-certificates openssh-server (for the
#                                          ssh front end; no host keys: every
#                                          container makes its own), via
#                                          `docker import`; the host's architecture
#   imagekit-local/debian-python:bookworm-amd64  the same image under its platform's tag (a
#   imagekit-local/debian-python:bookworm-arm64  matrix writes `bookworm-{arch}`; an engine's store
#                                          holds one platform per tag). The host's one is a second
#                                          tag of :bookworm; the other is a foreign debootstrap
#                                          (`--arch`, its second stage run under QEMU: run
#                                          scripts/engine.sh emulation first), made an image by a
#                                          classic build FROM scratch with --platform (an engine
#                                          20.10 ignores `docker import --platform`).
#                                          debian-python-<arch> builds one platform; debian-python
#                                          and all build the host's only.
#
# Idempotent: an image that already exists is skipped unless --force is given
# (debian-python: or unless its imagekit.packages label names another package list or its
# architecture is not the one asked for).
# Needs a running dockerd (scripts/engine.sh docker) and the busybox-static /
# debootstrap packages (installed by scripts/engine.sh install).
#
# Environment overrides:
#   IMAGEKIT_DEBIAN_MIRROR    mirror URL (default: taken from apt sources)
#   IMAGEKIT_SECURITY_MIRROR  security mirror URL (default: from apt sources)
#   IMAGEKIT_BUSYBOX_IMAGE    name of the busybox image (default above; a
#                             benchmark can use its own)
#   IMAGEKIT_PYTHON_IMAGE     name of the debian-python image (default above;
#                             an experiment can build its own without
#                             replacing the one other builds use); the
#                             per-platform tags append -amd64 / -arm64
set -euo pipefail

BUSYBOX_IMAGE="${IMAGEKIT_BUSYBOX_IMAGE:-imagekit-test/busybox:latest}"
PYTHON_IMAGE="${IMAGEKIT_PYTHON_IMAGE:-imagekit-local/debian-python:bookworm}"
SUITE="bookworm"
# openssh-server: the ssh front end (imagekit/frontends) runs sshd from the base when it has one.
# python3-dev and g++: torch.compile (inductor) and cpp_extension build C++ against Python.h.
PY_PACKAGES="python3,python3-venv,python3-pip,python3-dev,g++,ca-certificates,openssh-server"

log() { printf '[base-images] %s\n' "$*" >&2; }
die() { printf '[base-images] ERROR: %s\n' "$*" >&2; exit 1; }

# The classic builder (DOCKER_BUILDKIT=0), with Debian 12's client where one is installed (an older
# docker.io), else the docker on PATH (scripts/engine.sh links Debian 13's, for dockerd 26).
if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
export DOCKER_BUILDKIT=0

FORCE=0
TARGET=all
for arg in "$@"; do
    case "$arg" in
        --force|-f) FORCE=1 ;;
        busybox|debian-python|debian-python-amd64|debian-python-arm64|all) TARGET=$arg ;;
        -h|--help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg" ;;
    esac
done

[[ $(id -u) -eq 0 ]] || die "must run as root"
$DOCKER info >/dev/null 2>&1 || die "docker engine not reachable (run scripts/engine.sh docker)"

image_exists() { $DOCKER image inspect "$1" >/dev/null 2>&1; }
image_arch() { $DOCKER image inspect -f '{{.Architecture}}' "$1" 2>/dev/null || true; }
image_id() { $DOCKER image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
# After a --force rebuild, drop the previous image if it is now untagged.
drop_old() {
    local old=$1 ref=$2
    [[ -n $old && $old != "$(image_id "$ref")" ]] || return 0
    $DOCKER rmi "$old" >/dev/null 2>&1 || true
}

WORK=""
cleanup() {
    if [[ -n "$WORK" && -d "$WORK" ]]; then
        # debootstrap may leave proc/sys mounted on failure
        local m
        for m in $(awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r); do
            umount -l "$m" 2>/dev/null || true
        done
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ busybox --
build_busybox() {
    if image_exists "$BUSYBOX_IMAGE" && [[ $FORCE -eq 0 ]]; then
        log "$BUSYBOX_IMAGE exists (use --force to rebuild)"
        return 0
    fi
    local bb=/bin/busybox
    [[ -x $bb ]] || bb=$(command -v busybox 2>/dev/null || true)
    [[ -n $bb && -x $bb ]] || die "busybox not found (apt-get install busybox-static)"
    if [[ $(ldd "$bb" 2>&1) == *'=>'* ]]; then
        die "$bb is dynamically linked; install busybox-static"
    fi
    local t0=$SECONDS old
    old=$(image_id "$BUSYBOX_IMAGE")
    WORK=$(mktemp -d /var/tmp/imagekit-busybox.XXXXXX)
    local root="$WORK/rootfs"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,var/tmp,proc,sys,dev}
    chmod 1777 "$root/tmp" "$root/var/tmp"
    chmod 0700 "$root/root"
    cp "$bb" "$root/bin/busybox"
    local p
    while read -r p; do
        [[ $p == */* ]] || continue          # skip "linuxrc"
        [[ $p == bin/busybox ]] && continue
        mkdir -p "$root/$(dirname "$p")"
        ln -sf /bin/busybox "$root/$p"
    done < <("$root/bin/busybox" --list-full)
    [[ -L $root/bin/sh ]] || ln -sf /bin/busybox "$root/bin/sh"
    cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
    cat > "$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
    tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$WORK/rootfs.tar" .
    cat > "$WORK/Dockerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
LABEL imagekit.test=true
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["sh"]
EOF
    ( cd "$WORK" && $DOCKER build -q -t "$BUSYBOX_IMAGE" -f Dockerfile . ) >/dev/null
    rm -rf "$WORK"; WORK=""
    drop_old "$old" "$BUSYBOX_IMAGE"
    log "built $BUSYBOX_IMAGE in $((SECONDS - t0))s ($($DOCKER image inspect -f '{{.Size}}' "$BUSYBOX_IMAGE") bytes)"
}

# ------------------------------------------------------------ debian-python --
# Print the first URI of an apt source (deb822 .sources or one-line .list)
# whose suites include $1 (e.g. "bookworm" or "bookworm-security").
apt_mirror_for_suite() {
    local want=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk -v want="$want" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && uris != "") {
                    n = split(suites, s, " ")
                    for (i = 1; i <= n; i++) if (s[i] == want) { split(uris, u, " "); print u[1]; found = 1; exit }
                }
                types = ""; uris = ""; suites = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^Types:/  { sub(/^Types:[ \t]*/, "");  types = $0 }
            /^URIs:/   { sub(/^URIs:[ \t]*/, "");   uris = $0 }
            /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
            END { if (!found) flush() }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        # deb [opts] URI SUITE COMPONENTS...
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk -v want="$want" '$1 == "deb" && $3 == want { print $2 }'
    done
}

first_line() { head -n1; }

# The host's Debian architecture (amd64, arm64): its debian-python is debootstrapped natively.
NATIVE_ARCH=$(dpkg --print-architecture 2>/dev/null || true)
# uname -m of a Debian architecture: the name of its qemu binfmt_misc entry.
machine_of() { case "$1" in amd64) echo x86_64 ;; arm64) echo aarch64 ;; *) echo "$1" ;; esac; }
# IMAGE:TAG-ARCH (IMAGE:latest-ARCH for a name without a tag).
arch_tag() {
    local ref=$1
    [[ ${ref##*/} == *:* ]] || ref+=":latest"
    echo "$ref-$2"
}

# build_debian_python [ARCH]: the host's architecture (default) as $PYTHON_IMAGE plus its
# per-platform tag; another one as its per-platform tag only.
build_debian_python() {
    local arch=${1:-$NATIVE_ARCH}
    local image foreign=0
    if [[ $arch == "$NATIVE_ARCH" ]]; then
        image=$PYTHON_IMAGE
    else
        image=$(arch_tag "$PYTHON_IMAGE" "$arch")
        foreign=1
    fi
    if image_exists "$image" && [[ $FORCE -eq 0 ]]; then
        # An image made from another package list (before openssh-server joined it) is rebuilt.
        local have have_arch
        have=$($DOCKER image inspect -f '{{index .Config.Labels "imagekit.packages"}}' "$image" 2>/dev/null || true)
        have_arch=$(image_arch "$image")
        if [[ $have == "$PY_PACKAGES" && $have_arch == "$arch" ]]; then
            log "$image exists (use --force to rebuild)"
            tag_native "$arch"
            return 0
        fi
        log "$image has packages '${have:-?}' for '${have_arch:-?}', not '$PY_PACKAGES' for $arch: rebuilding"
    fi
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not installed"
    local arch_args=()
    if [[ $foreign -eq 1 ]]; then
        # debootstrap's second stage runs the target's dpkg and maintainer scripts in a chroot:
        # the kernel hands those binaries to QEMU through binfmt_misc (with the F flag).
        local entry
        entry=/proc/sys/fs/binfmt_misc/qemu-$(machine_of "$arch")
        [[ -e $entry && $(head -n1 "$entry") == enabled ]] ||
            die "$arch binaries cannot run here ($entry is not enabled): run scripts/engine.sh emulation"
        arch_args=(--arch="$arch")
    fi
    local mirror sec_mirror
    mirror=${IMAGEKIT_DEBIAN_MIRROR:-$(apt_mirror_for_suite "$SUITE" | first_line)}
    mirror=${mirror:-http://deb.debian.org/debian}
    sec_mirror=${IMAGEKIT_SECURITY_MIRROR:-$(apt_mirror_for_suite "$SUITE-security" | first_line)}
    sec_mirror=${sec_mirror:-http://deb.debian.org/debian-security}
    log "debootstrap $SUITE for $arch from $mirror (security: $sec_mirror)"

    WORK=$(mktemp -d /var/tmp/imagekit-debian.XXXXXX)
    local root="$WORK/rootfs" t0=$SECONDS old
    old=$(image_id "$image")
    if ! debootstrap "${arch_args[@]}" --variant=minbase --include="$PY_PACKAGES" \
            --components=main --merged-usr "$SUITE" "$root" "$mirror" \
            > "$WORK/debootstrap.log" 2>&1; then
        tail -n 30 "$WORK/debootstrap.log" >&2
        [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
        die "debootstrap failed"
    fi
    local t_boot=$((SECONDS - t0))
    log "debootstrap ($arch) took ${t_boot}s"

    # apt sources inside the image (same mirror as this machine)
    cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
deb $sec_mirror $SUITE-security main
EOF
    # Keep future apt-get runs in derived images small (like official images).
    cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    cat > "$root/etc/apt/apt.conf.d/docker-no-recommends" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
    cat > "$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    # slim down: caches, lists, docs, logs
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
           "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/archives/partial/* \
           "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
           "$root"/usr/share/man/* "$root"/usr/share/info/* \
           "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/var/tmp/* \
           "$root"/debootstrap
    find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
    # openssh-server's postinst generated host keys: a key baked into an image is shared by every
    # container made from it (anyone with the image can impersonate any of them). The ssh front
    # end generates a container's own keys at its first start.
    rm -f "$root"/etc/ssh/ssh_host_*
    if compgen -G "$root/etc/ssh/ssh_host_*" >/dev/null; then die "host keys left in $root/etc/ssh"; fi
    : > "$root/etc/resolv.conf"
    : > "$root/etc/machine-id" 2>/dev/null || true
    echo "localhost" > "$root/etc/hostname"

    local rootfs_size
    rootfs_size=$(du -sh --one-file-system "$root" | cut -f1)
    local changes=(
        'CMD ["/bin/bash"]'
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
        'ENV LANG=C.UTF-8'
        "LABEL imagekit.base=debian-python imagekit.suite=bookworm imagekit.packages=$PY_PACKAGES"
    )
    if [[ $foreign -eq 0 ]]; then
        local change_args=() c
        for c in "${changes[@]}"; do change_args+=(--change "$c"); done
        tar -C "$root" --numeric-owner --xattrs --one-file-system -cf - . |
            $DOCKER import "${change_args[@]}" \
                --message "debootstrap --variant=minbase $SUITE + $PY_PACKAGES" \
                - "$image" >/dev/null
    else
        # `docker import --platform` is ignored by an engine 20.10 (the image reads the
        # host's architecture); the classic builder's FROM scratch takes --platform. The tar is
        # written out once (the build context), then unpacked by ADD with owners and modes kept.
        tar -C "$root" --numeric-owner --xattrs --one-file-system -cf "$WORK/rootfs.tar" .
        rm -rf --one-file-system "$root"
        { echo 'FROM scratch'; echo 'ADD rootfs.tar /'; printf '%s\n' "${changes[@]}"; } > "$WORK/Dockerfile"
        $DOCKER build -q --platform "linux/$arch" -t "$image" "$WORK" >/dev/null
    fi
    rm -rf --one-file-system "$WORK"; WORK=""
    local got
    got=$(image_arch "$image")
    [[ $got == "$arch" ]] || die "$image reads architecture '$got', not $arch"
    tag_native "$arch"  # before drop_old: the previous image must lose its second tag too
    drop_old "$old" "$image"
    log "built $image ($arch): rootfs $rootfs_size, image $($DOCKER image inspect -f '{{.Size}}' "$image") bytes, total $((SECONDS - t0))s (debootstrap ${t_boot}s)"
}

# The host's image under its per-platform tag too (a second tag: same image, no rebuild).
tag_native() {
    [[ $1 == "$NATIVE_ARCH" ]] || return 0
    $DOCKER tag "$PYTHON_IMAGE" "$(arch_tag "$PYTHON_IMAGE" "$1")"
}

case "$TARGET" in
    busybox) build_busybox ;;
    debian-python) build_debian_python ;;
    debian-python-amd64) build_debian_python amd64 ;;
    debian-python-arm64) build_debian_python arm64 ;;
    all) build_busybox; build_debian_python ;;
esac
