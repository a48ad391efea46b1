#!/bin/sh
# imagekit front-end entrypoint (/opt/imagekit/frontend/entrypoint.sh in jupyter and ssh images).
# dumb-init runs as PID 1 and starts this script as the image's non-root user:
#
#   start-jupyter [ARGS...]  JupyterLab on ${JUPYTER_IP:-0.0.0.0}:${JUPYTER_PORT:-8888}, root dir
#                            ${JUPYTER_ROOT_DIR:-/workspace}; ARGS (an allow-list, see
#                            JUPYTER_ALLOWED) go to jupyter-lab.
#   start-sshd [ARGS...]     OpenSSH on ${SSH_PORT:-2222} (${SSH_LISTEN:-all addresses}), public
#                            keys only; ARGS go to sshd (start-sshd -T prints the effective config).
#   anything else            run as given: `docker run IMAGE python train.py`.
#
# Jupyter token, the first that is set: JUPYTER_TOKEN; the file JUPYTER_TOKEN_FILE (a mounted
# secret; /run/secrets/jupyter_token is read when it exists); else a random token generated here
# and printed once, on stderr. The token goes to the server in its environment, never on a command
# line. An empty token, and any ARG not on the allow-list (so every spelling that sets a token or
# password, or turns authentication or XSRF checks off), are refused: a token is always required.
# The server reads no config directory the caller names (JUPYTER_CONFIG_DIR is private to it).
#
# SSH authorized keys, all that are given: SSH_AUTHORIZED_KEYS (the keys' text, one a line) and the
# file SSH_AUTHORIZED_KEYS_FILE (a mounted file; /run/secrets/authorized_keys is read when it
# exists). With none, sshd is not started. sshd runs as this user (no capability, no setuid), so
# that user is the only one who can log in; passwords, keyboard-interactive and root are refused.
# Host keys (types in SSH_HOST_KEY_TYPES, default ed25519) are generated at a container's first
# start and kept in its state directory: never in the image, never shared by two containers.
#
# State directory (host keys, authorized keys, Jupyter's runtime files, the environment of login
# shells): IMAGEKIT_STATE_DIR; else /var/lib/imagekit-frontend (empty in the image, owned by the
# user) when writable; else $TMPDIR/imagekit-frontend-<uid> (a read-only root with a /tmp tmpfs).
#
# Both servers refuse to start as root. Exit status 64 when a setting is refused or missing.
set -eu

FRONTEND_DIR=/opt/imagekit/frontend
IMAGE_STATE_DIR=/var/lib/imagekit-frontend

log() { printf 'imagekit-frontend: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 64
}

refuse_root() {
    if [ "$(id -u)" = 0 ]; then
        die "$1 runs as the image's non-root user, not as root: drop --user 0 (or runAsUser: 0)"
    fi
}

