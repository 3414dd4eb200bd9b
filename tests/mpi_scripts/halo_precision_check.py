"""One distributed SpMM forward and transpose with halo messages in a narrower dtype, on any transport.

Every rank builds spmm_check.py's seeded graph and part vector, multiplies in
float64 with the halo sent as WIRE (bfloat16 or float16), and rank 0 returns
(under mpiexec: writes as JSON) what each rank computed, what landed in its
halo buffer and what it counted, for tests/spmm/test_halo_precision.py to compare
with a serial computation; that test also runs :func:`check_rank` on the
ranks of the in-process transport.
Usage: halo_precision_check.py OUT.json N EDGES SEED PARTS_MODE DIRECTED(0|1) WIRE
"""

import json
import sys

import numpy as np
import torch
from spmm_check import make_graph, make_parts

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import MPITransport, Transport
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.shard.cut import iter_shards
from distgcn.spmm.halo import HALO_DTYPES, HaloExchanger, HaloPlan
from distgcn.spmm.product import DistributedAdjacency

WIDTH = 5


def inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """H and G over the whole graph: random normals, so that rounding them to 2 bytes loses something."""
    rng = np.random.default_rng(seed + 3)
    return rng.standard_normal((n, WIDTH)), rng.standard_normal((n, WIDTH))


def check_rank(transport: Transport, n: int, edges: int, seed: int, mode: str, directed: bool,
               wire: str) -> dict | None:
    """This rank's part of the check; rank 0 returns every rank's findings, the others None."""
    adj = make_graph(n, edges, seed, directed)
    parts = make_parts(n, transport.size, mode, seed)
    graph = Graph(adj=adj, vertex_ids=np.arange(n))
    shard = list(iter_shards(graph, normalized_adjacency(adj), parts, transport.size, "test"))[transport.rank]

    counters = CommCounters()
    exchanger = HaloExchanger(HaloPlan.from_shard(shard), transport, counters, exchanges=True,
                              wire_dtype=HALO_DTYPES[wire])
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, torch.float64, "scipy")
    h, g = inputs(n, seed)
    exchange = exchanger.start_forward(torch.from_numpy(h[shard.global_ids]))
    halo = np.zeros((shard.n_halo, WIDTH))
    for k, rows in exchange.arrivals():  # in round order: each sender's rows go to its slice
        halo[exchanger.plan.recv_slices[k]] = rows.numpy()
    exchange.finish()
    counters.reset()
    y = adjacency.matmul(torch.from_numpy(h[shard.global_ids])).numpy()
    forward = (counters.halo_rows, counters.halo_bytes, counters.messages)
    gt = adjacency.matmul_transpose(torch.from_numpy(g[shard.global_ids])).numpy()
    backward = (counters.halo_rows - forward[0], counters.halo_bytes - forward[1], counters.messages - forward[2])

    gathered = transport.allgather_object(
        {"ids": shard.global_ids.tolist(), "y": y.tolist(), "gt": gt.tolist(),
         "halo_ids": shard.halo_global_ids.tolist(), "halo": halo.tolist(), "forward": forward,
         "backward": backward})
    return {"parts": parts.tolist(), "ranks": gathered} if transport.rank == 0 else None


def main() -> None:
    n, edges, seed = (int(x) for x in sys.argv[2:5])
    result = check_rank(MPITransport(), n, edges, seed, sys.argv[5], sys.argv[6] == "1", sys.argv[7])
    if result is not None:
        with open(sys.argv[1], "w") as fh:
            json.dump(result, fh)


if __name__ == "__main__":
    main()
