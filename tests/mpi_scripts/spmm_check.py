"""One distributed SpMM forward and transpose on a seeded random graph, on any transport.

Every rank builds the same graph and part vector (small, test only), takes its
own shard, and reports what it received and computed; rank 0 returns (under
mpiexec: writes as JSON) what tests/spmm/test_halo.py compares with a serial
computation and a brute-force count. tests/spmm/test_halo.py also runs
:func:`check_rank` on the ranks of the in-process transport.
Usage: spmm_check.py OUT.json N EDGES SEED PARTS_MODE(random|contiguous|skewed) DIRECTED(0|1) KERNEL(torch|scipy)
"""

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import MPITransport, Transport
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.shard.cut import iter_shards
from distgcn.spmm.halo import HaloExchanger, HaloPlan
from distgcn.spmm.product import DistributedAdjacency


def make_graph(n: int, edges: int, seed: int, directed: bool):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, edges), rng.integers(0, n, edges)
    keep = src != dst
    adj = sp.csr_matrix((np.ones(int(keep.sum())), (dst[keep], src[keep])), shape=(n, n))
    if not directed:
        adj = adj + adj.T
    adj.data[:] = 1.0
    adj.sum_duplicates()
    return adj


def make_parts(n: int, nparts: int, mode: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    if mode == "random":
        return rng.permutation(np.arange(n) % nparts)
    if mode == "contiguous":
        return (np.arange(n) * nparts) // n
    # skewed: uneven parts, one possibly tiny
    return np.minimum((rng.random(n) ** 2 * nparts).astype(np.int64), nparts - 1)


def check_rank(transport: Transport, n: int, edges: int, seed: int, mode: str, directed: bool,
               kernel: str) -> dict | None:
    """This rank's part of the check; rank 0 returns every rank's findings, the others None."""
    adj = make_graph(n, edges, seed, directed)
    a_hat = normalized_adjacency(adj)
    parts = make_parts(n, transport.size, mode, seed)
    graph = Graph(adj=adj, vertex_ids=np.arange(n))
    shard = list(iter_shards(graph, a_hat, parts, transport.size, "test"))[transport.rank]

    counters = CommCounters()
    plan = HaloPlan.from_shard(shard)
    exchanger = HaloExchanger(plan, transport, counters, exchanges=True)
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, torch.float64, kernel)

    width = 3
    h_global = np.arange(n * width, dtype=np.float64).reshape(n, width) + 1.0
    g_global = np.random.default_rng(seed + 2).standard_normal((n, width))
    # What arrives, sender by sender, must be exactly the rows named by halo_global_ids.
    exchange = exchanger.start_forward(torch.from_numpy(h_global[shard.global_ids]))
    halo = np.zeros((shard.n_halo, width))
    for k, rows in exchange.arrivals():  # in round order: each sender's rows go to its slice
        halo[plan.recv_slices[k]] = rows.numpy()
    exchange.finish()
    halo_ok = bool(np.array_equal(halo, h_global[shard.halo_global_ids]))
    fwd_rows, fwd_messages = counters.halo_rows, counters.messages

    y = adjacency.matmul(torch.from_numpy(h_global[shard.global_ids])).numpy()
    gt = adjacency.matmul_transpose(torch.from_numpy(g_global[shard.global_ids])).numpy()

    gathered = transport.allgather_object(
        dict(ids=shard.global_ids, y=y, gt=gt, halo_ok=halo_ok, rows=fwd_rows, messages=fwd_messages,
             total_rows=counters.halo_rows, total_messages=counters.messages, total_bytes=counters.halo_bytes,
             exchanges=counters.spmm_exchanges, n_halo=adjacency.n_halo,
             needed=sorted(map(int, shard.halo_global_ids))))
    if transport.rank != 0:
        return None
    y_all = np.zeros((n, width))
    gt_all = np.zeros((n, width))
    for part in gathered:
        y_all[part["ids"]] = part["y"]
        gt_all[part["ids"]] = part["gt"]
    result = {
        "parts": parts.tolist(),
        "halo_ok": [p["halo_ok"] for p in gathered],
        "forward_rows": [p["rows"] for p in gathered],
        "forward_messages": [p["messages"] for p in gathered],
        "total_rows": [p["total_rows"] for p in gathered],
        "total_messages": [p["total_messages"] for p in gathered],
        "total_bytes": [p["total_bytes"] for p in gathered],
        "exchanges": [p["exchanges"] for p in gathered],
        "n_halo": [p["n_halo"] for p in gathered],
        "width": width,
        "needed": [p["needed"] for p in gathered],
        "y_error": float(np.abs(y_all - a_hat @ h_global).max() / np.abs(a_hat @ h_global).max()),
        "gt_error": float(np.abs(gt_all - a_hat.T @ g_global).max() / np.abs(a_hat.T @ g_global).max()),
    }
    return result


def main() -> None:
    n, edges, seed = (int(x) for x in sys.argv[2:5])
    result = check_rank(MPITransport(), n, edges, seed, sys.argv[5], sys.argv[6] == "1", sys.argv[7])
    if result is not None:
        with open(sys.argv[1], "w") as fh:
            json.dump(result, fh)


if __name__ == "__main__":
    main()