# Sets STATE: a directory only this user can read, created when missing.
state_dir() {
    if [ -n "${IMAGEKIT_STATE_DIR:-}" ]; then
        STATE=$IMAGEKIT_STATE_DIR
    elif [ -d "$IMAGE_STATE_DIR" ] && [ -w "$IMAGE_STATE_DIR" ]; then
        STATE=$IMAGE_STATE_DIR
    else
        STATE="${TMPDIR:-/tmp}/imagekit-frontend-$(id -u)"
    fi
    case $STATE in
        /*) ;;
        *) die "state directory '$STATE': give an absolute path" ;;
    esac
    case $STATE in
        *[!A-Za-z0-9/._-]*) die "state directory '$STATE': use letters, digits and / . _ - only" ;;
    esac
    if [ ! -d "$STATE" ]; then
        (umask 077 && mkdir -p "$STATE") || die "cannot create the state directory $STATE"
    fi
    if [ -L "$STATE" ] || [ "$(stat -c %u "$STATE")" != "$(id -u)" ]; then
        die "state directory $STATE is not a directory of user $(id -un) (uid $(id -u))"
    fi
    chmod 0700 "$STATE"
}

# The container's environment for login shells (ssh sessions, Jupyter terminals): sshd gives a
# session a fresh environment, and Debian's /etc/profile resets PATH, which would lose the venv,
# PIP_CONSTRAINT and whatever `docker run -e` set. /etc/profile.d/imagekit-frontend.sh reads this
# file (login shells; other bash shells through /etc/bash.bashrc). Tokens and keys given to this
# script stay out of it.
ENVIRONMENT_PY='
import os, re, shlex, sys
skip = re.compile(r"HOME|HOSTNAME|PWD|OLDPWD|SHLVL|_|TERM|USER|LOGNAME|MAIL|SHELL|IMAGEKIT_CONTAINER_ENV(_LOADED)?"
                  r"|JUPYTER_TOKEN.*|SSH_AUTHORIZED_KEYS.*|SSH_(AUTH_SOCK|CLIENT|CONNECTION|TTY|ORIGINAL_COMMAND)")
lines = ["# the container environment, written by the imagekit front-end entrypoint at start"]
for name in sorted(os.environ):
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and not skip.fullmatch(name):
        lines.append("export %s=%s" % (name, shlex.quote(os.environ[name])))
path = sys.argv[1]
fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as out:
    out.write("\n".join(lines) + "\n")
os.replace(path + ".new", path)
'

write_environment() {
    python3 -c "$ENVIRONMENT_PY" "$1" || die "cannot write $1"
}

# ---------------------------------------------------------------------------------- jupyter --

# The Jupyter arguments a user may pass, as --Name=value: an allow-list, because authentication can
# be weakened through many spellings (token, password, XSRF, tornado_settings, a --config file,
# an identity or authorizer class, ...). Anything else is refused before the server starts.
JUPYTER_ALLOWED='--log-level --debug --ServerApp.base_url --ServerApp.default_url --LabApp.default_url
--ServerApp.max_body_size --ServerApp.max_buffer_size --ServerApp.iopub_data_rate_limit
--ServerApp.iopub_msg_rate_limit --ServerApp.rate_limit_window --ServerApp.terminals_enabled
--ServerApp.shutdown_no_activity_timeout --MappingKernelManager.cull_idle_timeout
--MappingKernelManager.cull_interval --MappingKernelManager.cull_connected
--MappingKernelManager.cull_busy --ContentsManager.allow_hidden --FileContentsManager.delete_to_trash'

jupyter_argument_allowed() {
    name=${1%%=*}
    case $1 in
        --debug) return 0 ;;  # the one flag without a value
        --debug=*) return 1 ;;
        --*=*) ;;  # the value in the same argument: a separate one would go unchecked
        *) return 1 ;;
    esac
    for allowed in $JUPYTER_ALLOWED; do
        [ "$name" = "$allowed" ] && return 0
    done
    return 1
}

start_jupyter() {
    refuse_root "Jupyter"
    for arg in "$@"; do
        if ! jupyter_argument_allowed "$arg"; then
            die "refusing the Jupyter argument '${arg%%=*}': only these may be passed, as --Name=value: $(echo $JUPYTER_ALLOWED); give the token in JUPYTER_TOKEN or JUPYTER_TOKEN_FILE (a mounted secret): a token is always required"
        fi
    done
    # Configuration reaches the server through files too: only the image's own (system) config
    # directories count, never one named by the caller's environment or kept on the workspace.
    if [ -n "${JUPYTER_CONFIG_DIR:-}${JUPYTER_CONFIG_PATH:-}" ]; then
        log "ignoring JUPYTER_CONFIG_DIR/JUPYTER_CONFIG_PATH: pass allowed arguments instead"
    fi
    unset JUPYTER_CONFIG_PATH
    generated=0
    if [ "${JUPYTER_TOKEN+set}" = set ]; then
        token=$JUPYTER_TOKEN
        origin="JUPYTER_TOKEN"
    elif [ -n "${JUPYTER_TOKEN_FILE:-}" ] || [ -e /run/secrets/jupyter_token ]; then
        file=${JUPYTER_TOKEN_FILE:-/run/secrets/jupyter_token}
        [ -f "$file" ] && [ -r "$file" ] || die "token file $file: not a file that $(id -un) can read"
        token=$(cat "$file")
        origin="the file $file"
    else
        token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
        origin="generated"
        generated=1
    fi
    [ -n "$token" ] || die "the Jupyter token from $origin is empty: an empty token would let anyone in; set a token or leave JUPYTER_TOKEN unset for a random one"
    case $token in
        *[[:space:]]*) die "the Jupyter token from $origin holds whitespace (a Windows line end?)" ;;
    esac
    if [ ${#token} -lt 16 ]; then
        log "warning: the Jupyter token from $origin has ${#token} characters; use 32 or more"
    fi
    export JUPYTER_TOKEN="$token"
    unset JUPYTER_TOKEN_FILE

    ip=${JUPYTER_IP:-0.0.0.0}
    port=${JUPYTER_PORT:-8888}
    root=${JUPYTER_ROOT_DIR:-/workspace}
    state_dir
    # Jupyter writes the token into its runtime files (jpserver-<pid>.json, read by the
    # HEALTHCHECK): keep them in the private state directory, not in the home on a volume.
    export JUPYTER_RUNTIME_DIR="${JUPYTER_RUNTIME_DIR:-$STATE/jupyter}"
    export JUPYTER_CONFIG_DIR="$STATE/jupyter-config"
    # ... while the user's JupyterLab settings and workspaces stay where they were (the home).
    export JUPYTERLAB_SETTINGS_DIR="${JUPYTERLAB_SETTINGS_DIR:-${HOME:-$STATE}/.jupyter/lab/user-settings}"
    export JUPYTERLAB_WORKSPACES_DIR="${JUPYTERLAB_WORKSPACES_DIR:-${HOME:-$STATE}/.jupyter/lab/workspaces}"
    (umask 077 && mkdir -p "$JUPYTER_CONFIG_DIR") || die "cannot create $JUPYTER_CONFIG_DIR"
    export IMAGEKIT_CONTAINER_ENV="$STATE/environment"
    write_environment "$IMAGEKIT_CONTAINER_ENV"
    if [ "$generated" = 1 ]; then
        log "Jupyter token generated for this start, printed only here: open http://127.0.0.1:$port/lab?token=$token (port as published on the host)"
    else
        log "Jupyter token: from $origin"
    fi
    exec jupyter-lab --no-browser --ServerApp.ip="$ip" --ServerApp.port="$port" \
        --ServerApp.port_retries=0 --ServerApp.root_dir="$root" "$@"
}

# ------------------------------------------------------------------------------------- sshd --

start_sshd() {
    refuse_root "sshd"
    sshd=/usr/sbin/sshd
    [ -x "$sshd" ] || sshd=$(command -v sshd) || die "no sshd in this image"
    user=$(id -un) || die "uid $(id -u) has no name in /etc/passwd: sshd needs one"
    state_dir
    keys="$STATE/ssh"
    if [ ! -d "$keys" ]; then
        (umask 077 && mkdir -p "$keys") || die "cannot create $keys"
    fi
    chmod 0700 "$keys"

    # Authorized keys: written afresh at every start, so a key taken out of the secret or the
    # variable stops working at the next start. sshd reads them through AuthorizedKeysCommand
    # (/bin/cat, owned by root), which needs no home directory on a writable filesystem.
    new="$keys/authorized_keys.new"
    (umask 077 && : >"$new")
    if [ -n "${SSH_AUTHORIZED_KEYS:-}" ]; then
        printf '%s\n' "$SSH_AUTHORIZED_KEYS" >>"$new"
    fi
    file=${SSH_AUTHORIZED_KEYS_FILE:-}
    if [ -z "$file" ] && [ -e /run/secrets/authorized_keys ]; then
        file=/run/secrets/authorized_keys
    fi
    if [ -n "$file" ]; then
        [ -f "$file" ] && [ -r "$file" ] || die "authorized keys file $file: not a file that $user can read"
        cat "$file" >>"$new"
    fi
    if ! fingerprints=$(ssh-keygen -l -f "$new" 2>/dev/null) || [ -z "$fingerprints" ]; then
        rm -f "$new"
        die "no authorized key: set SSH_AUTHORIZED_KEYS to a public key (ssh-ed25519 AAAA...) or mount an authorized_keys file at /run/secrets/authorized_keys (or SSH_AUTHORIZED_KEYS_FILE)"
    fi
    mv -f "$new" "$keys/authorized_keys"
    printf '%s\n' "$fingerprints" | while IFS= read -r line; do log "authorized key: $line"; done

    # sshd takes the first value it reads for an option: ARGS come first so that they win over
    # the settings below, and those win over sshd_config.
    set -- "$@" -D -e -f "$FRONTEND_DIR/sshd_config"

    # Host keys: this container's own, made at its first start (kept across restarts while the
    # state directory lives).
    for type in ${SSH_HOST_KEY_TYPES:-ed25519}; do
        case $type in
            ed25519 | ecdsa | rsa) ;;
            *) die "SSH_HOST_KEY_TYPES: '$type' is not one of ed25519 ecdsa rsa" ;;
        esac
        hostkey="$keys/ssh_host_${type}_key"
        if [ ! -s "$hostkey" ]; then
            rm -f "$hostkey" "$hostkey.pub"
            ssh-keygen -q -t "$type" -N '' -C "imagekit-frontend" -f "$hostkey" || die "ssh-keygen -t $type failed"
            log "host key generated: $(ssh-keygen -l -f "$hostkey.pub")"
        else
            log "host key: $(ssh-keygen -l -f "$hostkey.pub")"
        fi
        set -- "$@" -h "$hostkey"
    done

    export IMAGEKIT_CONTAINER_ENV="$STATE/environment"
    write_environment "$IMAGEKIT_CONTAINER_ENV"
    setenv="IMAGEKIT_CONTAINER_ENV=$IMAGEKIT_CONTAINER_ENV"
    case $PATH in
        *[!A-Za-z0-9/:._-]*) ;; # odd characters: the session gets it from the environment file
        *) setenv="$setenv PATH=$PATH" ;;
    esac
    if [ -n "${SSH_LISTEN:-}" ]; then
        set -- "$@" -o "ListenAddress=$SSH_LISTEN"
    fi
    exec "$sshd" "$@" -o "Port=${SSH_PORT:-2222}" -o "PidFile=$keys/sshd.pid" \
        -o "AuthorizedKeysCommand=/bin/cat $keys/authorized_keys" \
        -o "AuthorizedKeysCommandUser=$user" -o "AllowUsers=$user" -o "SetEnv=$setenv"
}

# ------------------------------------------------------------------------------------- main --

case ${1:-} in
    start-jupyter)
        shift
        start_jupyter "$@"
        ;;
    start-sshd)
        shift
        start_sshd "$@"
        ;;
    "")
        die "no command: start-jupyter, start-sshd, or a program to run"
        ;;
    *)
        exec "$@"
        ;;
esac
