"""Reproduce the communication columns of the VLDB'23 paper's Table 2 for RP, GP and HP.

For each graph and P, partitions Â with the random (RP), graph (GP, METIS) and
hypergraph (HP, the project's default hypergraph partitioner) models and
records the exact volume and message metrics, the graph model's edge cut,
and the partition time. Writes JSON and a markdown table normalized to RP.

    python benchmarks/table2.py --parts 4,16,64,128,512 --out RESULTS/table2.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.partitioning.metrics import partition_metrics
from distgcn.partitioning.models import compute_parts

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
GRAPHS = {
    "soc-Slashdot0902": ("soc-Slashdot0902/soc-Slashdot0902.txt.gz", True),
    "musae-facebook": ("musae_facebook", False),
    "ego-Facebook": ("ego-Facebook/facebook_combined.txt.gz", True),
    "cora": ("cora_planetoid", False),
    "citeseer": ("citeseer_planetoid", False),
    "4elt": ("meshes/4elt.graph", False),
    "wing": ("meshes/wing.graph", False),
}
MODELS = {"RP": "random", "GP": "graph", "HP": "hypergraph"}


def measure(name: str, parts_list: list[int], seed: int, hp_preset: str | None) -> list[dict]:
    path, symmetrize = GRAPHS[name]
    graph = load_graph(str(DATASETS / path), symmetrize=symmetrize)
    a_hat = normalized_adjacency(graph.adj)
    rows = []
    for nparts in parts_list:
        for label, model in MODELS.items():
            start = time.perf_counter()
            preset = hp_preset if model == "hypergraph" else None
            parts, info = compute_parts(model, a_hat, nparts, epsilon=0.03, seed=seed, preset=preset)
            elapsed = time.perf_counter() - start
            m = partition_metrics(a_hat, parts, nparts)
            row = {"graph": name, "n": a_hat.shape[0], "nnz": int(a_hat.nnz), "P": nparts, "model": label,
                   "partitioner": info.get("partitioner"), "preset": info.get("preset"),
                   "partition_s": round(elapsed, 3), "volume": m["volume"], "messages": m["messages"],
                   "max_recv_volume": m["max_recv_volume"], "edge_cut": m["edge_cut"],
                   "connectivity_minus_one": m["connectivity_minus_one"], "imbalance": m["imbalance"]}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """Per graph and P: avg/max volume and avg/max messages normalized to RP, plus raw RP values."""
    out = ["| graph | P | model (tool, preset) | avg vol | max vol | avg msgs | max msgs | vol (rows) | 2·cut / vol | time (s) |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = {(r["graph"], r["P"]): r for r in rows if r["model"] == "RP"}
    for r in rows:
        b = base[(r["graph"], r["P"])]

        def ratio(key: str, stat: str) -> str:
            denom = b[key][stat]
            return f"{r[key][stat] / denom:.2f}" if denom else "-"

        # The graph model's estimate of the volume: every cut undirected edge moves two rows.
        cut = f"{2 * r['edge_cut'] / r['volume']['total']:.2f}" if r["volume"]["total"] else ""
        tool = f" ({r['partitioner']}, {r['preset']})" if r["preset"] else ""
        out.append(f"| {r['graph']} | {r['P']} | {r['model']}{tool} | {ratio('volume', 'avg')} | {ratio('volume', 'max')} | "
                   f"{ratio('messages', 'avg')} | {ratio('messages', 'max')} | {r['volume']['total']} | {cut} | "
                   f"{r['partition_s']:.2f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--parts", default="4,16,64,128,512")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hp-preset", help="Mt-KaHyPar preset for HP (default: the project's default)")
    parser.add_argument("--out", help="JSON file to write (a .md table beside it); required unless --render")
    parser.add_argument("--render", metavar="JSON", help="only render the markdown of an earlier run's JSON")
    args = parser.parse_args()
    if args.render:
        print(markdown(json.loads(Path(args.render).read_text())))
        return
    if not args.out:
        parser.error("--out FILE is required (the JSON results; a .md table is written beside it)")
    rows = []
    for name in args.graphs.split(","):
        rows += measure(name, [int(p) for p in args.parts.split(",")], args.seed, args.hp_preset)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(rows) + "\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
