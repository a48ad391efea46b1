"""Front-end checks both front ends run: user, init, workspace, packages, no_baked_secrets."""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import os
import pwd
import re
import shutil
import sys
from typing import Any

from ..results import CheckResult, failed, passed
from .env import (
    IMAGE_STATE_DIR,
    RUN_AS_USER_FIX,
    WORKSPACE,
    WORKSPACE_DIRS,
    Context,
    cmdline,
    process_uid,
    run,
    verdict,
)


def check_user(ctx: Context) -> CheckResult:
    expect = ctx.expect
    problems = []
    try:
        entry: Any = pwd.getpwuid(ctx.uid)
        actual = {"uid": ctx.uid, "gid": os.getgid(), "name": entry.pw_name, "home": entry.pw_dir}
    except KeyError:
        entry = None
        actual = {"uid": ctx.uid, "gid": os.getgid(), "name": None, "home": None}
        problems.append(f"uid {ctx.uid} has no /etc/passwd entry")
    if ctx.uid == 0:
        problems.append("running as root")
    if expect.uid is not None and ctx.uid != expect.uid:
        problems.append(f"uid {ctx.uid}, the image says {expect.uid}")
    if entry is not None and expect.user is not None and entry.pw_name != expect.user:
        problems.append(f"user {entry.pw_name}, the image says {expect.user}")
    if entry is not None and entry.pw_dir != WORKSPACE:
        problems.append(f"home {entry.pw_dir}, not {WORKSPACE}")
    expected = {"uid": expect.uid, "name": expect.user, "home": WORKSPACE, "root": False}
    return verdict("user", problems, RUN_AS_USER_FIX, expected, actual, None)


def check_init(ctx: Context) -> CheckResult:
    args = cmdline(1)
    actual = " ".join(args)[:300]
    if args and os.path.basename(args[0]) == "dumb-init":
        return passed(
            "init", expected="dumb-init as PID 1", actual=actual, detail={"pid1_uid": process_uid(1)}
        )
    return failed(
        "init",
        "PID 1 is not dumb-init: the image's ENTRYPOINT was replaced (--entrypoint) or lost",
        "run the check as the container's command behind the image's own ENTRYPOINT"
        " (docker run IMAGE python3 /opt/imagekit/frontend_check.py), without --entrypoint or --init",
        expected="dumb-init as PID 1",
        actual=actual or None,
    )


def check_workspace(ctx: Context) -> CheckResult:
    owner = ctx.expect.uid if ctx.expect.uid is not None else ctx.uid
    actual: dict[str, Any] = {}
    problems = []
    for name in ("", *WORKSPACE_DIRS):
        path = os.path.join(WORKSPACE, name) if name else WORKSPACE
        try:
            st = os.lstat(path)
        except OSError as exc:
            actual[path] = f"missing ({exc.strerror})"
            problems.append(f"{path} missing")
            continue
        mode = st.st_mode & 0o7777
        actual[path] = {"uid": st.st_uid, "gid": st.st_gid, "mode": oct(mode)}
        if not os.path.isdir(path) or os.path.islink(path):
            problems.append(f"{path} is not a directory")
        if st.st_uid != owner:
            problems.append(f"{path} belongs to uid {st.st_uid}, not {owner}")
        if mode & 0o700 != 0o700 or mode & 0o002:
            problems.append(f"{path} has mode {oct(mode)} (want the owner's rwx, not world-writable)")
    return verdict(
        "workspace",
        problems,
        "the front-end Dockerfile must create /workspace/{code,data,checkpoints} owned by the user",
        {"owner_uid": owner, "dirs": [WORKSPACE] + [f"{WORKSPACE}/{d}" for d in WORKSPACE_DIRS]},
        actual,
        None,
    )


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_packages(ctx: Context) -> CheckResult:
    constraints = ctx.env.get("PIP_CONSTRAINT") or "/etc/imagekit/constraints.txt"
    problems = []
    pins: dict[str, Any] = {}
    try:
        with open(constraints) as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        lines = []
        problems.append(f"no constraints file {constraints} ({exc.strerror})")
    for raw in lines:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", raw.split("#", 1)[0].strip())
        if not match:
            continue
        name, want = match.groups()
        got = _distribution_version(name)
        pins[name] = {"pinned": want, "installed": got}
        if got != want:
            problems.append(f"{name} is {got}, pinned {want}: the front end replaced it")
    tools = {"dumb-init": shutil.which("dumb-init", path=os.path.join(sys.prefix, "bin"))}
    if tools["dumb-init"] is None:
        problems.append(f"no dumb-init in {sys.prefix}/bin")
    if ctx.expect.frontend == "jupyter":
        lab = _distribution_version("jupyterlab")
        tools["jupyterlab"] = lab
        if lab is None:
            problems.append("JupyterLab is not installed in the image's Python")
        elif ctx.expect.jupyterlab and lab != ctx.expect.jupyterlab:
            problems.append(f"JupyterLab {lab}, the image says {ctx.expect.jupyterlab}")
    return verdict(
        "packages",
        problems,
        "install the front end under the cell's constraints (the front-end template pins every"
        " installed package); rebuild the front-end image",
        {"constraints": constraints, "jupyterlab": ctx.expect.jupyterlab},
        {"pins": pins, **tools},
        {"python": sys.executable},
    )


