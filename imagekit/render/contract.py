"""Where things live inside every imagekit image: the check script, the pip constraints, the venv.

Kept apart from the renderer so that the stages that only read images (verify, report,
publish) do not import Jinja and the matrix schema. Names and labels are ``imagekit.core.naming``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHECK_SCRIPT_CONTEXT = "imagekit-check.py"  # its name in a build context
CHECK_SCRIPT_PATH = "/opt/imagekit/check.py"  # its path in every image
CONSTRAINTS_FILE = "/etc/imagekit/constraints.txt"  # pins torch for every later pip install
# The variables that name CONSTRAINTS_FILE in every image: pip's and uv's, for installs and for
# isolated builds. pip 26.2 stopped applying constraints files, PIP_CONSTRAINT included, to isolated
# build environments ("Use --build-constraint or the PIP_BUILD_CONSTRAINT environment variable",
# pip's changelog, 26.2, pypa/pip#14094): without PIP_BUILD_CONSTRAINT an sdist that build-requires
# torch (an extension) gets the newest torch from the index in its build environment, and is built
# against another torch than the image's. uv reads UV_CONSTRAINT and UV_BUILD_CONSTRAINT (its
# build isolation is its own too). pip versions before --build-constraint ignore the variable.
CONSTRAINT_ENV = ("PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT", "UV_CONSTRAINT", "UV_BUILD_CONSTRAINT")
VENV = "/opt/venv"  # where torch lives in images whose base brings no PyTorch of its own
# The BuildKit secret that holds the index logins as a netrc file (sources.pip.credentials): the
# Dockerfile mounts it by this id; `imagekit build` makes it from the credentials' secrets.
PIP_NETRC_SECRET = "imagekit-pip-netrc"


def packaged_check_script() -> Path:
    """The probe's zipapp (imagekit/probe, bundled by imagekit.render.probe_bundle): what lands at
    CHECK_SCRIPT_PATH."""
    from imagekit.render.probe_bundle import zipapp_path

    return zipapp_path("check")


# -- front ends (jupyter, ssh): what their images hold and where ---------------------------------


@dataclass(frozen=True)
class FrontendLayout:
    """Where every front-end image keeps what: its templates and checks read these."""

    user: str = "dev"  # non-root: the server and the login user
    # Numeric USER, so Kubernetes can enforce runAsNonRoot; 10000 and above so that no host user
    # has it (what checkov's CKV_K8S_40 asks of a pod, where no user namespace maps uids away).
    # 10001: an ordinary login uid (within login.defs' UID_MIN..UID_MAX, 1000..60000), which
    # useradd and sshd treat as a user like any other, and no base image or distro assigns
    # (Ubuntu 24.04's own `ubuntu` user is 1000); not 65532, distroless' shared "nonroot".
    uid: int = 10001
    workspace: str = "/workspace"  # home and working directory; code, data and checkpoints below
    workspace_dirs: tuple[str, ...] = ("code", "data", "checkpoints")
    state_dir: str = "/var/lib/imagekit-frontend"  # host keys and tokens at run time; empty in the image
    files_context: str = "frontend"  # the front-end files in a build context
    files_dir: str = "/opt/imagekit/frontend"  # and in the image
    check_context: str = "frontend-check.py"
    check_path: str = "/opt/imagekit/frontend_check.py"

    def port(self, frontend: str) -> int:
        """Where the server listens; sshd runs as the user, so no port below 1024."""
        return {"jupyter": 8888, "ssh": 2222}[frontend]


FRONTEND = FrontendLayout()
FRONTEND_FILES = (
    Path(__file__).parent.parent / "frontends"
)  # entrypoint, sshd_config, healthcheck, shell hooks


def packaged_frontend_check() -> Path:
    """The probe's zipapp with the front-end check as its entry: what lands at FRONTEND.check_path."""
    from imagekit.render.probe_bundle import zipapp_path

    return zipapp_path("frontend")


def frontend_files() -> tuple[tuple[str, Path], ...]:
    """(name in the context, file) for the front-end files every front-end image carries."""
    return tuple(
        (f"{FRONTEND.files_context}/{path.name}", path)
        for path in sorted(FRONTEND_FILES.iterdir())
        if path.is_file() and not path.name.startswith(".") and path.suffix != ".pyc"
    )
