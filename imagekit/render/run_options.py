"""What each RUN of a cell's Dockerfile carries for the BuildKit builder: its network and mounts.

Decided per step here (the recipe asks, the templates write the answer right after ``RUN``). The
classic builder gets an empty string for every step, so its Dockerfiles stay byte for byte what
they were. For BuildKit:

- every RUN names its network, because the engines run with ``--bridge=none`` (a RUN without one
  fails "network bridge not found"): ``none`` where the step needs nothing from outside (installs
  from the wheelhouse with ``no_index``, the build guard and pins, the extension build), ``host``
  where it reaches an index or an apt archive;
- pip and apt keep their downloads in cache mounts shared by every cell (never in the image), so
  pip runs without ``--no-cache-dir`` and apt keeps its lists (the lists directory is the mount);
- with ``sources.pip.credentials`` each pip step that reaches an index mounts the logins as
  ``/root/.netrc`` (pip reads it for the index host): a secret mount, in no layer and no cache key;
- a pip step that installs from the wheelhouse binds it from the build context, so the wheel files
  are in no layer without a build stage: the classic builder copies them into one and then copies
  the venv out of it (for the CUDA wheels, 2.6 GB and 5.4 GB written again). The bound files are
  part of the step's cache key, as the copied ones were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from imagekit.plan.schema import BuildSettings, Matrix
from imagekit.render.contract import PIP_NETRC_SECRET

Network = Literal["none", "host"]

# One pip cache for every cell: one torch download serves them all. `locked`: two builds at once
# wait for each other rather than write one cache together.
PIP_CACHE_MOUNT = "--mount=type=cache,target=/root/.cache/pip,id=imagekit-pip,sharing=locked"
PIP_NETRC_MOUNT = f"--mount=type=secret,id={PIP_NETRC_SECRET},target=/root/.netrc,mode=0400,required=true"
# Debian's and Ubuntu's images delete every downloaded package after apt runs (this file): with
# the cache a mount, that would only empty the cache.
APT_CLEAN_CONFIG = "/etc/apt/apt.conf.d/docker-clean"
APT_PRELUDE = f"rm -f {APT_CLEAN_CONFIG} && "
_FLAG_SEPARATOR = " \\\n    "
WHEELHOUSE_CONTEXT = "wheelhouse"  # the wheelhouse's directory in a build context
# A closure installed in layers (``wheels.slice_closure``): the CUDA wheels and the other
# dependencies each in a context directory of their own, so each step's cache key holds only its
# slice and cells that pin the same wheels hit the same cache entry (one layer, one blob). The
# mount targets are the same in every cell: a mount point's stub is part of the step's layer.
CUDA_WHEELS_CONTEXT = "wheelhouse-cuda"
COMPILER_WHEELS_CONTEXT = "wheelhouse-cuda-compiler"  # a devel cell's `nvcc: wheels`
DEPS_WHEELS_CONTEXT = "wheelhouse-deps"
VENV_TOOLS_CONTEXT = "wheelhouse-venv"  # the venv's pip and setuptools, installed first
# What an apt step deletes in its own RUN (a later RUN would leave the bytes below a whiteout):
# logs with the time of the build, and ldconfig's aux-cache, which holds inode numbers
# (docker-library/ruby PR 455); debconf's -old copies. None of it is read again.
APT_VOLATILE = (
    "/var/log/dpkg.log /var/log/alternatives.log /var/log/apt/* /var/cache/ldconfig/aux-cache"
    " /var/cache/debconf/*-old"
)


def wheel_dir(context: str) -> str:
    """Where a step finds a wheel directory of the build context: ``/tmp/<context>``."""
    return f"/tmp/{context}"


def wheelhouse_mount(context: str) -> str:
    """The bind mount of a wheel directory of the build context, where ``wheel_dir`` says."""
    return f"--mount=type=bind,source={context},target={wheel_dir(context)}"


WHEELHOUSE_DIR = wheel_dir(WHEELHOUSE_CONTEXT)  # where a step that installs from it finds it
WHEELHOUSE_MOUNT = wheelhouse_mount(WHEELHOUSE_CONTEXT)


def apt_cache_mounts(os_name: str) -> tuple[str, str]:
    """The apt cache and lists mounts, one pair per OS release (their packages and lists differ)."""
    return (
        f"--mount=type=cache,target=/var/cache/apt,id=imagekit-apt-{os_name},sharing=locked",
        f"--mount=type=cache,target=/var/lib/apt/lists,id=imagekit-apt-lists-{os_name},sharing=locked",
    )


@dataclass(frozen=True)
class StepOptions:
    """How one matrix's steps run under one builder; each method returns what follows ``RUN ``."""

    buildkit: bool
    pip_network: Network  # none: pip installs only from the wheelhouse
    fallback_apt_network: Network  # apt that runs only where the base lacks a package
    netrc: bool  # the matrix has index logins

    @classmethod
    def of(cls, matrix: Matrix, build: BuildSettings) -> StepOptions:
        pip = matrix.sources.pip
        # no_index is the air-gapped setting: without an apt mirror nothing outside is reachable,
        # so an apt-get that runs only when the base lacks a package gets no network either (the
        # base of such a site brings it), and its cells build with every step offline.
        air_gapped = pip.no_index and not matrix.sources.apt.mirror
        return cls(
            buildkit=build.on_buildkit,
            pip_network="none" if pip.no_index else "host",
            fallback_apt_network="none" if air_gapped else "host",
            netrc=bool(pip.credentials),
        )

    def run(self, network: Network, *mounts: str) -> str:
        """The options of a RUN on ``network`` with ``mounts``: one per line when there are mounts."""
        if not self.buildkit:
            return ""
        flags = (f"--network={network}", *mounts)
        return _FLAG_SEPARATOR.join(flags) + (_FLAG_SEPARATOR if mounts else " ")

    def offline(self) -> str:
        """A step that needs nothing from outside: the probe's steps, the extension build, sed."""
        return self.run("none")

    def pip(self, wheelhouse: bool) -> str:
        """A ``pip install``: its cache, the index logins where it reaches an index, and the
        wheelhouse where it installs from one."""
        secret = (PIP_NETRC_MOUNT,) if self.netrc and self.pip_network == "host" else ()
        bound = (WHEELHOUSE_MOUNT,) if wheelhouse else ()
        return self.run(self.pip_network, PIP_CACHE_MOUNT, *bound, *secret)

    def wheel_slice(self, context: str) -> str:
        """A ``pip install --no-index`` of a slice of a resolved closure: offline, its directory bound."""
        return self.run("none", PIP_CACHE_MOUNT, wheelhouse_mount(context))

    def wheelhouse_stage(self, wheelhouse: bool) -> bool:
        """Whether the wheelhouse is copied into a build stage (the classic builder) rather than
        bound to the steps that read it (BuildKit)."""
        return wheelhouse and not self.buildkit

    def apt(self, os_name: str, fallback: bool = False) -> str:
        """An ``apt-get update && install`` (``fallback``: one that runs only when a check fails)."""
        return self.run(self.fallback_apt_network if fallback else "host", *apt_cache_mounts(os_name))

    @property
    def pip_cache_dir_flag(self) -> tuple[str, ...]:
        """The classic builder keeps no pip cache in a layer; BuildKit's is a mount."""
        return () if self.buildkit else ("--no-cache-dir",)

    @property
    def apt_prelude(self) -> str:
        """What an apt step runs first: BuildKit keeps the downloads (in the mount)."""
        return APT_PRELUDE if self.buildkit else ""

    @property
    def apt_cleanup(self) -> str:
        """What an apt step runs last on BuildKit, whose layers are meant to be reproducible; the
        classic builder's Dockerfiles stay as they were (its layers never are: each is the tar of
        a container's changes, with the times the build ran)."""
        return f" \\\n && rm -rf {APT_VOLATILE}" if self.buildkit else ""

    @property
    def apt_clean_lists(self) -> bool:
        """Whether an apt step deletes its lists: the classic builder's would stay in the layer;
        BuildKit's lists directory is the cache mount, so nothing of it is in the image."""
        return not self.buildkit
