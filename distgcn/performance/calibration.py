"""Measuring the node and the network that an epoch-time prediction needs (``distgcn calibrate``).

**Compute.** Each rank trains the model on its own for a few epochs on
synthetic graphs of two sizes and two mean degrees (the stochastic block
model of :mod:`distgcn.data.synthetic`), and the epoch times are fitted, by
non-negative least squares, to ``per_nnz_s · nnz + per_row_s · rows +
fixed_s`` (:class:`~distgcn.performance.epoch_time.ComputeRates`). Under a
launcher all ranks measure at once, so ranks that share a node's cores and
memory bandwidth are measured sharing them, as they will train.

**Distribution.** Under a launcher with more than one rank, the largest of
those graphs is also trained split at random over all ranks, on MPI: the
slowest rank's compute beyond what the rates above give it is the CPU work
of distribution, charged per halo value sent or received
(``per_halo_value_s``).

**Network.** Rank 0 and the last rank (on another node, under a launcher
that places ranks by node) time a ping-pong of small messages (the latency)
and of large ones (the bandwidth).

The result is a JSON file (distgcn/performance/calibration_file.py); ``distgcn stats DIR --predict-time FILE``
reads it.
"""

from __future__ import annotations

import io
import platform
import statistics
import sys
import time
from contextlib import redirect_stderr
from dataclasses import asdict, replace
from datetime import datetime, timezone

import numpy as np

from distgcn.config import ModelConfig
from distgcn.performance.calibration_file import FORMAT, VERSION
from distgcn.performance.epoch_time import ComputeRates, RankLoad, received_rows

GRAPHS = ((12_000, 6.0), (12_000, 30.0), (36_000, 6.0), (36_000, 30.0))
"""(vertices, mean degree) of the synthetic graphs the compute rates are fitted on."""
LATENCY_BYTES = 8
PROBE_BYTES = 2**20
BANDWIDTH_BYTES = 8 * 2**20
BULK_SECONDS = 0.25


def measure_compute(model: ModelConfig, features: int, classes: int, epochs: int, threads: int | None,
                    graphs: tuple[tuple[int, float], ...] = GRAPHS) -> list[dict]:
    """This rank's median epoch time (after the first two) on each graph, trained alone."""
    from distgcn import api
    from distgcn.comm.transport.inprocess import InProcessTransport, World

    samples = []
    for n, degree in graphs:
        spec = f"synthetic:sbm,n={n},avg_degree={degree},features={features},classes={classes},seed=7"
        part = api.partition(spec, parts=1, model="random", seed=7)
        transport = InProcessTransport(0, 1, World(1))
        result = api.train(part, transport=transport, epochs=epochs, layers=model.layers, hidden=model.hidden,
                           dtype=model.dtype, optimizer=model.optimizer, dropout=model.dropout, conv=model.conv,
                           heads=model.heads, output_heads=model.output_heads, root_weight=model.root_weight,
                           threads=threads, quiet=True)
        times = [record["epoch_s"] for record in result.history[2:]] or [result.history[-1]["epoch_s"]]
        samples.append({"rows": int(part.a_hat.shape[0]), "nnz": int(part.a_hat.nnz),
                        "epoch_s": statistics.median(times)})
    return samples


def fit_rates(samples: list[dict]) -> ComputeRates:
    """Non-negative least squares of epoch_s on (nnz, rows, 1), each sample weighted by 1/epoch_s so that small
    and large graphs count alike (relative errors)."""
    from scipy.optimize import nnls

    design = np.array([[s["nnz"], s["rows"], 1.0] for s in samples], dtype=np.float64)
    target = np.array([s["epoch_s"] for s in samples], dtype=np.float64)
    weight = 1.0 / target
    coefficients, _ = nnls(design * weight[:, None], target * weight)
    return ComputeRates(*(float(c) for c in coefficients))


def partition_loads(a_hat, parts: np.ndarray, nparts: int) -> list[RankLoad]:
    """Each rank's load under a part vector, counted from Â: its rows, their nonzeros, and for every peer the rows
    of this rank that the peer's rows have a nonzero in (what it sends that peer per exchange)."""
    a = a_hat.tocsr()
    loads = []
    for rank in range(nparts):
        owned = np.flatnonzero(parts == rank)
        sent_to = {}
        for peer in range(nparts):
            if peer != rank:
                needed = np.unique(a[np.flatnonzero(parts == peer)].indices)
                rows = int(np.count_nonzero(parts[needed] == rank))
                if rows:
                    sent_to[peer] = rows
        loads.append(RankLoad(rows=len(owned), nnz=int(a[owned].nnz), sent_to=sent_to))
    return loads


