"""Which kernel should do the local sparse x dense products, and how close to memory bandwidth do they get?

For Y = Â H on a graph's normalized adjacency, in the vertex orders given
(``natural``: ids as loaded; ``rcm``: reverse Cuthill-McKee, what ``distgcn
partition`` writes by default), compares torch CSR (``sparse_csr_tensor @
dense``, int64 indices as ``--spmm-kernel torch`` stores them; ``torch32``:
over the int32 arrays in place, what ``auto`` multiplies below ``csr_kernel.MIN_WIDTH`` columns),
scipy CSR (``csr @ ndarray``), python-graphblas (``mxm`` with a full dense
matrix; the optional extra ``bench``, not a dependency of distgcn) and distgcn's
own kernel (``distgcn/kernels/csr.py``, ``--spmm-kernel numba``), all on
``--threads`` threads (scipy has one). The same run measures the
machine's memory bandwidth (a copy over 512 MiB on ``--threads`` threads, numpy's one-thread copy beside it,
and numpy's sum) and reports each kernel's effective bandwidth, as a share of the copy on the same threads, two
ways:

- ``compulsory``: the matrix (values, column indices, row pointers), every
  row of H read once and Y written once: the traffic of a perfect cache;
- ``gathered``: as above, but a row of H read once per nonzero that uses it:
  the traffic with no reuse at all.

    python benchmarks/spmm_kernels.py --graph synthetic:rmat,scale=20,edge_factor=10 --widths 16,64 \
        --threads 1 --name rmat20 --results-dir RESULTS

writes RESULTS/spmm-NAME.{json,md}.

Each product writes a fresh result (Y = Â H, not Y += Â H), as the owned
block's product in ``train`` does. H and Y are torch allocations in huge
pages, as in a ``train`` process (distgcn/kernels/allocator.py; ``--memory plain``:
numpy arrays in 4 KiB pages). Kernels are timed in ``--rounds`` interleaved
rounds of ``--repeats`` calls each, so that a change in the machine's load
hits every kernel alike; a kernel's time is the median of its rounds'
medians, and the copy bandwidth the best of one copy per round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.kernels import allocator
from distgcn.kernels import csr as csr_kernel
from distgcn.runtime.threads import follow_torch_threads

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def array(shape: tuple[int, ...], dtype: np.dtype, memory: str) -> np.ndarray:
    """An uninitialised array: torch's memory (``train``: huge pages, as in a train process) or numpy's
    (``plain``: 4 KiB pages)."""
    if memory == "plain":
        return np.empty(shape, dtype=dtype)
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype.name)).numpy()


@numba.njit(parallel=True, nogil=True, cache=True)
def parallel_copy(source: np.ndarray, target: np.ndarray) -> None:
    """target[:] = source on numba's threads, each a contiguous run: the copy a kernel on that many threads could do."""
    for i in numba.prange(source.shape[0]):
        target[i] = source[i]


class Bandwidth:
    """GB/s of a large copy (read + write) and a large sum (read only): the best of the samples taken.

    The copy runs on the kernels' threads (``copy``, the figure percentages are taken of) and on one thread
    (numpy's, ``copy_one_thread``): one core alone does not reach what two or more draw from memory (19.6
    against 29.5 GB/s on a two-core VM), so a two-thread product measured against a
    one-thread copy looked 1.5x closer to the bandwidth than it was.
    """

    def __init__(self, memory: str) -> None:
        self.a = array((2**27,), np.dtype(np.float32), memory)
        self.a[:] = 1
        self.b = array((2**27,), np.dtype(np.float32), memory)
        self.copy_s = self.copy_one_thread_s = self.read_s = float("inf")
        follow_torch_threads()
        parallel_copy(self.a, self.b)  # compiled before it is timed, and checked
        if not np.array_equal(self.a, self.b):
            raise AssertionError("parallel_copy did not copy")

    def sample(self) -> None:
        follow_torch_threads()
        self.copy_s = min(self.copy_s, timed(lambda: parallel_copy(self.a, self.b), 1))
        self.copy_one_thread_s = min(self.copy_one_thread_s, timed(lambda: np.copyto(self.b, self.a), 1))
        self.read_s = min(self.read_s, timed(self.a.sum, 1))

    def gbs(self) -> dict[str, float]:
        return {"copy_gbs": 2 * self.a.nbytes / self.copy_s / 1e9,
                "copy_one_thread_gbs": 2 * self.a.nbytes / self.copy_one_thread_s / 1e9,
                "read_gbs": self.a.nbytes / self.read_s / 1e9}


