#!/usr/bin/env bash
# base-images.sh - build small local base images without pulling from any
# registry (no Docker Hub access here).
#
# Usage:
#   scripts/base-images.sh [--force] [busybox|debian-python|all]
#
# Images:
#   imagekit-test/busybox:latest           FROM scratch + static busybox + applet
#                                          symlinks, LABEL imagekit.test=true
#   imagekit-local/debian-python:bookworm  debootstrap --variant=minbase bookworm
#                                          + python3 python3-venv python3-pip
#                                          ca-certificates openssh-server (for the
#                                          ssh front end; no host keys: every
#                                          container makes its own), via
#                                          `docker import`
#
# Idempotent: an image that already exists is skipped unless --force is given
# (debian-python: or unless its imagekit.packages label names another package list).
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
#                             replacing the one other builds use)
set -euo pipefail

BUSYBOX_IMAGE="${IMAGEKIT_BUSYBOX_IMAGE:-imagekit-test/busybox:latest}"
PYTHON_IMAGE="${IMAGEKIT_PYTHON_IMAGE:-imagekit-local/debian-python:bookworm}"
SUITE="bookworm"
# openssh-server: the ssh front end (imagekit/frontends) runs sshd from the base when it has one.
# python3-dev and g++: torch.compile (inductor) and cpp_extension build C++ against Python.h.
PY_PACKAGES="python3,python3-venv,python3-pip,python3-dev,g++,ca-certificates,openssh-server"

log() { printf '[base-images] %s\n' "$*" >&2; }
die() { printf '[base-images] ERROR: %s\n' "$*" >&2; exit 1; }

# Debian's client matches Debian's dockerd and uses the classic builder with
# DOCKER_BUILDKIT=0; the newer /usr/local/bin/docker would default to buildx.
if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
export DOCKER_BUILDKIT=0

FORCE=0
TARGET=all
for arg in "$@"; do
    case "$arg" in
        --force|-f) FORCE=1 ;;
        busybox|debian-python|all) TARGET=$arg ;;
        -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg" ;;
    esac
done

[[ $(id -u) -eq 0 ]] || die "must run as root"
$DOCKER info >/dev/null 2>&1 || die "docker engine not reachable (run scripts/engine.sh docker)"

image_exists() { $DOCKER image inspect "$1" >/dev/null 2>&1; }
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
    if ldd "$bb" 2>&1 | grep -q '=>'; then
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

build_debian_python() {
    if image_exists "$PYTHON_IMAGE" && [[ $FORCE -eq 0 ]]; then
        # An image made from another package list (before openssh-server joined it) is rebuilt.
        local have
        have=$($DOCKER image inspect -f '{{index .Config.Labels "imagekit.packages"}}' "$PYTHON_IMAGE" 2>/dev/null || true)
        if [[ $have == "$PY_PACKAGES" ]]; then
            log "$PYTHON_IMAGE exists (use --force to rebuild)"
            return 0
        fi
        log "$PYTHON_IMAGE has packages '${have:-?}', not '$PY_PACKAGES': rebuilding"
    fi
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not installed"
    local mirror sec_mirror
    mirror=${IMAGEKIT_DEBIAN_MIRROR:-$(apt_mirror_for_suite "$SUITE" | first_line)}
    mirror=${mirror:-http://deb.debian.org/debian}
    sec_mirror=${IMAGEKIT_SECURITY_MIRROR:-$(apt_mirror_for_suite "$SUITE-security" | first_line)}
    sec_mirror=${sec_mirror:-http://deb.debian.org/debian-security}
    log "debootstrap $SUITE from $mirror (security: $sec_mirror)"

    WORK=$(mktemp -d /var/tmp/imagekit-debian.XXXXXX)
    local root="$WORK/rootfs" t0=$SECONDS old
    old=$(image_id "$PYTHON_IMAGE")
    if ! debootstrap --variant=minbase --include="$PY_PACKAGES" \
            --components=main --merged-usr "$SUITE" "$root" "$mirror" \
            > "$WORK/debootstrap.log" 2>&1; then
        tail -n 30 "$WORK/debootstrap.log" >&2
        [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
        die "debootstrap failed"
    fi
    local t_boot=$((SECONDS - t0))
    log "debootstrap took ${t_boot}s"

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
    tar -C "$root" --numeric-owner --xattrs --one-file-system -cf - . |
        $DOCKER import \
            --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL imagekit.base=debian-python imagekit.suite=bookworm imagekit.packages=$PY_PACKAGES" \
            --message "debootstrap --variant=minbase $SUITE + $PY_PACKAGES" \
            - "$PYTHON_IMAGE" >/dev/null
    rm -rf --one-file-system "$WORK"; WORK=""
    drop_old "$old" "$PYTHON_IMAGE"
    log "built $PYTHON_IMAGE: rootfs $rootfs_size, image $($DOCKER image inspect -f '{{.Size}}' "$PYTHON_IMAGE") bytes, total $((SECONDS - t0))s (debootstrap ${t_boot}s)"
}

case "$TARGET" in
    busybox) build_busybox ;;
    debian-python) build_debian_python ;;
    all) build_busybox; build_debian_python ;;
esac
