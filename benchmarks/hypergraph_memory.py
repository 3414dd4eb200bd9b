"""Memory of building the column-net hypergraph (the input handed to the partitioner).

Measures the resident memory added by `column_net` and the per-net views that
Mt-KaHyPar's Python API takes, against the size of Â's CSR arrays.

    python benchmarks/hypergraph_memory.py --graph synthetic:rmat,scale=20,edge_factor=10
"""

from __future__ import annotations

import argparse
import gc
import time

from distgcn.data import load_graph
from distgcn.graph import normalized_adjacency
from partition.hypergraph import _nets_as_list, column_net


def resident_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=20,edge_factor=10")
    args = parser.parse_args()
    graph = load_graph(args.graph)
    a_hat = normalized_adjacency(graph.adj)
    del graph
    gc.collect()
    matrix_bytes = a_hat.data.nbytes + a_hat.indices.nbytes + a_hat.indptr.nbytes
    before = resident_bytes()
    start = time.perf_counter()
    indptr, pins, weights = column_net(a_hat)
    nets = _nets_as_list(indptr, pins)
    extra = resident_bytes() - before
    print(f"n={a_hat.shape[0]} nnz={a_hat.nnz} CSR of Â={matrix_bytes / 1e6:.0f} MB; hypergraph and net views "
          f"added {extra / 1e6:.0f} MB ({extra / matrix_bytes:.2f}x) in {time.perf_counter() - start:.1f} s "
          f"for {len(nets)} nets")


if __name__ == "__main__":
    main()
