"""Pod Security Standards, level 'restricted', for every workload imagekit writes, in one of two
user modes (``--uid-mode``):

- ``fixed`` (the default): uid/gid 10001, the front-end images' user (FRONTEND.uid, numeric so the
  kubelet can prove it is not root). A plain image has no such user in /etc/passwd, which nothing
  the check script runs needs (HOME is /tmp, as in verification). Claims are made writable by that
  group through ``fsGroup`` where the storage honours it.
- ``scc`` (OpenShift): no runAsUser, runAsGroup or fsGroup. OpenShift's ``restricted-v2``
  SecurityContextConstraints refuse a uid outside the namespace's range
  (``openshift.io/sa.scc.uid-range``) and assign one from it, and an fsGroup from
  ``openshift.io/sa.scc.supplemental-groups``; a fixed 10001 is refused at admission. Everything
  else stays: runAsNonRoot, the RuntimeDefault seccomp profile, every capability dropped, no
  privilege escalation, a read-only root filesystem.

In both, /tmp and /dev/shm are emptyDirs and a front end's home is its workspace claim.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.render.contract import FRONTEND

UidMode = Literal["fixed", "scc"]
UID_MODES: tuple[UidMode, ...] = get_args(UidMode)
RUN_AS = FRONTEND.uid
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def parse_uid_mode(text: str) -> UidMode:
    for mode in UID_MODES:
        if text == mode:
            return mode
    raise InputError(
        f"--uid-mode {shown(text)}: use fixed (uid/gid {RUN_AS}) or scc (OpenShift: the uid and"
        " fsGroup left to the SecurityContextConstraints, such as restricted-v2)"
    )


def container_security(mode: UidMode) -> dict[str, Any]:
    """A container's securityContext: 'restricted', and the user of ``mode``."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    if mode == "fixed":
        context |= {"runAsUser": RUN_AS, "runAsGroup": RUN_AS}
    return {**context, "seccompProfile": dict(RUNTIME_DEFAULT)}


def pod_security(mode: UidMode) -> dict[str, Any]:
    """A pod's securityContext: 'restricted', and the user and fsGroup of ``mode``."""
    context: dict[str, Any] = {"runAsNonRoot": True}
    if mode == "fixed":
        # claims writable by that user where the storage honours fsGroup
        context |= {"runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS}
    # OnRootMismatch: a large workspace is not walked again at every start once its root is right
    # (with scc, the fsGroup the constraints assign)
    context["fsGroupChangePolicy"] = "OnRootMismatch"
    return {**context, "seccompProfile": dict(RUNTIME_DEFAULT)}
