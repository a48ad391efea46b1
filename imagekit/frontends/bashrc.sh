# imagekit front end: /etc/bash.bashrc sources this first (before its interactive-only part). The
# first bash of an ssh session, also the one that runs `ssh HOST command` (bash reads
# /etc/bash.bashrc, not BASH_ENV, when sshd starts it), and of a Jupyter terminal loads the
# container environment; shells started from it keep what it changed.
if [ -z "${IMAGEKIT_CONTAINER_ENV_LOADED:-}" ] && [ -r /etc/profile.d/imagekit-frontend.sh ]; then
    # shellcheck disable=SC1091
    . /etc/profile.d/imagekit-frontend.sh
fi
