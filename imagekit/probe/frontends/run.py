"""imagekit front-end check: prove a jupyter or ssh image works and is locked down; print ONE JSON
document.

Shipped into every front-end image as a zipapp of this package at /opt/imagekit/frontend_check.py
(entry: this module's main). Standard library only;
Python 3.8+. It runs inside the container as the image's user, as the container's command behind
the image's ENTRYPOINT (dumb-init -> entrypoint.sh, which runs any command it does not know), and
reaches nothing but loopback: it starts the image's own entrypoint (start-jupyter / start-sshd) on
127.0.0.1 or on the default port, with a private state directory under $TMPDIR, talks to it, and
stops it. No GPU, no network, no capability is needed:

    docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges --read-only \\
      --tmpfs /tmp:rw,nosuid,nodev,size=1g -e HOME=/tmp IMAGE python3 /opt/imagekit/frontend_check.py

Expectations come from the image's labels, passed as arguments or environment (arguments win):

    --frontend jupyter|ssh    IMAGEKIT_FRONTEND (the image's ENV)   label imagekit.frontend
    --expect-user dev         IMAGEKIT_EXPECT_USER                  label imagekit.frontend-user
    --expect-uid 10001        IMAGEKIT_EXPECT_UID                   label imagekit.frontend-uid
    --expect-jupyterlab 4.6.6 IMAGEKIT_EXPECT_JUPYTERLAB            label imagekit.jupyterlab

Checks, both front ends: user (non-root, the expected name and uid, home /workspace), init (PID 1
is dumb-init), workspace (/workspace/{code,data,checkpoints} owned by the user), packages (every
pin of PIP_CONSTRAINT holds: torch was not replaced; dumb-init and JupyterLab at their versions),
no_baked_secrets (no token or authorized key in the environment, no SSH host key in /etc/ssh or in
the image's empty state directory, no token or password in Jupyter's config files, no Jupyter
runtime file), server_user (the started server runs as the user). jupyter: jupyter_refuses_unsafe
(an empty token and token/password arguments are refused), jupyter_auth (with no token given one is
generated, printed once and required: /api/status answers 200 with it, 403 without and with a wrong
one), jupyter_listen (0.0.0.0:8888 by default), jupyter_token_file (a mounted token file is used),
jupyter_kernel (the python3 kernel runs the Python that has torch), healthcheck. ssh:
sshd_refuses_no_keys, sshd_config (`sshd -T`: public key only, no password, no keyboard-interactive,
no root, no PAM, port 2222), ssh_login (a freshly generated ed25519 key logs in, host key pinned,
the session has the image's environment and /workspace), ssh_password_refused (a real password
attempt fails: the server offers publickey only), ssh_other_keys_refused (an unknown key and root
are refused), ssh_host_keys (generated at start, none in /etc/ssh, two starts make two different
keys), healthcheck.

Output: {"schema": 1, "kind": "frontend", "frontend", "checks": [...], "summary": {...},
"expected"}. Every check has name, status (pass|fail|skip), required, reason (skip), expected,
actual, detail, cause and fix (fail), duration_s, as /opt/imagekit/check.py's. Exit 0 when no
required check failed, 1 otherwise, 2 on bad arguments. An exception inside a check becomes that
check's failure. Servers it started are stopped on every path.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..protocol import EXIT_BAD_ARGUMENTS, EXIT_FAILED, EXIT_OK, FRONTEND_KIND, SCHEMA
from ..results import CheckResult, run_check, summarize
from .common import check_init, check_no_baked_secrets, check_packages, check_user, check_workspace
from .env import ArgumentError, Context, parse_args
from .jupyter import (
    check_jupyter_auth,
    check_jupyter_kernel,
    check_jupyter_listen,
    check_jupyter_refuses_unsafe,
    check_jupyter_token_file,
)
from .server import check_healthcheck, check_server_user
from .ssh import (
    check_ssh_host_keys,
    check_ssh_login,
    check_ssh_other_keys_refused,
    check_ssh_password_refused,
    check_sshd_config,
    check_sshd_refuses_no_keys,
)

COMMON = (
    ("user", check_user),
    ("init", check_init),
    ("workspace", check_workspace),
    ("packages", check_packages),
    ("no_baked_secrets", check_no_baked_secrets),
)
CHECKS: dict[str, tuple[tuple[str, Callable[[Context], CheckResult]], ...]] = {
    "jupyter": (
        *COMMON,
        ("jupyter_refuses_unsafe", check_jupyter_refuses_unsafe),
        ("jupyter_auth", check_jupyter_auth),
        ("jupyter_listen", check_jupyter_listen),
        ("server_user", check_server_user),
        ("healthcheck", check_healthcheck),
        ("jupyter_token_file", check_jupyter_token_file),
        ("jupyter_kernel", check_jupyter_kernel),
    ),
    "ssh": (
        *COMMON,
        ("sshd_refuses_no_keys", check_sshd_refuses_no_keys),
        ("sshd_config", check_sshd_config),
        ("ssh_login", check_ssh_login),
        ("ssh_password_refused", check_ssh_password_refused),
        ("ssh_other_keys_refused", check_ssh_other_keys_refused),
        ("ssh_host_keys", check_ssh_host_keys),
        ("server_user", check_server_user),
        ("healthcheck", check_healthcheck),
    ),
}  # fmt: skip


def build_report(ctx: Context) -> dict[str, Any]:
    checks = [run_check(name, fn, ctx) for name, fn in CHECKS[ctx.expect.frontend]]
    return {
        "schema": SCHEMA,
        "kind": FRONTEND_KIND,
        "frontend": ctx.expect.frontend,
        "checks": [asdict(c) for c in checks],
        "summary": summarize(checks),
        "expected": asdict(ctx.expect),
    }


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    try:
        expect = parse_args(sys.argv[1:] if argv is None else argv, environ)
    except ArgumentError as exc:
        sys.stderr.write(f"frontend_check.py: bad arguments: {exc}\n")
        return EXIT_BAD_ARGUMENTS
    ctx = Context(expect, environ)
    try:
        report = build_report(ctx)
    finally:
        ctx.close()
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.flush()
    return EXIT_OK if report["summary"]["ok"] else EXIT_FAILED
