"""What leaving large nets out of the hypergraph partitioner costs and saves (partition.hypergraph max_net_pins).

Partitions the column-net hypergraph of a graph's Â with the nets of more
than ``--cap`` pins left out (0: every net kept), then counts the km1 of the
whole hypergraph from the part vector (the project's exact count), so the figures compare what each cap
costs in volume against the time of the partition call. Peak memory: run it
under ``/usr/bin/time -v``, one cap per process.

    python benchmarks/large_nets.py --graph synthetic:rmat,scale=20,edge_factor=12 --parts 4 --cap 50
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from distgcn.data import load_graph
from distgcn.graph import normalized_adjacency
from partition.hypergraph import column_net, partition_nets
from partition.metrics import connectivity_minus_one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=20,edge_factor=12")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--cap", type=int, required=True, help="largest net the partitioner gets, in pins (0: all)")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    a_hat = normalized_adjacency(load_graph(args.graph).adj)
    indptr, pins, weights = column_net(a_hat)
    start = time.perf_counter()
    parts, info = partition_nets(indptr, pins, weights, args.parts, seed=0, preset=args.preset, threads=args.threads,
                                 max_net_pins=args.cap)
    seconds = time.perf_counter() - start
    loads = np.bincount(parts, weights=weights, minlength=args.parts)
    print(json.dumps({"graph": args.graph, "parts": args.parts, "cap": args.cap, "nets_left_out": info["nets_left_out"],
                      "partition_s": round(seconds, 1), "km1_whole": connectivity_minus_one(a_hat, parts, args.parts),
                      "km1_reported": info["km1_reported"], "imbalance": round(float(loads.max() / loads.mean()), 4),
                      "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
