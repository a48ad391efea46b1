"""The nccl check across the pods of a multi-node Job: the rendezvous variables `imagekit k8s
--compute-domain` writes, read back into each node's ranks, and the workers told where to meet.
tests/slow/probe/test_rendezvous.py runs two "nodes" for real with torch's gloo backend."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.k8s.compute_domain import ComputeDomainOptions, rendezvous_env
from imagekit.probe import collectives, protocol, rendezvous
from imagekit.probe.rendezvous import Rendezvous, RendezvousError, from_env, worker_place

POD = {"MASTER_ADDR": "job-0.job", "MASTER_PORT": "29500", "NNODES": "3", "NPROC_PER_NODE": "4"}


def pod_env(node_rank: int) -> dict[str, str]:
    """What a pod of a 3-node, 4-GPU compute-domain Job sees, from the Job imagekit writes."""
    env = rendezvous_env("job", ComputeDomainOptions(3), 4)
    values = {e["name"]: e["value"] for e in env if "value" in e}
    # the node rank comes from the pod's completion-index annotation through the downward API,
    # for the probe and for torchrun (PET_); RANK is no pod's with a process a GPU
    assert [e["name"] for e in env if "valueFrom" in e] == ["NODE_RANK", "PET_NODE_RANK"]
    return {**values, "NODE_RANK": str(node_rank), "PET_NODE_RANK": str(node_rank)}


def test_each_pod_gets_its_own_ranks_of_one_world() -> None:
    places = [from_env(pod_env(n), 4) for n in range(3)]
    assert places[0] == Rendezvous("job-0.job", 29500, 3, 0, 4)
    assert all(p is not None and p.world == 12 for p in places)
    ranks = [r for p in places if p is not None for r in p.ranks()]
    assert ranks == list(range(12))  # every rank once, pod by pod


def test_no_rendezvous_is_the_single_node_check() -> None:
    assert from_env({}, 8) is None
    assert from_env({**POD, "NNODES": "1", "NODE_RANK": "0"}, 4) is None


@pytest.mark.parametrize(
    ("change", "gpus", "message"),
    [
        ({"NODE_RANK": "3"}, 4, "NODE_RANK='3': not a whole number from 0 to 2"),
        ({"NODE_RANK": None}, 4, "NODE_RANK='': not a whole number"),
        ({"NODE_RANK": "0", "MASTER_PORT": "0"}, 4, "MASTER_PORT='0'"),
        ({"NODE_RANK": "0", "MASTER_ADDR": "job-0.job;rm"}, 4, "MASTER_ADDR='job-0.job;rm': not a host"),
        ({"NODE_RANK": "0"}, 2, "NPROC_PER_NODE=4 but this node shows 2 GPUs"),
        ({"NODE_RANK": "0", "WORLD_SIZE": "4"}, 4, "WORLD_SIZE=4 is not NNODES x NPROC_PER_NODE (12)"),
        ({"NODE_RANK": "0", "NNODES": "-2"}, 4, "NNODES='-2'"),
    ],
)
def test_variables_that_disagree_are_said(change: dict[str, str | None], gpus: int, message: str) -> None:
    env = {k: v for k, v in {**POD, **change}.items() if v is not None}
    with pytest.raises(RendezvousError, match=re.escape(message)):
        from_env(env, gpus)


def test_a_worker_without_the_variables_meets_on_this_host() -> None:
    assert worker_place({}, 1, 2) == ("127.0.0.1", 1, rendezvous.LOCAL_WAIT_S)
    told = rendezvous.worker_env(Rendezvous("job-0.job", 29500, 3, 2, 4))
    assert worker_place(told, 10, 12) == ("job-0.job", 2, rendezvous.DOMAIN_WAIT_S)  # rank 10: GPU 2


# Records what the parent told it, as a collective rank would see it.
RECORDING_WORKER = """
import json, os, sys
rank, world, port = sys.argv[2], sys.argv[3], sys.argv[4]
result_file = sys.argv[sys.argv.index("--result-file") + 1]
told = {k: v for k, v in os.environ.items() if k.startswith("IMAGEKIT_COLLECTIVE_")}
with open(result_file, "w") as handle:
    json.dump({"rank": int(rank), "world": int(world), "port": int(port), "env": told, "ok": True}, handle)
"""


def test_two_nodes_spawn_their_own_ranks_of_the_shared_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(RECORDING_WORKER)
    monkeypatch.setattr(collectives, "self_command", lambda: [sys.executable, str(script)])
    outcomes: dict[int, dict[str, Any]] = {}

    def node(rank: int) -> None:
        place = Rendezvous("127.0.0.1", 29511, 2, rank, 2)
        outcomes[rank] = collectives.run_collectives(2, "gloo", 30, rendezvous=place)

    threads = [threading.Thread(target=node, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(o["ok"] for o in outcomes.values()), outcomes
    ranks = [r for n in (0, 1) for r in outcomes[n]["ranks"]]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {(r["world"], r["port"]) for r in ranks} == {(4, 29511)}
    assert {json.dumps(r["env"], sort_keys=True) for r in ranks} == {
        json.dumps(rendezvous.worker_env(Rendezvous("127.0.0.1", 29511, 2, 0, 2)), sort_keys=True)
    }


def test_the_job_gives_every_variable_the_probe_reads() -> None:
    """A pod of the Job imagekit writes reads back as its place (a rename on one side fails here)."""
    env = rendezvous_env("job", ComputeDomainOptions(2), 1)
    assert {e["name"] for e in env} >= {
        protocol.MASTER_ADDR,
        protocol.MASTER_PORT,
        protocol.NNODES,
        protocol.NODE_RANK,
        protocol.NPROC_PER_NODE,
        protocol.WORLD_SIZE,
    }, yaml.safe_dump(env)
