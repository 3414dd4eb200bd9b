"""Expected communication per minibatch under SHP, HP, GP and RP (docs/minibatch.md).

For each graph and P, partitions Â with the stochastic hypergraph model
(SHP, built from subgraphs drawn with ``--build-seed``: b from the
Hoeffding bound, and, with ``--shp-samples B``, also b = B), the column-net
hypergraph model (HP), METIS (GP) and a random partition (RP); then draws
``--batches`` fresh minibatches with ``--eval-seed`` and measures, for every
partition, the rows of H each minibatch SpMM moves (volume) and the
(sender, receiver) pairs it uses (messages), exactly
(:mod:`distgcn.partitioning.minibatch_metrics`).

    python benchmarks/minibatch_volume.py --graphs musae-facebook,soc-Slashdot0902 --parts 3,9,27 \\
        --batches 10000 --sampler node --batch-fraction 0.1 --shp-samples 500 --preset default \\
        --out RESULTS/minibatch-volume-node.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from distgcn.config import SamplerSpec
from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.partitioning.minibatch_metrics import batch_entries
from distgcn.partitioning.models import compute_parts
from distgcn.sampling.reference.samplers import sampler_for

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
GRAPHS = {  # path, symmetrize: both made undirected, GraphSAINT's setting
    "soc-Slashdot0902": ("soc-Slashdot0902/soc-Slashdot0902.txt.gz", True),
    "musae-facebook": ("musae_facebook", False),
}
MODELS = {"SHP": "stochastic", "SHP-B": "stochastic", "HP": "hypergraph", "GP": "graph", "RP": "random"}


def partition_all(a_hat, parts_list, spec, args) -> tuple[dict, list[dict]]:
    """Every (P, model) partition of ``a_hat``: {(P, label): parts} and a JSON row per partition."""
    found, rows = {}, []
    for nparts in parts_list:
        for label, model in MODELS.items():
            shp = None
            if label == "SHP":
                shp = {"shp_epsilon": args.shp_epsilon, "shp_delta": args.shp_delta}
            elif label == "SHP-B":
                if args.shp_samples is None:
                    continue
                shp = {"shp_samples": args.shp_samples}
            preset = args.preset if model in ("stochastic", "hypergraph") else None
            start = time.perf_counter()
            parts, info = compute_parts(model, a_hat, nparts, epsilon=0.03, seed=args.build_seed, preset=preset,
                                        sampler=spec if model == "stochastic" else None, shp=shp)
            elapsed = time.perf_counter() - start
            weights = np.diff(a_hat.indptr)
            part_w = np.bincount(parts, weights=weights, minlength=nparts)
            row = {"P": nparts, "model": label, "partitioner": info.get("partitioner"),
                   "preset": info.get("resolved_preset", info.get("preset")), "partition_s": round(elapsed, 2),
                   "imbalance": float(part_w.max() / (weights.sum() / nparts)), "shp": info.get("shp")}
            found[(nparts, label)] = parts
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return found, rows


def evaluate(a_hat, spec, partitions: dict, batches: int, seed: int, chunk: int) -> tuple[dict, dict]:
    """Per-batch volume and messages of ``batches`` fresh minibatches under every partition."""
    sampler = sampler_for(spec, a_hat)
    rng = np.random.default_rng(seed)
    volume = {key: [] for key in partitions}
    messages = {key: [] for key in partitions}
    sizes, entries = [], []
    start = time.perf_counter()
    for first in range(0, batches, chunk):
        subs = [sampler.sample(rng) for _ in range(min(chunk, batches - first))]
        sizes += [s.num_vertices for s in subs]
        entries += [s.num_edges for s in subs]
        group = batch_entries(subs)
        for (nparts, label), parts in partitions.items():
            v, m = group.comm(parts, nparts)
            volume[(nparts, label)].append(v)
            messages[(nparts, label)].append(m)
        print(f"  {first + len(subs)} batches, {time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    batch = {"vertices_mean": float(np.mean(sizes)), "entries_mean": float(np.mean(entries)),
             "eval_s": round(time.perf_counter() - start, 1)}
    stats = {}
    for key in partitions:
        v = np.concatenate(volume[key])
        m = np.concatenate(messages[key])
        stats[key] = {"volume_mean": float(v.mean()), "volume_sem": float(v.std(ddof=1) / np.sqrt(v.size)),
                      "messages_mean": float(m.mean()), "messages_sem": float(m.std(ddof=1) / np.sqrt(m.size))}
    return batch, stats


def markdown(results: list[dict]) -> str:
    """Per graph, P and model: mean volume and messages per minibatch, HP/model volume, partition time."""
    lines = ["| graph | P | model | b | volume / batch | messages / batch | HP / model volume | imbalance | "
             "partition time (s) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        by = {(r["P"], r["model"]): r for r in res["rows"]}
        for nparts in res["parts"]:
            hp = by[(nparts, "HP")]["volume_mean"]
            for label in MODELS:
                row = by.get((nparts, label))
                if row is None:
                    continue
                shp = row["shp"]
                b = shp["samples"] if shp else ""
                time_s = f"{shp['sample_s']:.1f} + {shp['partitioner_s']:.1f}" if shp else f"{row['partition_s']:.1f}"
                lines.append(f"| {res['graph']} | {nparts} | {label} | {b} | {row['volume_mean']:,.1f} "
                             f"± {row['volume_sem']:.1f} | {row['messages_mean']:.1f} | {hp / row['volume_mean']:.3f} "
                             f"| {row['imbalance']:.3f} | {time_s} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--parts", default="3,9,27")
    parser.add_argument("--sampler", default="node", choices=["node", "edge", "rw", "frontier"])
    parser.add_argument("--batch-fraction", type=float, default=0.1, help="batch size N as a fraction of n")
    parser.add_argument("--walk-length", type=int, help="rw only")
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=250, help="minibatches measured together")
    parser.add_argument("--shp-epsilon", type=float, default=0.02)
    parser.add_argument("--shp-delta", type=float, default=0.05)
    parser.add_argument("--shp-samples", type=int, help="also SHP with b = this (model SHP-B)")
    parser.add_argument("--preset", default=None, help="Mt-KaHyPar preset of HP and SHP (default: the project's)")
    parser.add_argument("--build-seed", type=int, default=0, help="partitioners, and SHP's sampled subgraphs")
    parser.add_argument("--eval-seed", type=int, default=1, help="the measured minibatches")
    parser.add_argument("--out", type=Path, required=True, help="JSON file; a .md table is written beside it")
    args = parser.parse_args()
    if args.eval_seed == args.build_seed:
        parser.error("--eval-seed must differ from --build-seed: SHP would be measured on its own samples")
    parts_list = [int(p) for p in args.parts.split(",")]
    results = []
    for name in args.graphs.split(","):
        path, symmetrize = GRAPHS[name]
        a_hat = normalized_adjacency(load_graph(str(DATASETS / path), symmetrize=symmetrize).adj)
        n = a_hat.shape[0]
        options = {"walk_length": args.walk_length} if args.walk_length else {}
        spec = SamplerSpec(args.sampler, max(1, round(args.batch_fraction * n)), options)
        print(f"{name}: n={n}, nnz={a_hat.nnz}, sampler {spec.as_dict()}", file=sys.stderr, flush=True)
        partitions, rows = partition_all(a_hat, parts_list, spec, args)
        batch, stats = evaluate(a_hat, spec, partitions, args.batches, args.eval_seed, args.chunk)
        for row in rows:
            row.update(stats[(row["P"], row["model"])])
        results.append({"graph": name, "n": n, "nnz": int(a_hat.nnz), "symmetrize": symmetrize,
                        "sampler": spec.as_dict(), "batches": args.batches, **batch, "parts": parts_list,
                        "rows": rows})
    report = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg(),
                          "python": platform.python_version()},
              "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
