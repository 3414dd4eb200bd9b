"""Predicting a full-batch epoch's time on P ranks from the partition, the model and two measured machines.

The epoch is modelled as its three parts, each bounded by the slowest rank or
link, as the metrics split a measured epoch (``compute_s``, ``comm_wait_s``,
``allreduce_s``):

- **compute**: rank r's local work, ``per_nnz_s · nnz_r + per_row_s · rows_r +
  fixed_s``, with the rates calibrated on the user's nodes for this model
  (:mod:`distgcn.performance.calibration`); the slowest rank sets it, since
  every halo exchange makes the others wait for it;
- **halo**: for every exchange of the epoch (one per sparse product: training
  forward, backward, evaluation forward; :func:`distgcn.memory.from_sizes.epoch_exchange_widths`),
  the longer of two things that go on together: the link's transfer (the
  network's latency times the most messages a node's link carries, plus the
  most bytes one node sends or receives over its link, over the bandwidth;
  ranks that share a node exchange through memory, not the link) and the CPU
  work of moving the busiest rank's halo values (packing, unpacking, the copies
  of MPI and the kernel: ``per_halo_value_s`` per value sent or received);
- **allreduce**: each gradient tensor's sum over P ranks (recursive doubling:
  ⌈log₂ P⌉ rounds of a latency, and 2 (P−1)/P of its bytes over the link), plus
  the epoch's metric reductions.

Two epoch figures are given: ``serial_s``, the prediction (the parts added: no
halo transfer hidden behind the local product), and ``overlapped_s``, a lower
bound (the transfer of each exchange hidden behind an equal share of the
slowest rank's compute, as far as it reaches; over TCP only the owned block's
product hides it: docs/network.md, "Overlap").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

METRIC_REDUCTIONS = 2
"""Small collectives per epoch outside the training step: the metrics' sum and the loss's."""


@dataclass(frozen=True)
class ComputeRates:
    """One rank's local compute per epoch, as a function of its shard, for one model on one node."""

    per_nnz_s: float
    """Seconds per nonzero of the rank's Â rows (owned and halo blocks) per epoch."""
    per_row_s: float
    """Seconds per owned row per epoch (dense products, dropout, activations, the loss, the optimizer's rows)."""
    fixed_s: float
    """Seconds per epoch whatever the shard's size (launching the kernels, the optimizer's step)."""
    per_halo_value_s: float = 0.0
    """Seconds of CPU work per halo value a rank sends or receives (packing, unpacking, MPI's and the kernel's
    copies): measured by a distributed run (calibration.py); 0 without one."""

    def epoch_s(self, nnz: int, rows: int) -> float:
        """Local work of a rank with ``nnz`` nonzeros and ``rows`` rows, without the halo's."""
        return self.per_nnz_s * nnz + self.per_row_s * rows + self.fixed_s


@dataclass(frozen=True)
class Network:
    """A node's link: a message's start-up cost and the bytes per second each way."""

    latency_s: float
    bandwidth_bytes_s: float

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and self.bandwidth_bytes_s > 0):
            raise ValueError(f"network: latency {self.latency_s} s and bandwidth {self.bandwidth_bytes_s} B/s")


@dataclass(frozen=True)
class RankLoad:
    """What one rank computes and sends per sparse product: from its shard (:func:`rank_load`)."""

    rows: int
    nnz: int
    sent_to: dict[int, int]
    """Peer rank -> rows this rank sends it per exchange."""


def rank_load(shard) -> RankLoad:
    """The load of a loaded :class:`~distgcn.shard.rank_shard.Shard`."""
    counts = np.diff(shard.send_offsets)
    return RankLoad(rows=int(shard.n_owned), nnz=int(shard.owned_block.nnz + shard.halo_block.nnz),
                    sent_to={int(peer): int(rows) for peer, rows in zip(shard.send_peers, counts)})


def received_rows(loads: Sequence[RankLoad]) -> list[int]:
    """Rows each rank receives per exchange: what the others send it."""
    received = [0] * len(loads)
    for load in loads:
        for peer, rows in load.sent_to.items():
            received[peer] += rows
    return received


