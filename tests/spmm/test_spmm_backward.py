"""The distributed SpMM's gradient: Âᵀ G from the forward blocks, a stored transpose only where Âᵀ ≠ Â.

Each rank of the in-process transport builds its shard of one seeded graph,
runs the differentiable product and backpropagates a fixed G; the gathered
input gradient must equal dense autograd's Âᵀ G on the whole matrix, for a
directed graph (whose owned blocks are not symmetric) and an undirected one.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from conftest import ROOT

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport.inprocess import InProcessTransport, run_ranks
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.shard.cut import iter_shards
from distgcn.spmm.halo import HaloExchanger, HaloPlan
from distgcn.spmm.product import DistributedAdjacency, spmm

sys.path.insert(0, str(ROOT / "tests" / "mpi_scripts"))
from spmm_check import make_graph, make_parts  # noqa: E402 - the seeded graphs of the halo tests

N, EDGES, SEED, WIDTH = 150, 700, 3, 40  # 40 columns: the numba kernel runs its own loop (>= 8)


def rank_gradient(transport: InProcessTransport, directed: bool, kernel: str) -> dict:
    adj = make_graph(N, EDGES, SEED, directed)
    shard = list(iter_shards(Graph(adj=adj, vertex_ids=np.arange(N)), normalized_adjacency(adj),
                             make_parts(N, transport.size, "random", SEED), transport.size, "test"))[transport.rank]
    exchanger = HaloExchanger(HaloPlan.from_shard(shard), transport, CommCounters(), exchanges=True)
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, torch.float64, kernel)
    rng = np.random.default_rng(SEED)
    h_global, g_global = rng.standard_normal((2, N, WIDTH))
    h = torch.from_numpy(h_global[shard.global_ids]).requires_grad_()
    spmm(adjacency, h).backward(torch.from_numpy(g_global[shard.global_ids]))
    return {"ids": shard.global_ids, "grad": h.grad.numpy(), "reuses_owned": adjacency.owned_t is adjacency.owned}


@pytest.mark.parametrize("kernel", ["torch", "scipy", "numba"])
@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_gradient_is_dense_autograds_and_a_transpose_is_stored_only_for_a_directed_graph(ranks, directed, kernel):
    a_hat = normalized_adjacency(make_graph(N, EDGES, SEED, directed))
    assert (abs(a_hat - a_hat.T).max() > 0) == directed  # the directed graph really is not symmetric
    found = run_ranks(ranks, lambda t: rank_gradient(t, directed, kernel))
    grad = np.zeros((N, WIDTH))
    for rank in found:
        grad[rank["ids"]] = rank["grad"]
    rng = np.random.default_rng(SEED)
    h_global, g_global = rng.standard_normal((2, N, WIDTH))
    h = torch.from_numpy(h_global).requires_grad_()
    (torch.from_numpy(a_hat.toarray()) @ h).backward(torch.from_numpy(g_global))
    np.testing.assert_allclose(grad, h.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert [rank["reuses_owned"] for rank in found] == [not directed] * ranks
