"""What leaving large nets out of the hypergraph partitioner costs and saves (distgcn.partitioning.hypergraph max_net_pins).

Partitions the column-net hypergraph of a graph's Â with the nets of more
than ``--cap`` pins left out (0: every net kept), then counts the km1 of the
whole hypergraph from the part vector (the project's exact count), so the figures compare what each cap
costs in volume against the time of the partition call. Memory: the resident
size before the call and the call's own peak (the kernel's VmHWM, reset before
the call); run one cap per process.

    python benchmarks/large_nets.py --graph synthetic:rmat,scale=20,edge_factor=12 --parts 4 --cap 50
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.partitioning.hypergraph import column_net, partition_nets
from distgcn.partitioning.metrics import connectivity_minus_one


def _status_gb(key: str) -> float:
    """A /proc/self/status memory line in GB (10^9 bytes, as docs/scale.md counts)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) * 1024 / 1e9, 3)
    raise RuntimeError(f"no {key} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=20,edge_factor=12")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--cap", required=True,
                        help="largest net the partitioner gets, in pins (0: all; auto: partition_nets' default)")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    a_hat = normalized_adjacency(load_graph(args.graph).adj)
    indptr, pins, weights = column_net(a_hat)
    csr_bytes = a_hat.data.nbytes + a_hat.indices.nbytes + a_hat.indptr.nbytes
    rss_before = _status_gb("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:  # VmHWM counts from here: the call's own peak
        refs.write("5")
    start = time.perf_counter()
    parts, info = partition_nets(indptr, pins, weights, args.parts, seed=0, preset=args.preset, threads=args.threads,
                                 max_net_pins=None if args.cap == "auto" else int(args.cap))
    seconds = time.perf_counter() - start
    call_peak = _status_gb("VmHWM")
    loads = np.bincount(parts, weights=weights, minlength=args.parts)
    print(json.dumps({"graph": args.graph, "parts": args.parts, "cap": info["max_net_pins"], "pins": int(pins.shape[0]),
                      "nets_left_out": info["nets_left_out"], "rss_before_call_gb": rss_before,
                      "call_peak_rss_gb": call_peak, "a_hat_csr_gb": round(csr_bytes / 1e9, 3),
                      "partition_s": round(seconds, 1), "km1_whole": connectivity_minus_one(a_hat, parts, args.parts),
                      "km1_reported": info["km1_reported"], "imbalance": round(float(loads.max() / loads.mean()), 4),
                      "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
