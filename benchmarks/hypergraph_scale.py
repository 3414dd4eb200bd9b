"""Where the hypergraph model's time and memory go, phase by phase (issue #16).

One Mt-KaHyPar run on the column-net hypergraph of a graph's Â, handed over
either as one Python sequence per net (``--input list``, the old path) or as an
hMETIS file written with numpy (``--input file``). Prints one JSON line: the
seconds and resident memory after each phase, the peak (VmHWM), km1 and the
CSR bytes of Â (GB = 10^9 bytes). Run one configuration per process so that the peak is its own:

    python benchmarks/hypergraph_scale.py --graph synthetic:rmat,scale=18,edge_factor=12 --parts 4 \\
        --preset default --input file
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def _gb(kib: int) -> float:
    """GB as docs/scale.md counts them: 10^9 bytes."""
    return round(kib * 1024 / 1e9, 3)


class Phases:
    """Wall and CPU seconds (all threads; on a loaded machine CPU / threads estimates the idle wall time),
    resident GB and the peak so far, at the end of each named phase."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self._t = time.perf_counter()
        self._cpu = time.process_time()

    def done(self, name: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.rows[name] = {"s": round(now - self._t, 2), "cpu_s": round(cpu - self._cpu, 2),
                           "rss_gb": _gb(_status_kib("VmRSS")), "peak_gb": _gb(_status_kib("VmHWM"))}
        self._t, self._cpu = now, cpu


def _hand_over(mtk, ctx, indptr, pins, weights, how: str, phases: Phases):
    import mtkahypar

    from distgcn.partitioning.hmetis import write_hmetis

    net_weights = np.ones(indptr.shape[0] - 1, dtype=np.int64)
    if how == "list":  # the path before issue #16: one view into `pins` per net
        nets = np.split(pins, indptr[1:-1])
        phases.done("nets_as_list")
        hg = mtk.create_hypergraph(ctx, weights.shape[0], len(nets), nets, weights, net_weights)
        del nets
        phases.done("create_hypergraph")
        return hg
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "column-net.hgr")
        write_hmetis(path, indptr, pins, weights, net_weights)
        phases.done(f"write_hmetis ({os.path.getsize(path) / 1e6:.0f} MB)")
        hg = mtk.hypergraph_from_file(path, ctx, mtkahypar.FileFormat.HMETIS)
        phases.done("hypergraph_from_file")
    return hg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="synthetic:rmat,scale=18,edge_factor=12")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--preset", default="default", help="a key of distgcn.partitioning.hypergraph.MTKAHYPAR_PRESETS")
    parser.add_argument("--input", choices=("list", "file"), default="file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--handover-only", action="store_true", help="stop once the tool holds the hypergraph")
    args = parser.parse_args()

    import mtkahypar

    from distgcn.data import load_graph
    from distgcn.data.graph import normalized_adjacency
    from distgcn.partitioning.hypergraph import MTKAHYPAR_PRESETS, column_net

    phases = Phases()
    graph = load_graph(args.graph)
    a_hat = normalized_adjacency(graph.adj)
    del graph
    gc.collect()
    csr_bytes = a_hat.data.nbytes + a_hat.indices.nbytes + a_hat.indptr.nbytes
    phases.done("load_and_normalize")
    indptr, pins, weights = column_net(a_hat)
    nnz = int(a_hat.nnz)
    del a_hat
    gc.collect()
    phases.done("column_net (Â freed after)")

    name, vcycles = MTKAHYPAR_PRESETS[args.preset]
    mtk = mtkahypar.initialize(args.threads, False)
    ctx = mtk.context_from_preset(getattr(mtkahypar.PresetType, name))
    ctx.set_partitioning_parameters(args.parts, 0.03, mtkahypar.Objective.KM1)
    ctx.num_vcycles = vcycles
    ctx.logging = False
    mtkahypar.set_seed(args.seed)
    hg = _hand_over(mtk, ctx, indptr, pins, weights, args.input, phases)
    km1 = None
    if not args.handover_only:
        km1 = int(hg.partition(ctx).km1())
        phases.done("partition")
    print(json.dumps({"graph": args.graph, "n": int(weights.shape[0]), "nnz": nnz, "csr_gb": round(csr_bytes / 1e9, 3),
                      "parts": args.parts, "preset": args.preset, "input": args.input, "threads": args.threads,
                      "km1": km1, "peak_rss_gb": _gb(_status_kib("VmHWM")),
                      "phases": phases.rows, "loadavg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