def traffic(a: sp.csr_matrix, width: int, itemsize: int) -> dict[str, int]:
    matrix = a.nnz * (itemsize + a.indices.itemsize) + a.indptr.nbytes
    rows_read = np.unique(a.indices).size
    return {"compulsory": matrix + (rows_read + a.shape[0]) * width * itemsize,
            "gathered": matrix + (a.nnz + a.shape[0]) * width * itemsize}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=18,edge_factor=16")
    parser.add_argument("--symmetrize", action="store_true")
    parser.add_argument("--widths", default="16,64")
    parser.add_argument("--orders", default="natural,rcm")
    parser.add_argument("--kernels", default="torch,torch32,scipy,numba",
                        help="comma list of torch, torch32, scipy, numba and graphblas (graphblas needs pip install -e '.[bench]')")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="calls per kernel in each round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over all kernels")
    parser.add_argument("--memory", choices=["train", "plain"], default="train",
                        help="train: H and Y in torch's huge-page memory, as train allocates them; plain: numpy's")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--name", required=True, help="results go to RESULTS/spmm-NAME.{json,md}")
    parser.add_argument("--results-dir", type=Path, required=True, metavar="RESULTS",
                        help="folder for the results (made if missing)")
    args = parser.parse_args()
    if args.memory == "train":
        allocator.prefer_huge_pages()  # must precede torch's import, as in the train command
    import torch

    torch.set_num_threads(args.threads)
    kernels = args.kernels.split(",")
    if "graphblas" in kernels:
        import graphblas as gb

        gb.ss.config["nthreads"] = args.threads
    dtype = np.dtype(args.dtype)
    load_start = os.getloadavg()
    bandwidth = Bandwidth(args.memory)
    natural = normalized_adjacency(load_graph(args.graph, symmetrize=args.symmetrize).adj, dtype=dtype)
    rows = []
    for order in args.orders.split(","):
        if order == "rcm":
            start = time.perf_counter()
            perm = reverse_cuthill_mckee((abs(natural) + abs(natural.T)).tocsr(), symmetric_mode=True)
            a = natural[perm][:, perm].tocsr()
            order_s = time.perf_counter() - start
        else:
            a, order_s = natural, 0.0
        a.sort_indices()
        for width in (int(w) for w in args.widths.split(",")):
            h = array((a.shape[0], width), dtype, args.memory)
            h[:] = np.random.default_rng(0).standard_normal((a.shape[0], width)).astype(dtype)
            out = array((a.shape[0], width), dtype, args.memory)
            reference = a @ h
            h_torch, out_torch = torch.from_numpy(h), torch.from_numpy(out)
            candidates = {"scipy": lambda: a @ h}
            if "torch" in kernels:
                a_torch = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                                  torch.from_numpy(a.indices.astype(np.int64)),
                                                  torch.from_numpy(a.data), size=a.shape, check_invariants=False)
                candidates["torch"] = lambda: torch.mm(a_torch, h_torch, out=out_torch)
            if "torch32" in kernels:
                a_view = torch.sparse_csr_tensor(torch.from_numpy(a.indptr), torch.from_numpy(a.indices),
                                                 torch.from_numpy(a.data), size=a.shape, check_invariants=False)
                candidates["torch32"] = lambda: torch.mm(a_view, h_torch, out=out_torch)
            if "graphblas" in kernels:
                a_gb, h_gb = gb.io.from_scipy_sparse(a), gb.Matrix.from_dense(h)
                candidates["graphblas"] = lambda: a_gb.mxm(h_gb, gb.semiring.plus_times).new()
            if "numba" in kernels:  # distgcn's kernel, writing Y as the owned block's product does
                candidates["numba"] = partial(csr_kernel.add_product, a.indptr, a.indices, a.data, h, out, {},
                                              accumulate=False)
            for kernel in [k for k in kernels if k in candidates]:  # each once: compiled, and right
                result = candidates[kernel]()
                result = out if result is None or isinstance(result, torch.Tensor) else result
                if kernel != "graphblas":
                    np.testing.assert_allclose(result, reference, rtol=1e-4, atol=1e-5)
            samples: dict[str, list[float]] = {k: [] for k in kernels if k in candidates}
            for _ in range(args.rounds):
                bandwidth.sample()
                for kernel in samples:
                    samples[kernel].append(timed(candidates[kernel], args.repeats))
            moved = traffic(a, width, dtype.itemsize)
            for kernel, times in samples.items():
                seconds = statistics.median(times)
                row = {"graph": args.graph, "n": a.shape[0], "nnz": int(a.nnz), "order": order,
                       "order_s": round(order_s, 3), "width": width, "kernel": kernel, "ms": round(seconds * 1e3, 2),
                       "best_round_ms": round(min(times) * 1e3, 2), "worst_round_ms": round(max(times) * 1e3, 2),
                       **{f"{k}_gbs": round(v / seconds / 1e9, 2) for k, v in moved.items()}}
                rows.append(row)
    copy_gbs = bandwidth.gbs()["copy_gbs"]
    for row in rows:  # against the best copy of the whole run
        for k in ("compulsory", "gathered"):
            row[f"{k}_pct"] = round(100 * row[f"{k}_gbs"] / copy_gbs, 1)
        print(json.dumps(row), file=sys.stderr, flush=True)
    header = {"command": " ".join(["python", "benchmarks/spmm_kernels.py", *sys.argv[1:]]),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
              "threads": args.threads, "dtype": args.dtype, "memory": args.memory, "rounds": args.rounds,
              "repeats": args.repeats, "load_start": load_start, "load_end": os.getloadavg(),
              **{k: round(v, 2) for k, v in bandwidth.gbs().items()}}
    out_dir = args.results_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"spmm-{args.name}.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    lines = [f"# SpMM kernels: {args.graph}", "", f"`{header['command']}`", "",
             f"{header['when']}, {args.threads} thread(s), {args.dtype}, {args.memory} memory, medians of "
             f"{args.rounds} interleaved rounds of {args.repeats} calls; memory bandwidth (best copy): copy on "
             f"{args.threads} thread(s) {header['copy_gbs']} GB/s (on 1 thread {header['copy_one_thread_gbs']} GB/s), "
             f"read (1 thread) {header['read_gbs']} GB/s; load average {load_start} at start, "
             f"{header['load_end']} at end. % = effective GB/s over the copy bandwidth on {args.threads} "
             "thread(s).", "",
             "| order | width | kernel | ms (median) | rounds: best, worst ms | compulsory GB/s | % "
             "| gathered GB/s | % |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['order']} | {r['width']} | {r['kernel']} | {r['ms']} | {r['best_round_ms']}, "
              f"{r['worst_round_ms']} | {r['compulsory_gbs']} | {r['compulsory_pct']} | {r['gathered_gbs']} | "
              f"{r['gathered_pct']} |" for r in rows]
    (out_dir / f"spmm-{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
