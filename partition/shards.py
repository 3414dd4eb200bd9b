"""Cut a partitioned graph into per-rank shards (local numbering + communication plan).

The shards are the format of :mod:`distgcn.shard`; :func:`distgcn.partition_dir.write_directory`
writes them to a partition directory (``distgcn partition``, :mod:`partition.precompute`), or
rank 0 sends them for the small-graph ``train --graph`` path (:mod:`partition.scatter`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from distgcn.config import VERTEX_ORDERS
from distgcn.graph import Graph
from distgcn.shard import Shard

from .metrics import comm_pairs


def local_orders(a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int, vertex_order: str) -> np.ndarray:
    """All vertices grouped by part (part 0's first), each part's vertices in their local row order.

    ``rcm`` renumbers a part's rows by reverse Cuthill-McKee on its owned block
    (pattern of B + Bᵀ): neighbours get nearby numbers, so the rows of H that
    one row of Â reads lie close in memory. On a randomly numbered R-MAT graph
    this made the local SpMM up to 1.6x faster (docs/performance.md).
    """
    if vertex_order not in VERTEX_ORDERS:
        raise ValueError(f"vertex order: expected one of {', '.join(VERTEX_ORDERS)}, got {vertex_order!r}")
    order = np.argsort(parts, kind="stable")
    if vertex_order == "natural":
        return order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(parts, minlength=nparts))))
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop - start < 3:
            continue
        owned = order[start:stop]
        block = a_hat[owned][:, owned]
        pattern = (abs(block) + abs(block.T)).tocsr()
        order[start:stop] = owned[reverse_cuthill_mckee(pattern, symmetric_mode=True)]
    return order


def iter_shards(graph: Graph, a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int, pid: str,
                vertex_order: str = "rcm", *, graph_fingerprint: str | None = None) -> Iterator[Shard]:
    """Yield the shard of each rank in rank order.

    ``graph_fingerprint``: ``graph.fingerprint()`` if the caller has it (hashing a 10^8-nonzero graph takes seconds).

    One pass over the nonzeros finds every (receiver, needed row) pair (the
    same pairs the partition metrics count); each rank's blocks and plan are
    then slices of sorted arrays, so the work is O(nnz log nnz + n + P), plus
    the local ordering (:func:`local_orders`).
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

    local_column = np.empty(n, dtype=np.int64)  # per rank: the local column of each global id its rows read

    graph_fingerprint = graph_fingerprint or graph.fingerprint()
    labels = graph.labels if graph.labels is not None else np.full(n, -1, dtype=np.int64)
    features = graph.features if graph.features is not None else np.zeros((n, 0), dtype=np.float32)
    masks = [m if m is not None else np.zeros(n, dtype=bool)
             for m in (graph.train_mask, graph.val_mask, graph.test_mask)]

    for rank in range(nparts):
        owned = order[part_starts[rank] : part_starts[rank + 1]]
        n_owned = owned.shape[0]
        halo_cols = recv_col[recv_bounds[rank] : recv_bounds[rank + 1]]
        halo_owner = recv_owner[recv_bounds[rank] : recv_bounds[rank + 1]]
        recv_peers, recv_counts = np.unique(halo_owner, return_counts=True)
        s_cols = send_col[send_bounds[rank] : send_bounds[rank + 1]]
        s_recv = send_receiver[send_bounds[rank] : send_bounds[rank + 1]]
        send_peers, send_counts = np.unique(s_recv, return_counts=True)

        block = a_hat[owned]
        # One table lookup per nonzero, not a binary search among the halo ids: each global id a rank's rows
        # read is one of its owned rows or one of its halo rows (entries of other ids are stale, never read).
        local_column[owned] = np.arange(n_owned)
        local_column[halo_cols] = np.arange(n_owned, n_owned + halo_cols.shape[0])
        local_cols = local_column[block.indices]
        local = sp.csr_matrix((block.data, local_cols, block.indptr), shape=(n_owned, n_owned + halo_cols.shape[0]))
        local.sort_indices()
        yield Shard(
            rank=rank,
            nparts=nparts,
            n_global=n,
            num_classes=graph.num_classes,
            partition_id=pid,
            graph_fingerprint=graph_fingerprint,
            global_ids=owned.copy(),
            halo_global_ids=halo_cols.copy(),
            owned_block=local[:, :n_owned].tocsr(),
            halo_block=local[:, n_owned:].tocsr(),
            send_peers=send_peers.astype(np.int64),
            send_offsets=np.concatenate(([0], np.cumsum(send_counts))).astype(np.int64),
            send_index=local_index[s_cols],
            recv_peers=recv_peers.astype(np.int64),
            recv_offsets=np.concatenate(([0], np.cumsum(recv_counts))).astype(np.int64),
            features=np.ascontiguousarray(features[owned]),
            labels=labels[owned].astype(np.int64),
            train_mask=masks[0][owned],
            val_mask=masks[1][owned],
            test_mask=masks[2][owned],
        )
