"""Sampler throughput: sampled vertices per second on one core, and the frontier pop structure.

For each graph and sampler: the time of ``sample_vertices`` (draws + dedupe)
and of ``sample`` (plus the induced subgraph), reported as distinct sampled
vertices per second on one thread (BLAS/OpenMP pinned to 1 before numpy
loads; the samplers are single-threaded numpy anyway). The main figure is
per CPU second of this process (``time.process_time``), which time slices
given to other processes on a shared machine do not inflate; wall-clock
rates (median and fastest call) are recorded too. Then the frontier
walk with the Fenwick tree against the naive O(m) cumulative sum, for several
frontier sizes m, as steps (= sampled vertices) per second.

    python benchmarks/samplers.py --out RESULTS/samplers.json     # soc-Slashdot0902 and synthetic:rmat,scale=20
    python benchmarks/samplers.py --graphs synthetic:sbm --min-time 0.5 --out RESULTS/samplers-sbm.json

Writes the JSON file ``--out`` names and prints markdown tables.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from distgcn.data import load_graph  # noqa: E402
from distgcn.data.graph import normalized_adjacency  # noqa: E402
from distgcn.sampling.reference import (
    SAMPLERS,
    SamplingGraph,
    frontier_walk_dashboard,
    frontier_walk_naive,
    frontier_walk_tree,
    make_sampler,
)

ROOT = Path(__file__).resolve().parents[1]
SLASHDOT = ROOT.parent / "shared" / "datasets" / "soc-Slashdot0902" / "soc-Slashdot0902.txt.gz"


def repeat_for(fn, min_time: float, min_reps: int) -> tuple[list[tuple[float, float]], list]:
    """Call fn until min_reps calls and min_time seconds are done; return (wall, CPU) seconds per call and outputs."""
    times, outs, start = [], [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        w0, c0 = time.perf_counter(), time.process_time()
        outs.append(fn())
        times.append((time.perf_counter() - w0, time.process_time() - c0))
    return times, outs


def rates(prefix: str, amount: float, times: list[tuple[float, float]]) -> dict:
    """amount per CPU second of this process (what one core delivers, whatever else runs on the
    machine), and per wall second at the median and the fastest call."""
    wall = [w for w, _ in times]
    cpu = sum(c for _, c in times) / len(times)
    return {f"{prefix}_cpu": round(amount / cpu), f"{prefix}_wall_median": round(amount / statistics.median(wall)),
            f"{prefix}_wall_best": round(amount / min(wall))}


def bench_samplers(name: str, graph: SamplingGraph, batch: int, min_time: float) -> list[dict]:
    rows = []
    for sampler_name in SAMPLERS:
        t0 = time.perf_counter()
        sampler = make_sampler(sampler_name, graph, batch)
        setup = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        times, outs = repeat_for(lambda: sampler.sample_vertices(rng), min_time, 5)
        mean_vertices = sum(o.size for o in outs) / len(outs)
        rng = np.random.default_rng(0)
        times_s, subs = repeat_for(lambda: sampler.sample(rng), min_time, 5)
        row = {
            "graph": name, "sampler": sampler_name, "batch_size": batch,
            "options": {k: getattr(sampler, k) for k in ("walk_length", "num_roots", "frontier_size", "pop")
                        if hasattr(sampler, k)},
            "setup_s": round(setup, 3),
            "samples": [len(times), len(times_s)],
            "mean_vertices": round(mean_vertices, 1),
            "mean_edges": round(sum(s.num_edges for s in subs) / len(subs), 1),
            **rates("vertices_per_s", mean_vertices, times),
            **rates("with_subgraph_vertices_per_s", sum(s.num_vertices for s in subs) / len(subs), times_s),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_frontier(name: str, graph: SamplingGraph, sizes: list[int], steps: int, min_time: float) -> list[dict]:
    rows = []
    starts = np.flatnonzero(graph.deg > 0)
    for m in sizes:
        frontier = np.random.default_rng(m).choice(starts, size=m, replace=False)
        row = {"graph": name, "m": m, "steps": steps}
        walks = {}
        for label, walk in (("tree", frontier_walk_tree), ("dashboard", frontier_walk_dashboard),
                            ("naive", frontier_walk_naive)):
            times, outs = repeat_for(lambda: walk(graph, frontier, steps, np.random.default_rng(1)), min_time, 3)
            walks[label] = outs[0]
            row.update(rates(f"{label}_steps_per_s", steps, times))
        row["tree_equals_naive"] = bool(np.array_equal(walks["tree"], walks["naive"]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=f"{SLASHDOT},synthetic:rmat,scale=20",
                        help="comma-separated; a 'synthetic:' spec takes the rest of the list as its keys")
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--frontier-sizes", default="100,1000,10000,100000")
    parser.add_argument("--frontier-steps", type=int, default=5000)
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds per measurement (at least)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write (its folder is made)")
    args = parser.parse_args()

    specs, text = [], args.graphs
    if "synthetic:" in text:
        head, _, tail = text.partition("synthetic:")
        specs = [s for s in head.split(",") if s] + ["synthetic:" + tail]
    else:
        specs = [s for s in text.split(",") if s]

    load_start = os.getloadavg()
    results = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
               "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": {"platform": platform.platform(), "python": platform.python_version(),
                           "numpy": np.__version__, "cpus": os.cpu_count(), "threads": 1,
                           "loadavg_start": load_start},
               "samplers": [], "frontier": []}
    try:
        results["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                               text=True).stdout.strip()
    except OSError:
        pass
    for spec in specs:
        t0 = time.perf_counter()
        g = load_graph(spec)
        a = normalized_adjacency(g.adj)
        graph = SamplingGraph(a)
        name = Path(spec).name.split(".")[0] if not spec.startswith("synthetic:") else spec
        print(f"# {name}: n={graph.n} nnz(Â)={graph.nnz} load {time.perf_counter() - t0:.1f}s "
              f"loadavg {os.getloadavg()}", flush=True)
        results["machine"].setdefault("loadavg_per_graph", {})[name] = os.getloadavg()
        results["samplers"] += bench_samplers(name, graph, args.batch_size, args.min_time)
        sizes = [int(m) for m in args.frontier_sizes.split(",") if int(m) <= (graph.deg > 0).sum()]
        results["frontier"] += bench_frontier(name, graph, sizes, args.frontier_steps, args.min_time)
        del g, a, graph
    results["machine"]["loadavg_end"] = os.getloadavg()

    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {out}\n")
    print("Sampled (distinct) vertices per second on one thread: per CPU second (wall-clock median).\n")
    print("| graph | sampler | N | mean vertices | mean edges | draw only | with induced subgraph |")
    print("|---|---|---|---|---|---|---|")
    for r in results["samplers"]:
        print(f"| {r['graph']} | {r['sampler']} | {r['batch_size']} | {r['mean_vertices']:.0f} | "
              f"{r['mean_edges']:.0f} | {r['vertices_per_s_cpu']:,} ({r['vertices_per_s_wall_median']:,}) | "
              f"{r['with_subgraph_vertices_per_s_cpu']:,} ({r['with_subgraph_vertices_per_s_wall_median']:,}) |")
    print("\nFrontier steps (= sampled vertices) per second: per CPU second (wall-clock median).\n")
    print("| graph | m | Fenwick tree | Dashboard | naive | tree = naive |")
    print("|---|---|---|---|---|---|")
    for r in results["frontier"]:
        cells = " | ".join(f"{r[k + '_steps_per_s_cpu']:,} ({r[k + '_steps_per_s_wall_median']:,})"
                           for k in ("tree", "dashboard", "naive"))
        print(f"| {r['graph']} | {r['m']} | {cells} | {r['tree_equals_naive']} |")

if __name__ == "__main__":
    main()
