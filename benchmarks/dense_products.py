"""In which operand layouts does torch's CPU BLAS multiply a layer's activations by its weight fastest?

A GCN layer multiplies the activations X [n, k] by its weight W [k, m] going
forward, and backward computes X's gradient G·Wᵀ and the weight's Xᵀ·G, with
n the rows of a rank (10^4-10^7) and k, m the layer widths (8-256). The same
products can be asked of the BLAS in different layouts: W row-major (as torch
stores a parameter) or column-major; Xᵀ·G as one product, or as (Gᵀ·X)ᵀ.
They give the same matrix up to rounding, but the BLAS may take a different
code path for each. This times every layout of every product for the given
widths, interleaved in ``--rounds`` rounds (a change in the machine's load
hits all alike), with activations in huge pages as ``train`` allocates them,
and prints the median of the rounds' medians:

    python benchmarks/dense_products.py --rows 82168 --widths 64x8,64x64 --threads 1 --name slashdot-t1 --results-dir RESULTS

writes RESULTS/dense-NAME.{json,md}. distgcn/kernels/dense.py uses the
layouts this found fastest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch is imported, as distgcn/kernels/allocator.py does

import torch  # noqa: E402

def layouts(x: torch.Tensor, grad: torch.Tensor, weight: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """Each product of one layer, in each layout; names say product: layout."""
    column_major = weight.t().contiguous().t()  # the same [k, m] matrix, stored column by column
    return {
        "X·W: W row-major": lambda: x @ weight,
        "X·W: W column-major": lambda: x @ column_major,
        "G·Wᵀ: W row-major": lambda: grad @ weight.t(),
        "G·Wᵀ: W column-major": lambda: grad @ column_major.t(),
        "Xᵀ·G": lambda: x.t() @ grad,
        "(Gᵀ·X)ᵀ": lambda: (grad.t() @ x).t(),
    }


def time_rounds(products: dict[str, Callable[[], torch.Tensor]], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Per product, the median time of each round (seconds)."""
    for product in products.values():
        product()  # warm up: first-touch of outputs, BLAS dispatch
    medians: dict[str, list[float]] = {name: [] for name in products}
    for _ in range(rounds):
        for name, product in products.items():
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                product()
                samples.append(time.perf_counter() - start)
            medians[name].append(statistics.median(samples))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=82168, help="rows of X (Slashdot's vertices by default)")
    parser.add_argument("--widths", default="64x8,64x16,16x64,64x64,128x8",
                        help="comma list of KxM: the weight's shape, in x out")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--name", default=None, help="write RESULTS/dense-NAME.{json,md}")
    parser.add_argument("--results-dir", type=Path, default=None, metavar="RESULTS",
                        help="folder for --name's files (made if missing)")
    args = parser.parse_args()
    if args.name and args.results_dir is None:
        parser.error("--name needs --results-dir RESULTS (the folder its files go to)")
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    results = []
    for spec in args.widths.split(","):
        k, m = (int(part) for part in spec.lower().split("x"))
        x = torch.randn(args.rows, k, generator=generator, dtype=dtype)
        grad = torch.randn(args.rows, m, generator=generator, dtype=dtype)
        weight = torch.randn(k, m, generator=generator, dtype=dtype)
        for name, times in time_rounds(layouts(x, grad, weight), args.rounds, args.repeats).items():
            results.append({"k": k, "m": m, "product": name, "median_ms": statistics.median(times) * 1e3,
                            "best_round_ms": min(times) * 1e3, "worst_round_ms": max(times) * 1e3})
            print(f"{k}x{m}  {name:22s} {results[-1]['median_ms']:8.2f} ms")
    if args.name:
        write_results(args, results)


def write_results(args: argparse.Namespace, results: list[dict]) -> None:
    args.results_dir.mkdir(parents=True, exist_ok=True)
    header = {"command": "python benchmarks/dense_products.py " + " ".join(
                  f"--{key} {value}" for key, value in vars(args).items() if key not in ("name", "results_dir") and value is not None),
              "utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "host": platform.node(),
              "cpu": platform.processor() or platform.machine(), "load_average": os.getloadavg(),
              "torch": torch.__version__, "blas": "mkl" if torch.backends.mkl.is_available() else "other"}
    (args.results_dir / f"dense-{args.name}.json").write_text(json.dumps({**header, "results": results}, indent=1))
    lines = [f"# dense products {args.name}", "", f"`{header['command']}`", "",
             f"{header['utc']} UTC, load average {header['load_average']}, torch {header['torch']} "
             f"({header['blas']}), {args.rows} rows, {args.dtype}, {args.threads} thread(s); median of "
             f"{args.rounds} interleaved rounds of {args.repeats}.", "",
             "| weight k×m | product: layout | median ms | best round | worst round |", "|---|---|---|---|---|"]
    lines += [f"| {r['k']}×{r['m']} | {r['product']} | {r['median_ms']:.2f} | {r['best_round_ms']:.2f} | "
              f"{r['worst_round_ms']:.2f} |" for r in results]
    (args.results_dir / f"dense-{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