def measure_distribution(model: ModelConfig, features: int, classes: int, epochs: int, threads: int | None,
                         rates: ComputeRates, comm, graph: tuple[int, float]) -> dict:
    """Train the largest calibration graph split at random over every rank, on MPI, and charge the slowest rank's
    compute beyond what ``rates`` give it to the halo values it sends and receives: ``per_halo_value_s``."""
    from distgcn import api
    from distgcn.comm.transport.mpi import MPITransport
    from distgcn.memory.from_sizes import epoch_exchange_widths

    n, degree = graph
    spec = f"synthetic:sbm,n={n},avg_degree={degree},features={features},classes={classes},seed=7"
    part = api.partition(spec, parts=comm.size, model="random", seed=7)
    result = api.train(part, transport=MPITransport(comm), epochs=epochs, layers=model.layers, hidden=model.hidden,
                       dtype=model.dtype, optimizer=model.optimizer, dropout=model.dropout, conv=model.conv,
                       heads=model.heads, output_heads=model.output_heads, root_weight=model.root_weight,
                       halo_window=model.halo_window, threads=threads, quiet=True)
    measured = statistics.median(record["slowest_compute_s"] for record in result.history[2:])
    loads = partition_loads(part.a_hat, np.asarray(part.parts), comm.size)
    columns = sum(epoch_exchange_widths(model, features, classes, comm.size))
    received = received_rows(loads)
    values = [(sum(load.sent_to.values()) + received[r]) * columns for r, load in enumerate(loads)]
    base = max(rates.epoch_s(load.nnz, load.rows) for load in loads)
    per_value = max(0.0, measured - base) / max(max(values), 1)  # compute_s counts the work outside the waits
    return {"graph": [n, degree], "slowest_compute_s": measured, "predicted_without_s": base,
            "most_halo_values": max(values), "per_halo_value_s": per_value}


def measure_network(comm, repeats: int = 200) -> dict | None:
    """Latency (half the round trip of an 8-byte message) and bandwidth (a large message's one-way time, from
    its round trip with an 8-byte reply) between rank 0 and the last rank; None with one rank. The large message
    is sized from a first 1 MiB probe to take about a quarter of a second (256 KiB to 8 MiB), so that a slow
    link is measured quickly and a fast one long enough."""
    if comm.size < 2:
        return None
    peer = comm.size - 1
    rank = comm.rank
    small = np.zeros(LATENCY_BYTES, np.uint8)

    def round_trip(message: np.ndarray, reply: np.ndarray) -> float:
        start = time.perf_counter()
        if rank == 0:
            comm.Send(message, dest=peer)
            comm.Recv(reply, source=peer)
        elif rank == peer:
            comm.Recv(message, source=0)
            comm.Send(reply, dest=0)
        return time.perf_counter() - start

    comm.Barrier()
    for _ in range(10):
        round_trip(small, small)
    trips = [round_trip(small, small) for _ in range(repeats)]
    latency = statistics.median(trips) / 2
    probe = np.zeros(PROBE_BYTES, np.uint8)
    round_trip(probe, small)  # the connection's first large message
    rate = PROBE_BYTES / max(round_trip(probe, small) - 2 * latency, 1e-9)
    size = comm.bcast(int(min(max(rate * BULK_SECONDS, PROBE_BYTES // 4), BANDWIDTH_BYTES)), root=0)
    large = np.zeros(size, np.uint8)
    bulk = [round_trip(large, small) for _ in range(3)]
    seconds = max(statistics.median(bulk) - 2 * latency, 1e-9)
    comm.Barrier()
    return {"latency_s": latency, "bandwidth_bytes_s": size / seconds, "between_ranks": [0, peer],
            "message_bytes": size}


def calibrate(model: ModelConfig, features: int, classes: int, *, epochs: int = 6, threads: int | None = None,
              network: bool = True, comm=None, graphs: tuple[tuple[int, float], ...] = GRAPHS) -> dict:
    """The calibration record (every rank returns it; rank 0 writes it). The warnings of the runs it times (a busy
    node, random labels) are printed once each, by rank 0, at the end."""
    said = io.StringIO()
    with redirect_stderr(said):
        record = _calibrate(model, features, classes, epochs, threads, network, comm, graphs)
    if comm is None or comm.rank == 0:
        first: dict[str, str] = {}  # the first of each kind ("this node is busy: ...")
        for line in said.getvalue().splitlines():
            if "warning: " in line:
                text = line.split("warning: ", 1)[1]
                first.setdefault(text.split(":", 1)[0], text)
        for text in first.values():
            print(f"distgcn: warning (calibration runs): {text}", file=sys.stderr)
    return record


def _calibrate(model: ModelConfig, features: int, classes: int, epochs: int, threads: int | None, network: bool,
               comm, graphs: tuple[tuple[int, float], ...]) -> dict:
    samples = measure_compute(model, features, classes, epochs, threads, graphs)
    ranks = 1
    measured_network = distribution = None
    if comm is not None:
        ranks = comm.size
        samples = [s for gathered in comm.allgather(samples) for s in gathered]
    rates = fit_rates(samples)
    if comm is not None and comm.size > 1:
        if network:
            measured_network = comm.bcast(measure_network(comm), root=0)
        largest = max(graphs, key=lambda g: (g[0], g[1]))
        distribution = measure_distribution(model, features, classes, epochs, threads, rates, comm, largest)
        rates = replace(rates, per_halo_value_s=distribution["per_halo_value_s"])
    return {"format": FORMAT, "version": VERSION, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "ranks": ranks, "threads": threads, "model": model.as_dict(),
            "features": features, "classes": classes, "epochs": epochs,
            "compute": asdict(rates), "samples": samples, "distribution": distribution,
            "network": measured_network}


