"""The halo exchange moves exactly the rows the partition requires, and the SpMM is exact.

The expected rows and messages are counted here by brute force from A and the
part vector, independently of the shard builder and the runtime. The ranks run
tests/mpi_scripts/spmm_check.py's real plan, exchanger and SpMM on the
in-process transport over the whole grid, and under a real mpiexec once.
"""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT, run_mpi_script

from distgcn.comm.transport.inprocess import run_ranks

sys.path.insert(0, str(ROOT / "tests" / "mpi_scripts"))
from spmm_check import check_rank, make_graph  # noqa: E402 - the same code and seeded graph the ranks run

N, EDGES, SEED = 120, 500, 7


def brute_force(adj_rows: list[list[int]], parts: list[int], nparts: int):
    """Rows each rank must receive (sets of global ids) and the ranks it receives from."""
    needed = [set() for _ in range(nparts)]
    for v, cols in enumerate(adj_rows):
        for u in cols:
            if parts[u] != parts[v]:
                needed[parts[v]].add(u)
    senders = [{parts[u] for u in need} for need in needed]
    return needed, senders


def check_exchange(result: dict, ranks: int, directed: bool) -> None:
    """The ranks' findings against a brute-force count on the same graph and part vector."""
    adj = make_graph(N, EDGES, SEED, directed)
    adj_rows = [list(adj.indices[adj.indptr[v]:adj.indptr[v + 1]]) for v in range(N)]
    needed, senders = brute_force(adj_rows, result["parts"], ranks)

    assert all(result["halo_ok"]), "halo buffer rows differ from the rows named in the plan"
    assert [set(x) for x in result["needed"]] == needed
    # One forward exchange: every rank sends the rows others need from it, once per peer.
    assert sum(result["forward_rows"]) == sum(len(x) for x in needed)
    sent_by = [0] * ranks
    for p in range(ranks):
        for u in needed[p]:
            sent_by[result["parts"][u]] += 1
    assert result["forward_rows"] == sent_by
    assert sum(result["forward_messages"]) == sum(len(s) for s in senders)
    # forward + matmul + transpose: three exchanges with the same total volume each.
    assert sum(result["total_rows"]) == 3 * sum(len(x) for x in needed)
    assert sum(result["total_messages"]) == 3 * sum(len(s) for s in senders)
    # Bytes per rank: two forward exchanges send its rows others need, the transpose sends back one partial per
    # halo row it received; each row is `width` float64 values. Every call counts as an exchange.
    assert result["total_bytes"] == [(2 * sent_by[p] + len(needed[p])) * result["width"] * 8 for p in range(ranks)]
    assert result["exchanges"] == [3] * ranks
    assert result["n_halo"] == [len(x) for x in needed]
    assert result["y_error"] < 1e-12
    assert result["gt_error"] < 1e-12


@pytest.mark.parametrize("kernel", ["torch", "scipy"])
@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("mode", ["random", "contiguous", "skewed"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_exchange_sends_exactly_the_required_rows(ranks, mode, directed, kernel):
    result = run_ranks(ranks, lambda t: check_rank(t, N, EDGES, SEED, mode, directed, kernel))[0]
    check_exchange(result, ranks, directed)


def test_exchange_sends_exactly_the_required_rows_under_mpiexec(tmp_path):
    """The same check on real MPI ranks (MPITransport's Isend/Irecv/Waitany)."""
    ranks, mode, directed, kernel = 3, "skewed", True, "scipy"
    result = run_mpi_script("spmm_check.py", ranks, tmp_path / "result.json", str(N), str(EDGES), str(SEED), mode,
                            "1" if directed else "0", kernel)
    check_exchange(result, ranks, directed)


@pytest.mark.parametrize("wire", [None, "bfloat16"])
def test_the_halo_buffer_is_allocated_once_and_serves_the_backward_partials_too(wire):
    """What the memory model counts: per width, one halo and one send buffer (and one of each in a narrower wire
    dtype) that every forward and reverse exchange reuses; the partials go in the forward's halo buffer."""
    import numpy as np
    import torch
    from spmm_check import make_parts

    from distgcn.comm.counters import CommCounters
    from distgcn.data.graph import Graph, normalized_adjacency
    from distgcn.shard.cut import iter_shards
    from distgcn.spmm.halo import HaloExchanger, HaloPlan

    def rank_main(transport) -> tuple[list[int], int]:
        adj = make_graph(N, EDGES, SEED, True)
        shard = list(iter_shards(Graph(adj=adj, vertex_ids=np.arange(N)), normalized_adjacency(adj),
                                 make_parts(N, 2, "random", SEED), 2, "test"))[transport.rank]
        exchanger = HaloExchanger(HaloPlan.from_shard(shard), transport, CommCounters(), exchanges=True,
                                  wire_dtype=None if wire is None else getattr(torch, wire))
        starts = []
        for _ in range(2):
            exchange = exchanger.start_forward(torch.ones((shard.n_owned, 3), dtype=torch.float64))
            starts.append([rows.data_ptr() for _, rows in exchange.arrivals()][0])
            exchange.finish()
            reverse = exchanger.start_reverse(3, torch.float64, lambda k, out: starts.append(out.data_ptr()))
            reverse.add_into(torch.zeros((shard.n_owned, 3), dtype=torch.float64))
            reverse.finish()
        return starts, len(exchanger._buffers)

    for starts, buffers in run_ranks(2, rank_main):
        assert len(set(starts)) == 1, starts
        assert buffers == (2 if wire is None else 4)
