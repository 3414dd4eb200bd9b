"""Layer 0 with a sparse input: dense keyed dropout + X·W against SparseRows, forward and backward.

Both compute the same dropout(X)·W⁰ and its weight gradient (tests/nn/test_sparse_input.py);
this measures what each costs on a real feature matrix, in one process, interleaved.

    python benchmarks/sparse_input.py --graph ../shared/datasets/musae_facebook --out 16 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.nn.dropout import keyed_dropout
from distgcn.nn.sparse_input import SparseRows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--out", type=int, default=16, help="width of W⁰'s output")
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    graph, _ = prepare_graph(GraphOptions(spec=args.graph))
    x = np.ascontiguousarray(graph.features, dtype=np.float32)
    ids = np.arange(x.shape[0])
    weight = torch.randn((x.shape[1], args.out), requires_grad=True)
    grad = torch.randn((x.shape[0], args.out))
    dense = torch.from_numpy(x)
    start = time.perf_counter()
    sparse = SparseRows(x, ids, torch.float32)
    setup_s = time.perf_counter() - start

    def dense_step(key: int) -> None:
        (keyed_dropout(dense, ids, args.dropout, key) @ weight).backward(grad)

    def sparse_step(key: int) -> None:
        sparse.matmul(weight, args.dropout, key).backward(grad)

    times: dict[str, list[float]] = {"dense": [], "sparse": []}
    for key in range(args.repeats + 1):
        for name, step in (("dense", dense_step), ("sparse", sparse_step)):
            start = time.perf_counter()
            step(key)
            if key:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(json.dumps({"graph": args.graph, "shape": list(x.shape), "density": np.count_nonzero(x) / x.size,
                      "out": args.out, "threads": args.threads, "setup_s": round(setup_s, 3),
                      **{f"{k}_s": round(v, 4) for k, v in medians.items()},
                      "speedup": round(medians["dense"] / medians["sparse"], 1), "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
