"""What does the hardware itself allow a product Y = Â·H, whatever the code? Bounds for the roofline target of #15.

For a graph's normalized adjacency in RCM order (as benchmarks/spmm_kernels.py), float32, each width:

- ``allowance``: the time at which the product would reach 40 % of the copy bandwidth over its compulsory bytes
  (the matrix, each row of H once, Y once): the target;
- ``arithmetic``: one fused multiply-add per nonzero and column at this core's measured peak (a loop of
  independent vector multiply-adds, on ``--threads`` threads);
- ``memory``: the fewest bytes any product that walks the rows in order must move, at the copy bandwidth
  measured in the same run: the matrix and Y once, plus every row of H the cache cannot still hold when it is
  needed again, counted with Belady's optimal replacement (evict the row used again furthest ahead) for a cache
  of ``--cache-mib`` given to H alone (optimistic: the matrix and Y pass through the same cache);
- ``measured``: distgcn's kernel on the same matrix (as ``train`` runs it).

A kernel can be no faster than the larger of the arithmetic and memory bounds; where both are under the allowance
the target is the code's to meet, not excluded by the machine.

    python benchmarks/spmm_bounds.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz \
        --symmetrize --widths 16,64 --threads 1
"""

from __future__ import annotations

import heapq
import json
import os

from matrices import product_arguments, rcm_matrix_on_threads
from spmm_kernels import Bandwidth, traffic
from timing import median_of_round_medians

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from distgcn.kernels import csr as csr_kernel  # noqa: E402
from distgcn.kernels import llvm_intrinsics as llvm  # noqa: E402

TARGET = 0.40
PEAK_COLUMNS = 64
"""Sums kept in registers by the peak loop: eight 32-byte registers of float32, enough independent multiply-adds
to cover their latency on current x86 cores."""


@numba.njit(parallel=True, nogil=True, fastmath={"contract"})
def _multiply_adds(steps: int, scale: np.float32, row: np.ndarray, totals: np.ndarray) -> None:
    """steps x PEAK_COLUMNS multiply-adds per thread into sums kept in registers, of one row that stays in L1."""
    for t in numba.prange(totals.shape[0]):
        sums_pointer = llvm.stack_buffer(PEAK_COLUMNS, np.float32)
        sums = numba.carray(sums_pointer, PEAK_COLUMNS)
        for c in range(PEAK_COLUMNS):
            sums[c] = 0
        for _ in range(steps):
            llvm.add_scaled_row(sums_pointer, row, 0, scale, PEAK_COLUMNS)
        total = np.float32(0)
        for c in range(PEAK_COLUMNS):
            total += sums[c]
        totals[t] = total  # kept, so the loop is not removed


def peak_multiply_adds_per_second(threads: int) -> float:
    """Multiply-adds per second on ``threads`` threads (the median of five runs of 0.1-0.3 s)."""
    row, totals = np.ones((1, PEAK_COLUMNS), dtype=np.float32), np.zeros(threads, dtype=np.float32)
    steps = 20_000_000
    _multiply_adds(10, np.float32(0.5), row, totals)  # compiled before it is timed
    ms = median_of_round_medians(lambda: _multiply_adds(steps, np.float32(0.5), row, totals), 1, 5)
    return steps * PEAK_COLUMNS * threads / (ms / 1e3)


def next_uses(indices: np.ndarray) -> np.ndarray:
    """For each nonzero, the position of the next nonzero that gathers the same row of H (len(indices): none)."""
    following = np.empty(indices.shape[0], dtype=np.int64)
    order = np.argsort(indices, kind="stable")  # each row's uses, in order
    following[order[:-1]] = order[1:]
    last_of_row = np.r_[indices[order][1:] != indices[order][:-1], True]
    following[order[last_of_row]] = indices.shape[0]
    return following


def fewest_row_fetches(indices: np.ndarray, capacity: int) -> int:
    """Rows of H fetched by the gathers in ``indices`` with a cache of ``capacity`` rows and optimal replacement."""
    following = next_uses(indices)
    next_use: dict[int, int] = {}  # cached row -> its next use
    furthest: list[tuple[int, int]] = []  # (-next use, row), stale entries skipped when popped
    fetches = 0
    for position, row in enumerate(indices.tolist()):
        if row not in next_use:
            fetches += 1
            if len(next_use) >= capacity:
                while True:
                    use, victim = heapq.heappop(furthest)
                    if next_use.get(victim) == -use:
                        del next_use[victim]
                        break
        next_use[row] = int(following[position])
        heapq.heappush(furthest, (-next_use[row], row))
    return fetches


def main() -> None:
    parser = product_arguments(__doc__.splitlines()[0])
    parser.add_argument("--cache-mib", default="0.5,8.5", help="cache sizes for H (e.g. one core's L2; L2 + L3)")
    args = parser.parse_args()
    a = rcm_matrix_on_threads(args)
    bandwidth = Bandwidth("train")
    for _ in range(3):
        bandwidth.sample()
    copy_bytes_per_s = bandwidth.gbs()["copy_gbs"] * 1e9
    multiply_adds_per_s = peak_multiply_adds_per_second(csr_kernel.threads())
    for width in (int(w) for w in args.widths.split(",")):
        row_bytes = 4 * width
        compulsory = traffic(a, width, 4)["compulsory"]
        once = compulsory - np.unique(a.indices).size * row_bytes  # the matrix and Y
        h = torch.empty((a.shape[0], width)).numpy()
        h[:] = 1
        out = torch.empty((a.shape[0], width)).numpy()
        bounds: dict = {}

        def product() -> None:
            csr_kernel.add_product(a.indptr, a.indices, a.data, h, out, bounds, accumulate=False)

        row = {"graph": args.graph, "nnz": int(a.nnz), "rows": int(a.shape[0]), "width": width,
               "threads": args.threads, "load": os.getloadavg()[0], "copy_gbs": round(copy_bytes_per_s / 1e9, 2),
               "peak_gflops": round(2 * multiply_adds_per_s / 1e9, 1), "compulsory_mb": round(compulsory / 1e6, 1),
               "allowance_ms": round(compulsory / (TARGET * copy_bytes_per_s) * 1e3, 2),
               "arithmetic_ms": round(a.nnz * width / multiply_adds_per_s * 1e3, 2)}
        for mib in (float(m) for m in args.cache_mib.split(",")):
            fetches = fewest_row_fetches(a.indices, int(mib * 2**20) // row_bytes)
            row[f"memory_ms_cache_{mib}MiB"] = round((once + fetches * row_bytes) / copy_bytes_per_s * 1e3, 2)
            row[f"h_fetched_per_row_cache_{mib}MiB"] = round(fetches / a.shape[0], 2)
        row["measured_ms"] = round(median_of_round_medians(product, args.repeats, args.rounds), 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
