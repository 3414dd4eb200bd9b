"""How much of the halo exchange does the distributed SpMM hide behind the local products?

Run under MPI, one process per part of the graph's partition:

    mpiexec -n 2 python benchmarks/overlap.py --graph GRAPH --symmetrize --features 64 --classes 8 \\
        --partition random --width 64 --threads 1 --name slashdot-random --results-dir RESULTS

(or ``overlap.py DIR`` for a directory written by ``distgcn partition``). For
the forward product Y = Â H and the backward Âᵀ G, each rank times, over many
repetitions, each part alone and then the real overlapped product:

- (a) the exchange alone: pack, post, wait for every message, no compute;
- (b) the owned-block product alone;
- (c) the halo-side products alone (forward: the per-sender halo-block
  products; backward: the halo block's transpose, which forms the partials
  sent, and adding the partials received);
- (d) ``DistributedAdjacency.matmul`` / ``matmul_transpose``, whose exposed
  wait is the ``comm_wait_s`` counter.

Hidden fraction of the communication = (a + b + c − d) / a, clipped to [0, 1],
from the medians; and the median of the same fraction taken per repetition,
whose four timings are close in time (the machine may be shared, and a load
change between medians can swamp a, which is small beside b + c). The wait
inside (a) (``comm_wait_s``, i.e. (a) without packing and posting) is what
the exposed wait of (d) compares with. A barrier precedes every timed call,
so that a rank does not count the other rank's lateness as transfer time.
Writes RESULTS/overlap-NAME.{json,md} (``--results-dir RESULTS``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from distgcn.cli.options import add_graph_options
from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import MPITransport
from distgcn.config import PartitionerConfig, SourceConfig
from distgcn.data.prepare import GraphOptions
from distgcn.kernels import kernels_for
from distgcn.runtime.threads import set_threads
from distgcn.shard.distribute import load_own_shard
from distgcn.shard.scatter import build_and_scatter
from distgcn.spmm.halo import HaloExchange, HaloExchanger, HaloPlan
from distgcn.spmm.product import DistributedAdjacency

PARTS = ("exchange", "owned", "halo", "overlapped")
WAITS = {"exchange": "exchange_wait", "overlapped": "exposed_wait"}
"""The timed calls that wait for messages, and the name of their comm_wait_s samples."""


def drain(exchange: HaloExchange) -> dict[int, torch.Tensor]:
    """Wait for every receive and send of ``exchange`` (waits timed as in the SpMM); each sender's rows, by sender."""
    messages = dict(exchange.arrivals())
    exchange.finish()
    return messages


