"""tests/unit/probe/test_rendezvous.py's slow test: two "nodes" of the nccl check's multi-node path, each
this machine's run_collectives with its own ranks, meeting at one rendezvous and all-reducing for real
with torch's gloo backend on the CPU (the probe as the image carries it, with the real torch wheel)."""

from __future__ import annotations

import json
import subprocess

from tests.unit.probe_runs import SCRIPT

TWO_NODES = """
import json, sys, threading
sys.path.insert(0, {script!r})
from imagekit_probe import collectives
from imagekit_probe.rendezvous import Rendezvous
port = collectives._free_port()
outcomes = {{}}
def node(rank):
    place = Rendezvous("127.0.0.1", port, 2, rank, 2)
    outcomes[rank] = collectives.run_collectives(2, "gloo", 120, rendezvous=place)
threads = [threading.Thread(target=node, args=(n,)) for n in (0, 1)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps([outcomes[0], outcomes[1]]))
"""


def test_two_nodes_all_reduce_across_one_world_with_gloo(torch_python: str) -> None:
    proc = subprocess.run(  # a fixed argument list
        [torch_python, "-c", TWO_NODES.format(script=str(SCRIPT))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(o["ok"] for o in outcomes), outcomes
    ranks = [r for o in outcomes for r in o["ranks"]]
    # all_reduce of rank+1 over 4 ranks is 10 on every rank: each node saw the other's ranks
    assert [(r["rank"], r["all_reduce"], r["broadcast"]) for r in ranks] == [
        (n, True, True) for n in range(4)
    ]