SECRET_ENV = re.compile(r"JUPYTER_TOKEN(_FILE)?|SSH_AUTHORIZED_KEYS(_FILE)?|.*PASSWORD.*")
CONFIG_SECRET = re.compile(r"""(?i)\b(token|password|hashed_password)\b["']?\s*[:=]\s*["']?[^"'\s,}]+""")


def jupyter_config_dirs() -> list[str]:
    dirs = [os.path.join(sys.prefix, "etc", "jupyter"), "/usr/local/etc/jupyter", "/etc/jupyter"]
    dirs += [os.path.join(WORKSPACE, ".jupyter"), os.path.join(os.path.expanduser("~"), ".jupyter")]
    return list(dict.fromkeys(dirs))


def _secret_environment(ctx: Context) -> list[str]:
    """Secret-looking variable names in this environment and in PID 1's."""
    env_hits = sorted(k for k in ctx.env if SECRET_ENV.fullmatch(k))
    pid1_env: list[str] = []
    with contextlib.suppress(OSError):
        with open("/proc/1/environ", "rb") as handle:
            names = [e.split(b"=", 1)[0].decode("utf-8", "replace") for e in handle.read().split(b"\0") if e]
        pid1_env = sorted(k for k in names if SECRET_ENV.fullmatch(k))
    return sorted(set(env_hits + pid1_env))


def _jupyter_configs_with_secrets() -> list[str]:
    config_hits = []
    for directory in jupyter_config_dirs():
        for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
            if not os.path.isfile(path) or not path.endswith((".py", ".json")):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read(200_000)
            except OSError:
                continue
            if CONFIG_SECRET.search(text):
                config_hits.append(path)
    return config_hits


def _jupyter_runtime_files() -> list[str]:
    # Named places only: /workspace may hold mounted data sets, never walked.
    runtime = []
    for base in (WORKSPACE, os.path.expanduser("~")):
        runtime += glob.glob(os.path.join(base, ".local", "share", "jupyter", "runtime", "jpserver-*.json"))
    runtime += glob.glob(os.path.join(IMAGE_STATE_DIR, "jupyter", "jpserver-*.json"))
    return runtime


def _authorized_keys_files() -> list[str]:
    return [
        path
        for base in (WORKSPACE, os.path.expanduser("~"), "/root")
        for path in (
            os.path.join(base, ".ssh", "authorized_keys"),
            os.path.join(base, ".ssh", "authorized_keys2"),
        )
        if os.path.exists(path)
    ]


def check_no_baked_secrets(ctx: Context) -> CheckResult:
    problems = []
    actual: dict[str, Any] = {}
    actual["environment"] = _secret_environment(ctx)
    if actual["environment"]:
        problems.append(
            f"the environment holds {', '.join(actual['environment'])}: from the image's ENV unless"
            " the check was started with -e"
        )
    host_keys = sorted(glob.glob("/etc/ssh/ssh_host_*"))
    actual["etc_ssh_host_keys"] = host_keys
    if host_keys:
        problems.append(f"SSH host keys in the image: {', '.join(host_keys)}")
    try:
        state = sorted(os.listdir(IMAGE_STATE_DIR))
    except OSError:
        state = []
    actual["image_state_dir"] = state
    if state and not ctx.preexisting:
        problems.append(f"{IMAGE_STATE_DIR} is not empty in the image: {', '.join(state[:5])}")
    config_hits = _jupyter_configs_with_secrets()
    actual["jupyter_config_with_token_or_password"] = config_hits
    if config_hits:
        problems.append(f"Jupyter config sets a token or password: {', '.join(config_hits)}")
    runtime = _jupyter_runtime_files()
    actual["jupyter_runtime_files"] = sorted(set(runtime))
    if runtime and not ctx.preexisting:
        problems.append(f"Jupyter runtime files (they hold a token) in the image: {', '.join(runtime)}")
    keys = _authorized_keys_files()
    actual["authorized_keys_files"] = sorted(set(keys))
    if keys:
        problems.append(f"authorized_keys in the image: {', '.join(keys)}")
    return verdict(
        "no_baked_secrets",
        problems,
        "tokens, keys and host keys are given at start (JUPYTER_TOKEN[_FILE], SSH_AUTHORIZED_KEYS[_FILE])"
        " or generated there; delete /etc/ssh/ssh_host_* in the layer that installs openssh-server"
        " and never put a secret in ENV, ARG, LABEL or a file of the image",
        "none",
        actual,
        {"servers_already_running": ctx.preexisting},
    )


def run_healthcheck(ctx: Context, env: dict[str, str]) -> tuple[int, str]:
    return run([sys.executable, ctx.expect.healthcheck, ctx.expect.frontend], env)