def _node_traffic(loads: Sequence[RankLoad], ranks_per_node: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows out of and into each node per exchange over its link, and the most messages one node's link carries
    per exchange (ranks on one node exchange through memory)."""
    nodes = -(-len(loads) // ranks_per_node)
    out_rows, in_rows = np.zeros(nodes, np.int64), np.zeros(nodes, np.int64)
    out_msgs, in_msgs = np.zeros(nodes, np.int64), np.zeros(nodes, np.int64)
    for rank, load in enumerate(loads):
        for peer, rows in load.sent_to.items():
            a, b = rank // ranks_per_node, peer // ranks_per_node
            if a != b:
                out_rows[a] += rows
                in_rows[b] += rows
                out_msgs[a] += 1
                in_msgs[b] += 1
    return out_rows, in_rows, int(np.maximum(out_msgs, in_msgs).max(initial=0))


def predict_epoch(loads: Sequence[RankLoad], exchange_widths: Sequence[int], itemsize: int,
                  gradient_sizes: Sequence[int], rates: ComputeRates, network: Network,
                  ranks_per_node: int = 1) -> dict:
    """The predicted epoch of a full-batch run: each rank's compute, the halo and allreduce times, the two
    epoch figures (module docstring) and which rank is slowest.

    ``exchange_widths``: columns of each halo exchange of the epoch; ``itemsize``: bytes per halo value;
    ``gradient_sizes``: elements of each parameter (one allreduce each).
    """
    parts = len(loads)
    received = received_rows(loads)
    moved = [sum(load.sent_to.values()) + received[r] for r, load in enumerate(loads)]
    local = [rates.epoch_s(load.nnz, load.rows) for load in loads]
    slowest = int(np.argmax(local))
    out_rows, in_rows, messages = _node_traffic(loads, ranks_per_node)
    link_rows = int(max(out_rows.max(initial=0), in_rows.max(initial=0)))
    link = [messages * network.latency_s + link_rows * width * itemsize / network.bandwidth_bytes_s
            for width in exchange_widths]
    cpu = [rates.per_halo_value_s * max(moved, default=0) * width for width in exchange_widths]
    per_exchange = [max(wire, work) for wire, work in zip(link, cpu)]
    halo_s = sum(per_exchange)
    nodes = -(-parts // ranks_per_node)
    rounds = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    share = 2 * (nodes - 1) / nodes if nodes > 1 else 0.0
    reductions = list(gradient_sizes) + [4] * METRIC_REDUCTIONS
    allreduce_s = sum(rounds * network.latency_s + share * size * itemsize / network.bandwidth_bytes_s
                      for size in reductions)
    compute_s = local[slowest]
    # each exchange may hide behind its share of the slowest rank's compute
    per_product = compute_s / max(len(exchange_widths), 1)
    exposed = sum(max(0.0, t - per_product) for t in per_exchange)
    columns = sum(exchange_widths)
    return {
        "ranks": [{"rank": r, "rows": load.rows, "nnz": load.nnz, "compute_s": local[r],
                   "distribution_s": rates.per_halo_value_s * moved[r] * columns,
                   "rows_sent": sum(load.sent_to.values()), "rows_received": received[r],
                   "messages_sent": len(load.sent_to)}
                  for r, load in enumerate(loads)],
        "slowest_rank": slowest,
        "compute_s": compute_s,
        "link_s": sum(link),
        "distribution_s": sum(cpu),
        "halo_s": halo_s,
        "halo_exposed_s": exposed,
        "allreduce_s": allreduce_s,
        "serial_s": compute_s + halo_s + allreduce_s,
        "overlapped_s": compute_s + exposed + allreduce_s,
        "link_rows_per_exchange": link_rows,
        "link_messages_per_exchange": messages,
        "exchanges": len(exchange_widths),
        "ranks_per_node": ranks_per_node,
        "rates": asdict(rates),
        "network": asdict(network),
    }
