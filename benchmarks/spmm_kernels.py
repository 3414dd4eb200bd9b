"""Which library should do the local sparse x dense products? Measure, on the same matrices.

Compares torch CSR (`torch.sparse_csr_tensor @ dense`), scipy CSR (`csr @ ndarray`)
and python-graphblas (`mxm` with a full dense matrix) for Y = Â H on a graph's
normalized adjacency, for several widths, with the thread count given.

    python benchmarks/spmm_kernels.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz \
        --widths 16,64,256 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from distgcn.data import load_graph
from distgcn.graph import normalized_adjacency


def timed(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=18,edge_factor=16")
    parser.add_argument("--widths", default="16,64,256")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import graphblas as gb

    gb.ss.config["nthreads"] = args.threads
    dtype = np.dtype(args.dtype)
    a = normalized_adjacency(load_graph(args.graph).adj, dtype=dtype)
    a_torch = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                      torch.from_numpy(a.indices.astype(np.int64)),
                                      torch.from_numpy(a.data), size=a.shape, check_invariants=False)
    a_gb = gb.io.from_scipy_sparse(a)
    rows = []
    for width in (int(w) for w in args.widths.split(",")):
        h = np.random.default_rng(0).standard_normal((a.shape[0], width)).astype(dtype)
        h_torch = torch.from_numpy(h)
        h_gb = gb.Matrix.from_dense(h)
        reference = a @ h
        results = {
            "torch_csr": timed(lambda: a_torch @ h_torch, args.repeats),
            "scipy_csr": timed(lambda: a @ h, args.repeats),
            "graphblas": timed(lambda: a_gb.mxm(h_gb, gb.semiring.plus_times).new(), args.repeats),
        }
        np.testing.assert_allclose((a_torch @ h_torch).numpy(), reference, rtol=1e-4, atol=1e-5)
        row = {"graph": args.graph, "n": a.shape[0], "nnz": int(a.nnz), "width": width, "threads": args.threads,
               **{k: round(v * 1e3, 2) for k, v in results.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
