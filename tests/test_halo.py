"""The halo exchange moves exactly the rows the partition requires, and the SpMM is exact.

The expected rows and messages are counted here by brute force from A and the
part vector, independently of the shard builder and the runtime.
"""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, run_mpi_script


def brute_force(adj_rows: list[list[int]], parts: list[int], nparts: int):
    """Rows each rank must receive (sets of global ids) and the ranks it receives from."""
    needed = [set() for _ in range(nparts)]
    for v, cols in enumerate(adj_rows):
        for u in cols:
            if parts[u] != parts[v]:
                needed[parts[v]].add(u)
    senders = [{parts[u] for u in need} for need in needed]
    return needed, senders


def run_check(tmp_path, ranks: int, n: int, edges: int, seed: int, mode: str, directed: bool, kernel: str) -> dict:
    return run_mpi_script("spmm_check.py", ranks, tmp_path / "result.json", str(n), str(edges), str(seed), mode,
                          "1" if directed else "0", kernel)


@pytest.mark.parametrize("ranks,mode,directed,kernel", [
    (2, "random", True, "torch"), (3, "contiguous", True, "scipy"), (4, "random", False, "torch"),
    (4, "skewed", True, "scipy"), (3, "random", False, "torch"),
])
def test_exchange_sends_exactly_the_required_rows(tmp_path, ranks, mode, directed, kernel):
    sys.path.insert(0, str(ROOT / "tests" / "mpi_scripts"))
    from spmm_check import make_graph  # the same seeded graph the ranks built

    n, edges, seed = 120, 500, 7
    result = run_check(tmp_path, ranks, n, edges, seed, mode, directed, kernel)
    adj = make_graph(n, edges, seed, directed)
    adj_rows = [list(adj.indices[adj.indptr[v]:adj.indptr[v + 1]]) for v in range(n)]
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
    assert result["y_error"] < 1e-12
    assert result["gt_error"] < 1e-12
