"""METIS against KaMinPar on the graph model: partitioning time, exact communication volume, peak memory.

For each graph spec (a file, a dataset folder or ``synthetic:...``, as
``distgcn partition`` reads it), each P, each method and each seed, one
subprocess loads Â, runs ``compute_parts("graph", ...)`` and measures the
partition with ``distgcn.partitioning.metrics.partition_metrics`` (rows of H sent per
SpMM). ``time_s`` is the model's whole call (symmetrising the pattern, and
for KaMinPar writing and reading its ParHIP file), as ``distgcn partition``
pays it. ``base_rss_mib`` is the subprocess's resident size just before
partitioning, with Â loaded; ``peak_rss_mib`` its peak during the partition
(the kernel's count reset before it; ``peak_is_partition`` false: the
process's whole peak, loading included).

    python benchmarks/graph_partitioners.py --graph synthetic:rmat,scale=20,edge_factor=12 --parts 4 \\
        --methods metis,kaminpar@1,kaminpar@2,kaminpar:fast@1 --seeds 0,1,2 \\
        --out RESULTS/graph-partitioners-rmat20.json

A method is ``metis`` or ``kaminpar[:PRESET][@THREADS]`` (threads default: all cores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_method(method: str) -> tuple[str, str | None, int | None]:
    """``kaminpar:fast@2`` -> ("kaminpar", "fast", 2); ``metis`` -> ("metis", None, None)."""
    rest, _, threads = method.partition("@")
    tool, _, preset = rest.partition(":")
    if tool not in ("metis", "kaminpar") or (tool == "metis" and (preset or threads)):
        raise SystemExit(f"method {method!r}: expected metis or kaminpar[:PRESET][@THREADS]")
    return tool, preset or None, int(threads) if threads else None


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def reset_peak_rss() -> bool:
    """Start the kernel's peak-RSS count (VmHWM) afresh, so that it measures the partitioner, not the load."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """VmHWM: the peak resident size since :func:`reset_peak_rss` (or since the start)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_single(spec: str, method: str, nparts: int, seed: int, epsilon: float, symmetrize: bool) -> dict:
    """One measurement in this process (the driver starts one process per measurement)."""
    from distgcn.data import load_graph
    from distgcn.data.graph import normalized_adjacency
    from distgcn.partitioning.metrics import partition_metrics
    from distgcn.partitioning.models import compute_parts

    tool, preset, threads = parse_method(method)
    t0 = time.perf_counter()
    graph = load_graph(spec, symmetrize=symmetrize)
    a_hat = normalized_adjacency(graph.adj)
    del graph
    load_s = time.perf_counter() - t0
    base = rss_mib()
    peak_is_partition = reset_peak_rss()
    parts, info = compute_parts("graph", a_hat, nparts, epsilon=epsilon, seed=seed, partitioner=tool, preset=preset,
                                threads=threads)
    peak = peak_rss_mib()
    metrics = partition_metrics(a_hat, parts, nparts)
    return {"graph": spec, "n": int(a_hat.shape[0]), "nnz": int(a_hat.nnz), "method": method, "P": nparts,
            "seed": seed, "epsilon": epsilon, "status": "ok", "load_s": round(load_s, 2),
            "time_s": round(info["partition_s"], 3), "threads": info.get("threads", 1), "preset": info.get("preset"),
            "volume_total": metrics["volume"]["total"], "volume_max": metrics["volume"]["max"],
            "max_recv_volume": metrics["max_recv_volume"], "messages_total": metrics["messages"]["total"],
            "edge_cut": metrics["edge_cut"], "imbalance": round(metrics["imbalance"], 5),
            "base_rss_mib": round(base), "peak_rss_mib": round(peak), "peak_is_partition": peak_is_partition,
            "versions": info["versions"]}


def run_subprocess(args: argparse.Namespace, spec: str, method: str, nparts: int, seed: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--single", spec, method, str(nparts), "--seeds", str(seed),
           "--epsilon", str(args.epsilon)] + (["--symmetrize"] if args.symmetrize else [])
    # the load average before the run: on a shared machine, times taken under load > cores are inflated
    base = {"graph": spec, "method": method, "P": nparts, "seed": seed, "loadavg_1m": round(os.getloadavg()[0], 2)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "timeout_s": args.timeout}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {**base, "status": "error", "error": " | ".join(tail)}
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "loadavg_1m": base["loadavg_1m"]}


def summary(rows: list[dict]) -> str:
    """A markdown table: the median over seeds of each (graph, P, method), and the range of time."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["graph"], row["P"], row["method"]), []).append(row)
    out = ["| graph | P | method | seeds | volume (median) | volume range | time s (median) | time range | "
           "imbalance (max) | peak RSS MiB | load 1m |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (spec, nparts, method), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        if not ok:
            out.append(f"| {spec} | {nparts} | {method} | 0 | {runs[0]['status']} | | | | | | |")
            continue
        vol = [r["volume_total"] for r in ok]
        sec = [r["time_s"] for r in ok]
        out.append(f"| {spec} | {nparts} | {method} | {len(ok)} | {statistics.median(vol):.0f} | {min(vol)}-{max(vol)} "
                   f"| {statistics.median(sec):.2f} | {min(sec):.2f}-{max(sec):.2f} | "
                   f"{max(r['imbalance'] for r in ok):.4f} | {max(r['peak_rss_mib'] for r in ok)} | "
                   f"{max(r['loadavg_1m'] for r in ok):.2f} |")
    return "\n".join(out)


def save(path: Path, rows: list[dict], argv: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python benchmarks/graph_partitioners.py " + " ".join(argv),
           "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
           "note": "volume_total = rows of H sent per SpMM (distgcn.partitioning.metrics); time_s = compute_parts('graph'); "
                   "loadavg_1m taken before each run on a shared 2-core machine",
           "runs": rows}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    path.with_suffix(".md").write_text(f"`{doc['command']}` ({doc['date']})\n\n{summary(rows)}\n")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", action="append", default=[], metavar="SPEC",
                   help="a graph file, dataset folder or synthetic:... spec (repeat for more)")
    p.add_argument("--parts", default="4", help="comma list of P (default: 4)")
    p.add_argument("--methods", default="metis,kaminpar@1,kaminpar", help="comma list (default: %(default)s)")
    p.add_argument("--seeds", default="0", help="comma list of seeds (default: 0)")
    p.add_argument("--epsilon", type=float, default=0.03)
    p.add_argument("--symmetrize", action="store_true", help="symmetrise a directed graph, as distgcn's flag")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run (default: %(default)s)")
    p.add_argument("--out", type=Path, help="JSON file (a .md summary is written beside it)")
    p.add_argument("--single", nargs=3, metavar=("GRAPH", "METHOD", "P"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.single:
        spec, method, nparts = args.single
        print(json.dumps(run_single(spec, method, int(nparts), seeds[0], args.epsilon, args.symmetrize)))
        return
    if not args.graph:
        p.error("name at least one --graph")
    methods = [m for m in args.methods.split(",") if m]
    for method in methods:
        parse_method(method)
    rows = []
    for spec in args.graph:
        for nparts in [int(x) for x in args.parts.split(",") if x]:
            for seed in seeds:
                for method in methods:
                    rows.append(run_subprocess(args, spec, method, nparts, seed))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                    if args.out:
                        save(args.out, rows, argv)
    print(summary(rows))


if __name__ == "__main__":
    main()