def forward_parts(adjacency: DistributedAdjacency, h: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The four timed calls of Y = Â H: (a), (b), (c) and (d)."""
    exchanger = adjacency.exchanger
    halo = drain(exchanger.start_forward(h))  # each sender's rows in the halo buffer, which (c) reads

    def halo_products() -> None:
        y = torch.zeros((adjacency.n_owned, h.shape[1]), dtype=h.dtype)
        for k, rows in halo.items():
            adjacency.halo_by_sender[k].add_product(y, rows)

    def owned_product() -> None:
        adjacency.owned.add_product(torch.zeros((adjacency.n_owned, h.shape[1]), dtype=h.dtype), h)

    return {"exchange": lambda: drain(exchanger.start_forward(h)),
            "owned": owned_product, "halo": halo_products, "overlapped": lambda: adjacency.matmul(h)}


def backward_parts(adjacency: DistributedAdjacency, g: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The four timed calls of Âᵀ G: (a), (b), (c) and (d)."""
    exchanger = adjacency.exchanger
    plan = exchanger.plan
    halo_grad = torch.zeros((adjacency.n_halo, g.shape[1]), dtype=g.dtype)
    incoming = torch.zeros((plan.rows_sent, g.shape[1]), dtype=g.dtype)

    def halo_products() -> None:
        halo_grad.zero_()
        adjacency.add_halo_partials(halo_grad, g)
        grad = torch.zeros((adjacency.n_owned, g.shape[1]), dtype=g.dtype)
        for s in plan.send_slices:
            grad.index_add_(0, plan.send_index[s], incoming[s])

    def owned_product() -> None:
        adjacency.owned_t.add_product(torch.zeros((adjacency.n_owned, g.shape[1]), dtype=g.dtype), g)

    return {"exchange": lambda: drain(exchanger.start_reverse(g.shape[1], g.dtype, lambda k, out: None)),
            "owned": owned_product, "halo": halo_products, "overlapped": lambda: adjacency.matmul_transpose(g)}


def measure(calls: dict[str, Callable[[], None]], counters: CommCounters, comm: MPI.Comm, repeats: int,
            warmup: int) -> dict[str, list[float]]:
    """Seconds of each call per repetition (after ``warmup``), and the comm wait inside the exchanging ones."""
    samples: dict[str, list[float]] = {name: [] for name in (*PARTS, *WAITS.values())}
    for repetition in range(warmup + repeats):
        for name in PARTS:
            comm.Barrier()
            counters.reset()
            start = time.perf_counter()
            calls[name]()
            elapsed = time.perf_counter() - start
            if repetition >= warmup:
                samples[name].append(elapsed)
                if name in WAITS:
                    samples[WAITS[name]].append(counters.comm_wait_s)
    return samples


def hidden(exchange: float, owned: float, halo: float, overlapped: float) -> float:
    """The share of the exchange's time that the overlapped product did not pay, in [0, 1]."""
    return min(1.0, max(0.0, (exchange + owned + halo - overlapped) / exchange)) if exchange > 0 else 0.0


def summarize(samples: dict[str, list[float]]) -> dict[str, float]:
    """Medians, and the hidden fraction from the medians and per repetition."""
    m = {name: statistics.median(values) for name, values in samples.items()}
    paired = statistics.median(hidden(*timings) for timings in zip(*(samples[name] for name in PARTS)))
    return {**m, "hidden_fraction": hidden(*(m[name] for name in PARTS)), "hidden_fraction_paired": paired}


def markdown(result: dict) -> str:
    lines = [f"# Overlap: {result['name']}", "", f"Command: `{result['command']}`", "",
             (f"Load average (1 min) before / after: {result['loadavg_before']:.2f} / {result['loadavg_after']:.2f} "
              f"on {os.cpu_count()} cores; {result['repeats']} repetitions after {result['warmup']} warm-up, "
              f"medians in ms. Width {result['width']}, float32, {result['threads']} thread(s) per rank, "
              f"{result['kernel']} kernel, {result['mpi']}."), "",
             ("| direction | rank | rows sent | (a) exchange | wait in (a) | (b) owned | (c) halo | a+b+c "
              "| (d) overlapped | exposed wait in (d) | hidden (medians) | hidden (per repetition) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for direction in ("forward", "backward"):
        for rank, r in enumerate(result[direction]):
            serial = r["exchange"] + r["owned"] + r["halo"]
            lines.append(f"| {direction} | {rank} | {r['rows_sent']} | {r['exchange'] * 1e3:.2f} | "
                         f"{r['exchange_wait'] * 1e3:.2f} | {r['owned'] * 1e3:.2f} | {r['halo'] * 1e3:.2f} | "
                         f"{serial * 1e3:.2f} | {r['overlapped'] * 1e3:.2f} | {r['exposed_wait'] * 1e3:.2f} | "
                         f"{r['hidden_fraction']:.2f} | {r['hidden_fraction_paired']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partition_dir", nargs="?", metavar="DIR", help="shards written by 'distgcn partition'")
    parser.add_argument("--graph", help="a graph to partition here, on rank 0 (instead of DIR)")
    parser.add_argument("--partition", default="random", choices=["random", "contiguous", "graph", "hypergraph"])
    add_graph_options(parser, SourceConfig)
    parser.add_argument("--width", type=int, default=64, help="columns of H and G (default: 64)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", required=True, help="results go to RESULTS/overlap-NAME.{json,md}")
    parser.add_argument("--results-dir", type=Path, required=True, metavar="RESULTS",
                        help="folder for the results (made if missing)")
    args = parser.parse_args()
    if (args.partition_dir is None) == (args.graph is None):
        parser.error("give exactly one of DIR or --graph")
    loadavg_before = os.getloadavg()[0]
    set_threads(args.threads)
    transport = MPITransport()
    if args.partition_dir is not None:
        shard = load_own_shard(transport, args.partition_dir)
    else:
        options = GraphOptions(spec=args.graph, symmetrize=args.symmetrize, features=args.features,
                               classes=args.classes, seed=args.seed, feature_norm=args.feature_norm)
        shard = build_and_scatter(transport, options, PartitionerConfig(args.partition, seed=args.seed))

    counters = CommCounters()
    exchanger = HaloExchanger(HaloPlan.from_shard(shard), transport, counters, exchanges=True)
    kernel = kernels_for("cpu")
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, torch.float32, kernel)
    rng = np.random.default_rng(args.seed + transport.rank)
    h = torch.from_numpy(rng.standard_normal((shard.n_owned, args.width), dtype=np.float32))
    g = torch.from_numpy(rng.standard_normal((shard.n_owned, args.width), dtype=np.float32))
    per_rank = {}
    for direction, parts in (("forward", forward_parts(adjacency, h)), ("backward", backward_parts(adjacency, g))):
        summary = summarize(measure(parts, counters, transport.comm, args.repeats, args.warmup))
        rows = exchanger.plan.rows_sent if direction == "forward" else exchanger.plan.n_halo
        per_rank[direction] = transport.comm.gather({**summary, "rows_sent": rows}, root=0)
    if transport.rank == 0:
        settings = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MPIR_CVAR_")]
        result = {"name": args.name, "command": shlex.join([*settings, "mpiexec", "-n", str(transport.size),
                                                            "python", *sys.argv]),
                  "ranks": transport.size, "width": args.width, "threads": args.threads, "kernel": kernel.name,
                  "repeats": args.repeats, "warmup": args.warmup, "loadavg_before": loadavg_before,
                  "loadavg_after": os.getloadavg()[0], "mpi": " ".join(MPI.Get_library_version().split()[:3]),
                  **per_rank}
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / f"overlap-{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.results_dir / f"overlap-{args.name}.md").write_text(markdown(result))
        print(markdown(result))


if __name__ == "__main__":
    main()
