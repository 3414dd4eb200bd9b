"""How fast can distgcn's SpMM loop be on this core, whatever the memory? The same matrix with its gathers served
from ever larger regions of H.

Takes a graph's normalized adjacency in RCM order (as benchmarks/spmm_kernels.py) and keeps its row pointers,
values and the number of nonzeros per row, but maps every column index j to ``j mod M``: with M = 1 every
nonzero gathers the same row of H (from L1), with M rows of H fitting L2 or L3 the gathers come from there, and
with M = n it is the real product. The gap between M = 1 and M = n is what the caches and memory cost; the time
at M = 1 is the loop's own floor (its loads, multiply-adds and prefetches). Y = Â·H written, float32, the
``numba`` kernel as ``train`` runs it, on ``--threads`` threads.

    python benchmarks/spmm_floor.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz \
        --symmetrize --widths 16,64 --threads 1
"""

from __future__ import annotations

import json
import os

from timing import median_of_round_medians

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

import numpy as np  # noqa: E402
import torch  # noqa: E402
from matrices import product_arguments, rcm_matrix_on_threads  # noqa: E402

from distgcn.kernels import csr as csr_kernel  # noqa: E402


def main() -> None:
    parser = product_arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows-of-h", default="1,256,4096,16384,65536",
                        help="the M values (rows of H gathered from); the real product (M = n) is always added")
    args = parser.parse_args()
    a = rcm_matrix_on_threads(args)
    spans = [int(m) for m in args.rows_of_h.split(",") if int(m) < a.shape[0]] + [a.shape[0]]
    for width in (int(w) for w in args.widths.split(",")):
        h = torch.empty((a.shape[0], width)).numpy()
        h[:] = 1
        out = torch.empty((a.shape[0], width)).numpy()
        row = {"graph": args.graph, "nnz": int(a.nnz), "width": width, "threads": args.threads,
               "load": os.getloadavg()[0]}
        for span in spans:
            indices = (a.indices % span).astype(np.int32)
            bounds: dict = {}

            def product(indices=indices, bounds=bounds) -> None:
                csr_kernel.add_product(a.indptr, indices, a.data, h, out, bounds, accumulate=False)

            product()  # compiled before timing
            ms = median_of_round_medians(product, args.repeats, args.rounds)
            row[f"M={span}"] = {"ms": round(ms, 2), "ns_per_nonzero": round(ms * 1e6 / a.nnz, 2)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
