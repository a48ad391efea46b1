#!/usr/bin/env python3
"""HEALTHCHECK of imagekit front-end images (/opt/imagekit/frontend/healthcheck.py).

Exit 0 when the container's front end answers, 1 when it does not (one line on stdout either way).
Standard library only, Python 3.8+. The front end is IMAGEKIT_FRONTEND (image ENV) or argv[1]:

- jupyter: the server's own runtime file (jpserver-<pid>.json, in JUPYTER_RUNTIME_DIR or the
  entrypoint's state directory) gives its port, base URL and token; GET <base>api/status on
  127.0.0.1 with `Authorization: token ...` must answer 200. The token never leaves the container
  and never appears in the output.
- ssh: 127.0.0.1:SSH_PORT (default 2222) must greet with "SSH-2.0-".
"""

# Python 3.8 compatibility: os.path on plain strings.
# ruff: noqa: PTH118, PTH123, PTH207

from __future__ import annotations

import glob
import json
import os
import socket
import sys
import urllib.error
import urllib.request

IMAGE_STATE_DIR = "/var/lib/imagekit-frontend"
TIMEOUT_S = 5.0


def state_dirs() -> list[str]:
    """Where the entrypoint may have put its state (the same order it chooses in)."""
    dirs = [os.environ.get("IMAGEKIT_STATE_DIR", ""), IMAGE_STATE_DIR]
    dirs.append(os.path.join(os.environ.get("TMPDIR") or "/tmp", f"imagekit-frontend-{os.getuid()}"))
    return [d for d in dirs if d]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def jupyter() -> tuple[bool, str]:
    runtime_dirs = [os.environ.get("JUPYTER_RUNTIME_DIR", "")] + [
        os.path.join(d, "jupyter") for d in state_dirs()
    ]
    files: list[str] = []
    for directory in runtime_dirs:
        if directory:
            files += glob.glob(os.path.join(directory, "jpserver-*.json"))
    if not files:
        return False, "no Jupyter server runtime file (jpserver-*.json): the server is not up"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    last = "no live Jupyter server"
    for path in sorted(files, key=os.path.getmtime, reverse=True):
        try:
            with open(path) as handle:
                info = json.load(handle)
            pid, port = int(info["pid"]), int(info["port"])
            base = str(info.get("base_url") or "/")
            token = str(info.get("token") or "")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            last = f"{path}: unreadable ({type(exc).__name__})"
            continue
        if not alive(pid):
            last = f"{path}: process {pid} is gone"
            continue
        scheme = "https" if info.get("secure") else "http"
        url = f"{scheme}://127.0.0.1:{port}{base.rstrip('/')}/api/status"
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with opener.open(request, timeout=TIMEOUT_S) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (OSError, urllib.error.URLError) as exc:
            last = f"{url}: {exc}"
            continue
        if status == 200:
            return True, f"jupyter ok: {url} answered 200 with the token"
        last = f"{url} answered {status} with the server's token"
    return False, last


def ssh() -> tuple[bool, str]:
    port = int(os.environ.get("SSH_PORT") or 2222)
    host = os.environ.get("SSH_LISTEN") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as conn:
            conn.settimeout(TIMEOUT_S)
            banner = conn.recv(255)
    except OSError as exc:
        return False, f"sshd on {host}:{port}: {exc}"
    if banner.startswith(b"SSH-2.0-"):
        greeting = banner.splitlines()[0].decode("ascii", "replace")
        return True, f"ssh ok: {host}:{port} greets {greeting}"
    return False, f"sshd on {host}:{port} greets {banner[:40]!r}, not SSH-2.0"


def main(argv: list[str]) -> int:
    frontend = argv[1] if len(argv) > 1 else os.environ.get("IMAGEKIT_FRONTEND", "")
    probes = {"jupyter": jupyter, "ssh": ssh}
    if frontend not in probes:
        print(f"healthcheck: front end {frontend!r} is not jupyter or ssh (IMAGEKIT_FRONTEND)")
        return 1
    ok, message = probes[frontend]()
    print(message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
