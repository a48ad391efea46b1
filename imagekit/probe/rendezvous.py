"""Where the nccl check's ranks meet when the probe runs in every pod of a multi-node Job.

``imagekit k8s --compute-domain N`` gives each pod the variables torch.distributed's ``env://``
and torchrun read: MASTER_ADDR (pod 0's DNS name), MASTER_PORT, NNODES, NODE_RANK (the pod's
completion index), NPROC_PER_NODE (GPUs a pod) and WORLD_SIZE. With NNODES above 1 the nccl check
runs one rank per local GPU, ranks ``NODE_RANK * NPROC_PER_NODE + local``, and they all-reduce with
every other pod's; without the variables (or NNODES 1) it stays within the node, as before.

The parent passes the meeting place to its workers in the environment (``ADDRESS_ENV``,
``LOCAL_ENV``, ``WAIT_ENV``) so that their command line stays ``--collective-worker RANK WORLD
PORT BACKEND``. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .protocol import MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, NPROC_PER_NODE, WORLD_SIZE

ADDRESS_ENV = "IMAGEKIT_COLLECTIVE_ADDRESS"  # the host whose rank 0 serves the store
LOCAL_ENV = "IMAGEKIT_COLLECTIVE_LOCAL"  # ranks on this node: a rank's GPU is rank % local
WAIT_ENV = "IMAGEKIT_COLLECTIVE_WAIT_S"  # how long a rank waits for the others to join
LOCAL_ADDRESS = "127.0.0.1"
LOCAL_WAIT_S = 60.0  # the ranks of one node start together
# Pods of one Job start as each node pulls the image (several GB) and the driver readies the
# node's IMEX daemon: minutes apart. A rank waits this long for the last one.
DOMAIN_WAIT_S = 900.0
MAX_NODES = 1024  # more is no real Job: a typo
MAX_LOCAL = 64  # GPUs a node: 8 or 16 in practice (imagekit's MAX_GPUS)
_HOST = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?")


class RendezvousError(ValueError):
    """The variables are there but say no consistent meeting place."""


@dataclass(frozen=True)
class Rendezvous:
    address: str
    port: int
    nodes: int
    node_rank: int
    local: int  # ranks (GPUs) on this node

    @property
    def world(self) -> int:
        return self.nodes * self.local

    def ranks(self) -> list[int]:
        """This node's global ranks."""
        return [self.node_rank * self.local + i for i in range(self.local)]


def _integer(env: Mapping[str, str], name: str, low: int, high: int) -> int:
    text = (env.get(name) or "").strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise RendezvousError(f"{name}={text!r}: not a whole number from {low} to {high}")
    return int(text)


def from_env(env: Mapping[str, str], gpus: int) -> Rendezvous | None:
    """The multi-node meeting place the pod's variables name, for ``gpus`` visible GPUs; None
    where there is none (no NNODES, or 1)."""
    if (env.get(NNODES) or "1").strip() == "1":
        return None
    nodes = _integer(env, NNODES, 1, MAX_NODES)
    node_rank = _integer(env, NODE_RANK, 0, nodes - 1)
    port = _integer(env, MASTER_PORT, 1, 65535)
    address = (env.get(MASTER_ADDR) or "").strip()
    if not _HOST.fullmatch(address):
        raise RendezvousError(f"{MASTER_ADDR}={address!r}: not a host name or address")
    local = _integer(env, NPROC_PER_NODE, 1, MAX_LOCAL) if env.get(NPROC_PER_NODE) else gpus
    if local != gpus:
        raise RendezvousError(f"{NPROC_PER_NODE}={local} but this node shows {gpus} GPUs: a rank a GPU")
    if WORLD_SIZE in env and _integer(env, WORLD_SIZE, 1, MAX_NODES * MAX_LOCAL) != nodes * local:
        raise RendezvousError(
            f"{WORLD_SIZE}={env[WORLD_SIZE]} is not {NNODES} x {NPROC_PER_NODE} ({nodes * local})"
        )
    return Rendezvous(address, port, nodes, node_rank, local)


def worker_env(rendezvous: Rendezvous) -> dict[str, str]:
    """What a worker of this node is told besides its command line."""
    return {ADDRESS_ENV: rendezvous.address, LOCAL_ENV: str(rendezvous.local), WAIT_ENV: str(DOMAIN_WAIT_S)}


def worker_place(env: Mapping[str, str], rank: int, world: int) -> tuple[str, int, float]:
    """A worker's (store host, GPU index, seconds to wait for the others) from its environment;
    without the variables: this host, the rank's own GPU, a node's wait."""
    local = int(env.get(LOCAL_ENV) or world)
    return (
        env.get(ADDRESS_ENV) or LOCAL_ADDRESS,
        rank % max(local, 1),
        float(env.get(WAIT_ENV) or LOCAL_WAIT_S),
    )
