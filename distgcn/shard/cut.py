"""Cut a partitioned graph into per-rank shards (local numbering + communication plan).

The shards are the format of :mod:`distgcn.shard.rank_shard`; :func:`distgcn.shard.directory.write_directory`
writes them to a partition directory (``distgcn partition``, :mod:`distgcn.shard.write`), or
rank 0 sends them for the small-graph ``train --graph`` path (:mod:`distgcn.shard.scatter`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from distgcn.config import VERTEX_ORDER, VERTEX_ORDERS
from distgcn.data.graph import Graph
from distgcn.partitioning.metrics import comm_pairs
from distgcn.shard.directory import graph_fields
from distgcn.shard.rank_shard import Shard


def part_order(block: sp.csr_matrix, vertex_order: str) -> np.ndarray:
    """The local row order of one part's vertices, as positions into them (ascending global ids).

    ``block`` is the part's owned block of Â (its rows and columns in ascending global id). ``rcm``
    renumbers the rows by reverse Cuthill-McKee on the pattern of B + Bᵀ: neighbours get nearby numbers, so
    the rows of H that one row of Â reads lie close in memory. On a randomly numbered R-MAT graph this made
    the local SpMM up to 1.6x faster (``benchmarks/spmm_kernels.py``).
    """
    if vertex_order not in VERTEX_ORDERS:
        raise ValueError(f"vertex order: expected one of {', '.join(VERTEX_ORDERS)}, got {vertex_order!r}")
    size = block.shape[0]
    if vertex_order == "natural" or size < 3:
        return np.arange(size)
    pattern = (abs(block) + abs(block.T)).tocsr()
    return reverse_cuthill_mckee(pattern, symmetric_mode=True)


def local_orders(a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int, vertex_order: str) -> np.ndarray:
    """All vertices grouped by part (part 0's first), each part's vertices in their local row order
    (:func:`part_order`)."""
    if vertex_order not in VERTEX_ORDERS:
        raise ValueError(f"vertex order: expected one of {', '.join(VERTEX_ORDERS)}, got {vertex_order!r}")
    order = np.argsort(parts, kind="stable")
    if vertex_order == "natural":
        return order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(parts, minlength=nparts))))
    for start, stop in zip(bounds[:-1], bounds[1:]):
        owned = order[start:stop]
        order[start:stop] = owned[part_order(a_hat[owned][:, owned], vertex_order)]
    return order


@dataclass(frozen=True)
class ShardIdentity:
    """What every shard of one partition carries alike."""

    nparts: int
    n_global: int
    num_classes: int
    partition_id: str
    graph_fingerprint: str


@dataclass
class OwnedRows:
    """A rank's rows of Â (global column ids) and of the vertex data, in its local row order."""

    block: sp.csr_matrix
    features: np.ndarray
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray


VERTEX_FIELDS = ("features", "labels", "train_mask", "val_mask", "test_mask")
"""The fields of :class:`OwnedRows` that hold per-vertex arrays (all but the block of Â)."""


def vertex_arrays(graph: Graph) -> dict[str, np.ndarray]:
    """The per-vertex arrays a shard takes its rows of, named as :class:`OwnedRows`' fields: no features are
    zero columns, no labels -1, no mask all False."""
    n = graph.num_vertices
    labels = graph.labels if graph.labels is not None else np.full(n, -1, dtype=np.int64)
    arrays = {"features": graph.features if graph.features is not None else np.zeros((n, 0), dtype=np.float32),
              "labels": labels.astype(np.int64, copy=False)}
    for name in VERTEX_FIELDS[2:]:
        mask = getattr(graph, name)
        arrays[name] = mask if mask is not None else np.zeros(n, dtype=bool)
    return arrays


@dataclass(frozen=True)
class GraphData:
    """What cutting shards and writing meta.json take of a graph once Â exists: not its adjacency.

    The adjacency is about as large as Â; ``distgcn partition`` keeps this record instead of the graph, so
    that the adjacency is freed before the partitioning, the metrics and the shards (docs/scale.md).
    """

    arrays: dict[str, np.ndarray]
    """:func:`vertex_arrays`."""
    num_classes: int
    fingerprint: str
    """``Graph.fingerprint()``: hashes the adjacency, so it is taken while the adjacency exists."""
    fields: dict
    """meta.json's ``graph`` fields (:func:`distgcn.shard.directory.graph_fields`)."""

    @classmethod
    def of(cls, graph: Graph, a_hat: sp.csr_matrix, fingerprint: str | None = None) -> GraphData:
        """The record of ``graph`` and its Â; ``fingerprint``: ``graph.fingerprint()`` if the caller has it."""
        return cls(vertex_arrays(graph), graph.num_classes, fingerprint or graph.fingerprint(),
                   graph_fields(graph, a_hat))


def graph_rows(data: GraphData, a_hat: sp.csr_matrix, rows: np.ndarray) -> OwnedRows:
    """The rows ``rows`` of a graph in memory."""
    return OwnedRows(a_hat[rows], **{name: np.ascontiguousarray(values[rows]) for name, values in data.arrays.items()})


@dataclass
class Plan:
    """A rank's halo (rows it receives, grouped by owner, by global id within one) and the rows it sends
    (grouped by receiver, by global id within one; ``send_index``: their local row numbers)."""

    halo_cols: np.ndarray
    halo_owner: np.ndarray
    send_cols: np.ndarray
    send_receiver: np.ndarray
    send_index: np.ndarray


def assemble_shard(rank: int, identity: ShardIdentity, owned: np.ndarray, rows: OwnedRows, plan: Plan,
                   local_column: np.ndarray) -> Shard:
    """One rank's shard from its rows in local order (global ids ``owned``) and its plan.

    ``local_column`` is scratch space of n entries (reused across ranks by :func:`iter_shards`).
    """
    n_owned = owned.shape[0]
    recv_peers, recv_counts = np.unique(plan.halo_owner, return_counts=True)
    send_peers, send_counts = np.unique(plan.send_receiver, return_counts=True)
    # One table lookup per nonzero, not a binary search among the halo ids: each global id a rank's rows
    # read is one of its owned rows or one of its halo rows (entries of other ids are stale, never read).
    local_column[owned] = np.arange(n_owned)
    local_column[plan.halo_cols] = np.arange(n_owned, n_owned + plan.halo_cols.shape[0])
    block = rows.block
    local = sp.csr_matrix((block.data, local_column[block.indices], block.indptr),
                          shape=(n_owned, n_owned + plan.halo_cols.shape[0]))
    local.sort_indices()
    return Shard(
        rank=rank,
        nparts=identity.nparts,
        n_global=identity.n_global,
        num_classes=identity.num_classes,
        partition_id=identity.partition_id,
        graph_fingerprint=identity.graph_fingerprint,
        global_ids=owned.copy(),
        halo_global_ids=plan.halo_cols.copy(),
        owned_block=local[:, :n_owned].tocsr(),
        halo_block=local[:, n_owned:].tocsr(),
        send_peers=send_peers.astype(np.int64),
        send_offsets=np.concatenate(([0], np.cumsum(send_counts))).astype(np.int64),
        send_index=plan.send_index,
        recv_peers=recv_peers.astype(np.int64),
        recv_offsets=np.concatenate(([0], np.cumsum(recv_counts))).astype(np.int64),
        features=rows.features,
        labels=rows.labels,
        train_mask=rows.train_mask,
        val_mask=rows.val_mask,
        test_mask=rows.test_mask,
    )


def iter_shards(graph: Graph, a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int, pid: str,
                vertex_order: str = VERTEX_ORDER, *, graph_fingerprint: str | None = None) -> Iterator[Shard]:
    """Yield the shard of each rank in rank order (:func:`cut_shards` of the graph's :class:`GraphData`).

    ``graph_fingerprint``: ``graph.fingerprint()`` if the caller has it (hashing a 10^8-nonzero graph takes seconds).
    """
    return cut_shards(GraphData.of(graph, a_hat, graph_fingerprint), a_hat, parts, nparts, pid, vertex_order)


def cut_shards(data: GraphData, a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int, pid: str,
               vertex_order: str = VERTEX_ORDER) -> Iterator[Shard]:
    """Yield the shard of each rank in rank order.

    One pass over the nonzeros finds every (receiver, needed row) pair (the
    same pairs the partition metrics count); each rank's blocks and plan are
    then slices of sorted arrays, so the work is O(nnz log nnz + n + P), plus
    the local ordering (:func:`local_orders`). :mod:`distgcn.shard.rank_shards` cuts
    the same shards one per rank, each from its own rows.
    """
    n = a_hat.shape[0]
    parts = np.asarray(parts, dtype=np.int64)
    # Position of every vertex inside its own part (its local row index there).
    order = local_orders(a_hat, parts, nparts, vertex_order)
    part_sizes = np.bincount(parts, minlength=nparts)
    part_starts = np.concatenate(([0], np.cumsum(part_sizes)))
    local_index = np.empty(n, dtype=np.int64)
    local_index[order] = np.arange(n, dtype=np.int64) - np.repeat(part_starts[:-1], part_sizes)

    # Every H row that crosses ranks, once per (row, receiver), sorted by (owner, receiver, row):
    # the senders' order. Receivers group their halo rows by owner, then by global id.
    send_col, send_receiver = comm_pairs(a_hat, parts)
    send_owner = parts[send_col]
    send_bounds = np.searchsorted(send_owner, np.arange(nparts + 1))
    by_receiver = np.lexsort((send_col, send_owner, send_receiver))
    recv_col = send_col[by_receiver]
    recv_owner = send_owner[by_receiver]
    recv_bounds = np.searchsorted(send_receiver[by_receiver], np.arange(nparts + 1))
    del send_owner, by_receiver  # two arrays of every pair, not kept while the shards are cut

    local_column = np.empty(n, dtype=np.int64)  # per rank: the local column of each global id its rows read
    identity = ShardIdentity(nparts, n, data.num_classes, pid, data.fingerprint)
    for rank in range(nparts):
        owned = order[part_starts[rank] : part_starts[rank + 1]]
        sends = slice(send_bounds[rank], send_bounds[rank + 1])
        receives = slice(recv_bounds[rank], recv_bounds[rank + 1])
        plan = Plan(recv_col[receives], recv_owner[receives], send_col[sends], send_receiver[sends],
                    local_index[send_col[sends]])
        yield assemble_shard(rank, identity, owned, graph_rows(data, a_hat, owned), plan, local_column)
