"""The backward's halo products: scipy's transpose product (a CSC view, one thread) against ours.

In the backward pass each rank forms, for the halo rows, (halo block)ᵀ · G
before it can send them back (distgcn/spmm/product.py); with a random partition most
of a rank's entries are in its halo block. ``--spmm-kernel scipy`` (and, below
csr_kernel.MIN_WIDTH columns, ``numba``) multiplies by the CSC view of the
block's own arrays on one thread; ``numba`` from MIN_WIDTH columns runs
``csr_kernel.add_transpose_product`` on every thread, without storing a
transpose. This script builds rank 0's halo block of a random ``--parts``-way
partition (its rows, the columns other ranks own that it uses) and times both
as the runtime calls them (out += Bᵀ G), in ``--rounds`` interleaved rounds of
``--repeats`` calls; a time is the median of the rounds' medians.

    python benchmarks/halo_transpose.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz \
        --symmetrize --parts 2,4 --widths 8,16,64 --threads 1 --name slashdot-t1 \
        --results-dir RESULTS

writes RESULTS/halo-transpose-NAME.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from spmm_kernels import (
    timed,  # the median of repeated calls, as that benchmark times its kernels
)

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.kernels import allocator
from distgcn.kernels import csr as csr_kernel

ROOT = Path(__file__).resolve().parents[1]


def halo_block(a: sp.csr_matrix, parts: int, seed: int) -> sp.csr_matrix:
    """Rank 0's rows of ``a`` restricted to the columns the other ranks own and rank 0 uses (sorted, int32)."""
    owner = np.random.default_rng(seed).integers(0, parts, a.shape[0])
    rows = a[np.flatnonzero(owner == 0)]
    block = rows[:, np.flatnonzero(owner != 0)].tocsr()
    used = np.unique(block.indices)
    block = block[:, used].tocsr()
    block.sort_indices()
    return sp.csr_matrix((block.data, block.indices.astype(np.int32), block.indptr.astype(np.int32)),
                         shape=block.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=18,edge_factor=16")
    parser.add_argument("--symmetrize", action="store_true")
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--widths", default="8,16,64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", required=True, help="results go to RESULTS/halo-transpose-NAME.{json,md}")
    parser.add_argument("--results-dir", type=Path, required=True, metavar="RESULTS",
                        help="folder for the results (made if missing)")
    args = parser.parse_args()
    allocator.prefer_huge_pages()  # as in a train process
    import torch

    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    a = normalized_adjacency(load_graph(args.graph, symmetrize=args.symmetrize).adj, dtype=np.float32)
    rows = []
    for parts in map(int, args.parts.split(",")):
        block = halo_block(a, parts, args.seed)
        for width in map(int, args.widths.split(",")):
            g = torch.randn(block.shape[0], width).numpy()
            out = torch.zeros(block.shape[1], width).numpy()
            bounds: dict[int, np.ndarray] = {}
            ours = np.zeros_like(out)
            csr_kernel.add_transpose_product(block.indptr, block.indices, block.data, g, ours, bounds)
            np.testing.assert_allclose(ours, block.T @ g, rtol=1e-4, atol=1e-5)  # the same product
            candidates = {
                "scipy": lambda: np.add(out, block.T @ g, out=out),
                "ours": lambda: csr_kernel.add_transpose_product(block.indptr, block.indices, block.data, g, out,
                                                                 bounds),
            }
            samples: dict[str, list[float]] = {kernel: [] for kernel in candidates}
            for _ in range(args.rounds):
                for kernel, fn in candidates.items():
                    samples[kernel].append(timed(fn, args.repeats) * 1e3)
            scipy_ms, ours_ms = (statistics.median(samples[k]) for k in ("scipy", "ours"))
            rows.append({"parts": parts, "block": list(block.shape), "nnz": int(block.nnz), "width": width,
                         "scipy_ms": round(scipy_ms, 3), "ours_ms": round(ours_ms, 3),
                         "speedup": round(scipy_ms / ours_ms, 2)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    header = {"command": " ".join(["python", "benchmarks/halo_transpose.py", *sys.argv[1:]]),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
              "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats, "load_start": load_start,
              "load_end": os.getloadavg()}
    out_dir = args.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"halo-transpose-{args.name}.json").write_text(json.dumps({"header": header, "rows": rows},
                                                                          indent=1) + "\n")
    lines = [f"# Halo transpose products: {args.graph}", "", f"`{header['command']}`", "",
             f"{header['when']}, {args.threads} thread(s), float32, medians of {args.rounds} interleaved rounds of "
             f"{args.repeats} calls; load average {load_start} at start, {header['load_end']} at end.", "",
             "| parts | halo block | nonzeros | width | scipy (CSC view) ms | ours ms | scipy / ours |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['parts']} | {r['block'][0]} × {r['block'][1]} | {r['nnz']} | {r['width']} | {r['scipy_ms']} | "
              f"{r['ours_ms']} | {r['speedup']} |" for r in rows]
    (out_dir / f"halo-transpose-{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
