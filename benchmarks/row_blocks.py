"""Do the SpMM's threads finish together? Row blocks of equal work handed out before the loop, against blocks the
threads claim as they go.

Takes a graph's normalized adjacency in RCM order (as benchmarks/spmm_kernels.py) and times Y = Â·H written,
float32, with distgcn's loop (``csr_kernel.add_product``, as ``train``
does), on ``--threads`` threads, with its row blocks cut two ways, alternated in one process:

- ``split``: one block per thread, which is what numba's ``prange`` made of any number of blocks before the
  threads claimed them (it hands each thread an equal run of iterations when the loop starts);
- ``claimed``: ``BLOCKS_PER_THREAD`` blocks per thread, each taken by the next thread free.

With ``--threads 1`` it instead times each of the two-thread split's halves alone: equal nonzeros plus rows, and
how far apart their times are.

    python benchmarks/row_blocks.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz \
        --symmetrize --widths 16,64 --threads 2
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
    parser = product_arguments(__doc__.splitlines()[0], threads=2)
    args = parser.parse_args()
    a = rcm_matrix_on_threads(args)
    halves = csr_kernel.row_blocks(a.indptr, 2)
    if args.threads == 1:
        variants = {f"half {h}": halves[h:h + 2] for h in (0, 1)}
    else:
        variants = {"split": csr_kernel.row_blocks(a.indptr, args.threads),
                    "claimed": csr_kernel.row_blocks(a.indptr, args.threads * csr_kernel.BLOCKS_PER_THREAD)}
    for width in (int(w) for w in args.widths.split(",")):
        h = torch.empty((a.shape[0], width)).numpy()
        h[:] = np.random.default_rng(width).random(h.shape, dtype=np.float32)
        out = torch.empty((a.shape[0], width)).numpy()
        calls = {}
        for name, bounds in variants.items():
            first, stop = int(bounds[0]), int(bounds[-1])
            # the block's rows as a matrix of their own, bounds shifted to start at 0
            indptr = a.indptr[first:stop + 1] - a.indptr[first]
            indices, data = (array[a.indptr[first]:a.indptr[stop]] for array in (a.indices, a.data))
            cache = {(csr_kernel.threads(), csr_kernel.BLOCKS_PER_THREAD): bounds - first}

            def call(indptr=indptr, indices=indices, data=data, cache=cache, rows=out[first:stop]) -> None:
                csr_kernel.add_product(indptr, indices, data, h, rows, cache, accumulate=False)

            calls[name] = call
        row = {"graph": args.graph, "n": a.shape[0], "nnz": int(a.nnz), "width": width, "threads": args.threads,
               "blocks_per_thread": csr_kernel.BLOCKS_PER_THREAD, "load": os.getloadavg()[0]}
        if args.threads == 1:
            row["rows"] = {name: int(b[1] - b[0]) for name, b in variants.items()}
            row["nnz_per_half"] = {name: int(a.indptr[b[1]] - a.indptr[b[0]]) for name, b in variants.items()}
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):  # alternated, so that a slow spell of the machine moves both alike
            for name, call in calls.items():
                times[name].append(median_of_round_medians(call, args.repeats, 1))
        row["ms"] = {name: round(float(np.median(samples)), 3) for name, samples in times.items()}
        row["ms_per_round"] = {name: [round(t, 3) for t in samples] for name, samples in times.items()}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
