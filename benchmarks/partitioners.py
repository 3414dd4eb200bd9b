"""Compare hypergraph/graph partitioners on the column-net model of Â.

For each graph, P and method, measures the exact communication of one SpMM
``Â H`` under the resulting 1D row partition -- connectivity-1 of the
column-net hypergraph (= total rows sent, volume.total), the largest per-rank
send and receive volume, messages -- plus balance and wall time of the
partitioning call. Every run is a subprocess with a timeout, so a partitioner
that does not finish (KaHyPar on power-law graphs) is recorded as a timeout
instead of blocking the sweep.

Graphs are made undirected (A ∪ Aᵀ, no self loops), then
Â = D^-1/2 (A + I) D^-1/2 (distgcn.data.graph.normalized_adjacency).

    python benchmarks/partitioners.py --graphs soc-Slashdot0902 --parts 2,4 \\
        --methods mtkahypar:default,mtkahypar:quality,kahypar:fast,metis \\
        --out RESULTS/partitioners-$(date +%F).json

A method is ``tool[:preset][*runs]``: ``mtkahypar:quality*4`` keeps the best of
4 seeds (seed, seed+1, ...). ``random`` and ``metis`` take no preset.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DATASETS = Path(os.environ.get("DISTGCN_DATASETS", ROOT.parent / "shared" / "datasets"))
# name -> path under the datasets folder (every graph is symmetrised)
GRAPHS = {
    "soc-Slashdot0902": "soc-Slashdot0902/soc-Slashdot0902.txt.gz",
    "musae-facebook": "musae_facebook",
    "ego-Facebook": "ego-Facebook/facebook_combined.txt.gz",
    "cora": "cora_planetoid",
    "citeseer": "citeseer_planetoid",
    "4elt": "meshes/4elt.graph",
    "wing": "meshes/wing.graph",
}
DEFAULT_METHODS = "random,metis,mtkahypar:default,mtkahypar:quality,kahypar:fast,kahypar:quality"


def load_a_hat(name: str, datasets: Path):
    from distgcn.data import load_graph
    from distgcn.data.graph import normalized_adjacency

    if name not in GRAPHS:
        raise SystemExit(f"unknown graph '{name}': expected one of {', '.join(GRAPHS)}")
    graph = load_graph(str(datasets / GRAPHS[name]), symmetrize=True)
    adj = graph.adj.tocsr()
    adj.setdiag(0)
    adj.eliminate_zeros()
    return normalized_adjacency(adj)


def parse_method(method: str) -> tuple[str, str | None, int]:
    runs = 1
    if "*" in method:
        method, r = method.split("*", 1)
        runs = int(r)
    tool, _, preset = method.partition(":")
    return tool, preset or None, runs


def run_single(graph: str, method: str, nparts: int, seed: int, epsilon: float, datasets: Path,
               threads: int | None) -> dict:
    """One measurement, in this process (the parent runs it in a subprocess)."""
    from distgcn.partitioning.metrics import partition_metrics
    from distgcn.partitioning.models import compute_parts

    a_hat = load_a_hat(graph, datasets)
    tool, preset, runs = parse_method(method)
    best = None
    total_s = 0.0
    for r in range(runs):
        t0 = time.perf_counter()
        if tool == "random":
            parts, info = compute_parts("random", a_hat, nparts, seed=seed + r)
        elif tool == "metis":
            parts, info = compute_parts("graph", a_hat, nparts, epsilon=epsilon, seed=seed + r)
        else:
            parts, info = compute_parts("hypergraph", a_hat, nparts, epsilon=epsilon, seed=seed + r,
                                        partitioner=tool, preset=preset, threads=threads)
        total_s += time.perf_counter() - t0
        m = partition_metrics(a_hat, parts, nparts)
        if best is None or m["connectivity_minus_one"] < best[0]["connectivity_minus_one"]:
            best = (m, info, seed + r)
    m, info, best_seed = best
    return {
        "graph": graph, "n": int(a_hat.shape[0]), "nnz": int(a_hat.nnz), "method": method,
        "P": nparts, "epsilon": epsilon, "seed": seed, "runs": runs, "best_seed": best_seed,
        "status": "ok", "time_s": round(total_s, 3),
        "km1": m["connectivity_minus_one"], "volume_total": m["volume"]["total"],
        "volume_max": m["volume"]["max"], "max_recv_volume": m["max_recv_volume"],
        "messages_avg": m["messages"]["avg"], "messages_max": m["messages"]["max"],
        "imbalance": round(m["imbalance"], 5), "edge_cut": m["edge_cut"],
        "threads": info.get("threads"), "versions": info.get("versions"),
    }


def run_subprocess(args, graph: str, method: str, nparts: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--single", graph, method, str(nparts),
           "--seed", str(args.seed), "--epsilon", str(args.epsilon), "--datasets", str(args.datasets)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    tool, _, _ = parse_method(method)
    timeout = args.kahypar_timeout if tool == "kahypar" else args.timeout
    t0 = time.perf_counter()
    # the 1-minute load average: on a shared machine, times taken under load > cores are inflated
    base = {"graph": graph, "method": method, "P": nparts, "epsilon": args.epsilon, "seed": args.seed,
            "loadavg_1m": round(os.getloadavg()[0], 2)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "time_s": round(time.perf_counter() - t0, 1), "timeout_s": timeout}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {**base, "status": "error", "error": " | ".join(tail)}
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "loadavg_1m": base["loadavg_1m"]}


def table(rows: list[dict]) -> str:
    out = ["| graph | P | method | km1 = vol total | max send vol | max recv vol | avg msgs | imbalance | time (s) |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["status"] != "ok":
            out.append(f"| {r['graph']} | {r['P']} | {r['method']} | {r['status']} | | | | | "
                       f"{r.get('time_s', '')} |")
            continue
        out.append(f"| {r['graph']} | {r['P']} | {r['method']} | {r['km1']} | {r['volume_max']} | "
                   f"{r['max_recv_volume']} | {r['messages_avg']:.1f} | {r['imbalance']:.4f} | {r['time_s']:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", default="soc-Slashdot0902", help=f"comma list of: {', '.join(GRAPHS)}")
    p.add_argument("--parts", default="2,4,16,64,512")
    p.add_argument("--methods", default=DEFAULT_METHODS,
                   help="comma list of tool[:preset][*runs]; tools: random, metis, mtkahypar, kahypar")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epsilon", type=float, default=0.03)
    p.add_argument("--threads", type=int, default=None, help="Mt-KaHyPar threads (default: all cores)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    p.add_argument("--kahypar-timeout", type=float, default=300, help="seconds per KaHyPar run")
    p.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    p.add_argument("--out", type=Path, default=None, help="JSON file; existing runs in it are kept")
    p.add_argument("--single", nargs=3, metavar=("GRAPH", "METHOD", "P"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.single:
        graph, method, nparts = args.single
        row = run_single(graph, method, int(nparts), args.seed, args.epsilon, args.datasets, args.threads)
        print(json.dumps(row))
        return

    previous = []
    if args.out and args.out.exists():
        previous = json.loads(args.out.read_text()).get("runs", [])
    rows = []
    for graph in [g for g in args.graphs.split(",") if g]:
        for nparts in [int(x) for x in args.parts.split(",") if x]:
            for method in [m for m in args.methods.split(",") if m]:
                row = run_subprocess(args, graph, method, nparts)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if args.out:
                    save(args.out, previous + rows)
    print(table(rows))


def save(path: Path, rows: list[dict]) -> None:
    """Write the runs; other top-level keys of an existing file (notes, extra runs) are kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update({
        "date": datetime.date.today().isoformat(),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
        "note": "km1 = connectivity-1 of the column-net hypergraph = rows of H sent per SpMM (volume_total)",
        "runs": rows,
    })
    path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
