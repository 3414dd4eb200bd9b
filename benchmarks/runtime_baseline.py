"""The runtime baseline of a CPU rank: what ``distgcn stats`` adds to its prediction to give a rank's total.

A rank's peak resident set is what distgcn allocates (``stats``' prediction, from the shard's sizes) plus what
the process holds before any data: the interpreter, torch, numpy and scipy, MPI and numba's compiled kernels,
with their allocators. This measures that baseline as a training run's peak resident set (GNU time's maximum
resident size) on a graph of a few thousand vertices, whose data is about a MiB, less ``stats``' prediction for
that rank; for one rank started alone and for two under mpiexec, each run repeated. The figure it prints is
the largest median, with the versions it was measured with: distgcn/memory/baseline.py keeps it.

    python benchmarks/runtime_baseline.py --out /tmp/baseline.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from halo_window import TINY_GRAPH, measured_mib, partition, predicted_mib  # noqa: E402

PACKAGES = ("torch", "numpy", "scipy", "numba", "mpi4py")


def versions() -> dict[str, str]:
    """The Python, the packages and the MPI library of this environment (what the baseline depends on)."""
    from mpi4py import MPI

    found = {"python": platform.python_version(), "system": f"{platform.system()} {platform.machine()}"}
    found.update({name: metadata.version(name) for name in PACKAGES})
    found["mpi"] = " ".join(MPI.Get_library_version().splitlines()[0].split())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write (its folder is created)")
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts (1: no launcher)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    work = args.out.parent / f"{args.out.stem}-work"
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"command": "python benchmarks/runtime_baseline.py " + " ".join(sys.argv[1:]),
                    "graph": TINY_GRAPH, "epochs": args.epochs, "threads": 1, "versions": versions(),
                    "load_average_start": os.getloadavg(), "runs": {}}
    medians = {}
    for ranks in (int(r) for r in args.ranks.split(",")):
        directory = partition(work, TINY_GRAPH, ranks, None, None)
        predicted = predicted_mib(directory, [], "4")
        runs = []
        for _ in range(args.repeats):
            measured = measured_mib(directory, ranks, [], "4", args.epochs, work)
            runs.append([{"rank": rank, "measured_mib": round(m, 1), "predicted_mib": round(p, 1),
                          "baseline_mib": round(m - p, 1)} for rank, (m, p) in enumerate(zip(measured, predicted))])
        medians[ranks] = statistics.median(rank["baseline_mib"] for run in runs for rank in run)
        result["runs"][str(ranks)] = runs
    result["median_baseline_mib"] = {str(ranks): round(value, 1) for ranks, value in medians.items()}
    result["baseline_mib"] = round(max(medians.values()), 1)
    result["load_average_end"] = os.getloadavg()
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
