# imagekit front end (/etc/profile.d/imagekit-frontend.sh): shells of ssh sessions and Jupyter
# terminals get the container's environment back (PATH with the image's venv, PIP_CONSTRAINT, what
# `docker run -e` set), which sshd does not pass on and Debian's /etc/profile resets. The entrypoint
# writes the file at start and names it in IMAGEKIT_CONTAINER_ENV. Login shells read this after
# /etc/profile has reset PATH; other bash shells through /etc/bash.bashrc (bashrc.sh), which bash
# also reads for `ssh HOST command`.
if [ -n "${IMAGEKIT_CONTAINER_ENV:-}" ] && [ -r "${IMAGEKIT_CONTAINER_ENV}" ]; then
    # shellcheck disable=SC1090
    . "${IMAGEKIT_CONTAINER_ENV}"
    IMAGEKIT_CONTAINER_ENV_LOADED=1
    export IMAGEKIT_CONTAINER_ENV_LOADED
fi
