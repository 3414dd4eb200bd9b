"""Shards cut by the ranks from the rows they read themselves: no process ever holds the whole graph.

The distributed counterpart of :mod:`distgcn.shard.rank_shards` (where rank 0 reads and partitions first).
Each rank holds a contiguous range of vertices with their rows of Â and vertex data
(:func:`distgcn.data.distributed.load.load_rank_graph`) and the part vector. Then

1. every row travels to the rank of its part (one all-to-all); a rank receives its part's rows in
   ascending global id, the order one process cuts them in, and orders them locally
   (:func:`distgcn.shard.cut.part_order`);
2. every nonzero (v, c) of a row whose column c another rank owns travels to that owner as (c, v) (a second
   all-to-all): the owner learns which of its rows each peer needs (its sends, by receiver and id: the
   receiver's halo, by owner and id) and the cut edges at its vertices, for the metrics;
3. each rank assembles its shard (:func:`distgcn.shard.cut.assemble_shard`) and writes it.

So the shard equals the one :func:`distgcn.shard.cut.cut_shards` cuts, and the counts are
:class:`distgcn.shard.rank_shards.RankCounts`, summed as there.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from distgcn.data.adjacency import sorted_unique
from distgcn.data.distributed.graph import VERTEX_ARRAYS, RankGraph
from distgcn.data.distributed.ids import Exchanging
from distgcn.io.page_cache import drop_pages, return_freed_heap, spilled
from distgcn.shard.cut import OwnedRows, Plan, ShardIdentity, assemble_shard, part_order
from distgcn.shard.rank_shard import Shard
from distgcn.shard.rank_shards import RankCounts, _remote_pairs

TRANSIT_BYTES = 1 << 26
"""About how much of one piece of rows travels in one message (it is held pickled and unpickled at both ends)."""
FEATURE_TRANSIT_BYTES = 1 << 24
"""About how many bytes of features a rank receives in one round: they arrive beside the part's features, at
the cut's peak (:func:`features_to_owners`)."""
ROW_ARRAYS = tuple(name for name in VERTEX_ARRAYS if name != "features")
"""What travels with the rows of Â; the features travel by themselves (:func:`features_to_owners`)."""


def rows_to_owners(group: Exchanging, graph: RankGraph, parts: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix, dict]:
    """(this rank's vertices in ascending id, their rows of Â, their labels and masks), gathered from the ranks
    that read them; collective. ``graph``'s rows of Â, labels and masks are released here; its features stay,
    for :func:`features_to_owners` once the shard's row order is known.

    A rank's rows are first split by destination; then the pieces go one peer a round (rank r sends to r + k
    and receives from r - k in round k), a few rows at a time (:data:`TRANSIT_BYTES`), each piece dropped once
    sent and copied into arrays allocated for what will arrive: a rank holds its share once, what it receives
    once, and a message's worth in transit.
    """
    rank, size = group.rank, group.size
    mine_read = parts[graph.first : graph.first + graph.rows]
    order = np.argsort(mine_read, kind="stable")  # grouped by destination, ascending ids within one
    bounds = np.searchsorted(mine_read[order], np.arange(size + 1))
    row_bytes = (graph.a_hat.nnz * 16 / max(graph.rows, 1)) + sum(
        getattr(graph, name)[:1].nbytes for name in ROW_ARRAYS) + 16
    pieces: list[dict | None] = []
    for dest in range(size):
        rows = order[bounds[dest] : bounds[dest + 1]]
        block = graph.a_hat[rows]
        pieces.append({"ids": rows + graph.first, "lengths": np.diff(block.indptr), "indices": block.indices,
                       "data": block.data, **{name: getattr(graph, name)[rows] for name in ROW_ARRAYS}})
    graph.a_hat = None
    for name in ROW_ARRAYS:
        setattr(graph, name, None)
    del order
    per_message = max(1, int(TRANSIT_BYTES // max(max(group.allgather_object(row_bytes)), 1)))
    counts = group.allgather_object([(len(piece["ids"]), len(piece["indices"])) for piece in pieces])
    came = [counts[source][rank] for source in range(size)]
    row_at = np.concatenate([[0], np.cumsum([c[0] for c in came])]).astype(np.int64)
    nnz_at = np.concatenate([[0], np.cumsum([c[1] for c in came])]).astype(np.int64)
    arrived = {name: np.empty((int(nnz_at[-1] if name in ("indices", "data") else row_at[-1]), *values.shape[1:]),
                              dtype=values.dtype) for name, values in pieces[rank].items()}
    for shift in range(size):
        dest, source = (rank + shift) % size, (rank - shift) % size
        messages = max(-(-counts[r][(r + shift) % size][0] // per_message) for r in range(size))
        piece, pieces[dest] = pieces[dest], None
        starts = np.concatenate([[0], np.cumsum(piece["lengths"])])
        row_in, nnz_in = int(row_at[source]), int(nnz_at[source])
        for k in range(messages):
            first, stop = min(k * per_message, len(piece["ids"])), min((k + 1) * per_message, len(piece["ids"]))
            outgoing: list[dict | None] = [None] * size
            outgoing[dest] = {name: values[starts[first] : starts[stop]] if name in ("indices", "data")
                              else values[first:stop] for name, values in piece.items()}
            message = group.alltoall_object(outgoing)[source]
            del outgoing
            rows_in, entries_in = len(message["ids"]), len(message["indices"])
            for name, values in message.items():
                at = nnz_in if name in ("indices", "data") else row_in
                arrived[name][at : at + len(values)] = values
            row_in, nnz_in = row_in + rows_in, nnz_in + entries_in
            del message
        del piece
    indptr = np.concatenate([[0], np.cumsum(arrived.pop("lengths"))]).astype(np.int64)
    block = sp.csr_matrix((arrived.pop("data"), arrived.pop("indices"), indptr),
                          shape=(int(row_at[-1]), graph.n))
    ids = arrived.pop("ids").astype(np.int64, copy=False)
    return ids, block, arrived


def features_to_owners(group: Exchanging, graph: RankGraph, parts: np.ndarray, position: np.ndarray) -> np.ndarray:
    """This rank's part's feature rows, the one that arrives i-th (in the order :func:`rows_to_owners` delivers
    rows) at row ``position[i]``; collective. ``graph``'s features are released here.

    The features travel last, into the array the shard keeps, in its final row order: a rank never holds its
    part's features twice, nor beside the temporaries of the cut. The sender reads its rows in order, a chunk a
    round, every rank sending each peer that chunk's rows of its part at once; a chunk's pages are returned to
    the page cache once sent (:func:`distgcn.io.page_cache.drop_pages`: the features are a file mapping by then),
    so a rank holds what it receives and a chunk in transit, never its share.
    """
    features, rank, size = graph.features, group.rank, group.size
    mine_read = parts[graph.first : graph.first + graph.rows]
    came = np.array(group.allgather_object(np.bincount(mine_read, minlength=size)))[:, rank]
    filled = np.concatenate([[0], np.cumsum(came)[:-1]]).astype(np.int64)
    out = np.empty((len(position), *features.shape[1:]), dtype=features.dtype)
    chunk = max(1, int(FEATURE_TRANSIT_BYTES // (size * max(features[:1].nbytes, 1))))  # P chunks' worth arrive
    rounds = max(group.allgather_object(-(-graph.rows // chunk)))
    for k in range(rounds):
        lo, hi = min(k * chunk, graph.rows), min((k + 1) * chunk, graph.rows)
        values = np.array(features[lo:hi])
        drop_pages(features, lo, hi)
        order = np.argsort(mine_read[lo:hi], kind="stable")
        bounds = np.searchsorted(mine_read[lo:hi][order], np.arange(size + 1))
        received = group.alltoall_object([values[order[bounds[d] : bounds[d + 1]]] for d in range(size)])
        del values, order
        for source, rows in enumerate(received):
            out[position[filled[source] : filled[source] + len(rows)]] = rows
            filled[source] += len(rows)
        del received
    graph.features = None
    return out


def cut_from_rows(group: Exchanging, graph: RankGraph, parts: np.ndarray, identity: ShardIdentity,
                  vertex_order: str) -> tuple[Shard, RankCounts]:
    """This rank's shard (its part's rows, from every rank that read them) and its share of the metrics;
    collective."""
    rank, n = group.rank, graph.n
    graph.features = spilled(graph.features)  # they wait in the page cache until they travel, last
    mine, block, vertex = rows_to_owners(group, graph, parts)
    local = part_order(block[:, mine], vertex_order)
    owned = mine[local]
    del mine
    block = block[local]
    vertex = {name: np.ascontiguousarray(values[local]) for name, values in vertex.items()}
    cols = block.indices.astype(np.int64)
    col_owner = parts[cols]
    halo_owner, halo_cols = _remote_pairs(col_owner, cols, rank, n)
    remote = col_owner != rank
    rows_of = np.repeat(owned, np.diff(block.indptr))
    local_read = sorted_unique(cols[~remote])
    pairs = cols[remote] * n + rows_of[remote]  # (column, reader): told to the column's owner
    own_cut = rows_of[remote] * n + cols[remote]
    order = np.argsort(col_owner[remote], kind="stable")
    owners = col_owner[remote][order]
    pairs = pairs[order]
    cuts = np.searchsorted(owners, np.arange(group.size + 1))
    del cols, col_owner, remote, rows_of, order, owners
    told = group.alltoall_object([pairs[cuts[d] : cuts[d + 1]] for d in range(group.size)])
    del pairs
    send_cols = [sorted_unique(keys // n) for keys in told]
    send_receiver = np.concatenate([np.full(len(c), r, dtype=np.int64) for r, c in enumerate(send_cols)])
    send_cols = np.concatenate(send_cols).astype(np.int64)
    neighbours = sorted_unique(np.concatenate([own_cut, *told]))
    del told, own_cut
    counts = RankCounts(
        sent=int(send_cols.shape[0]), received=int(halo_cols.shape[0]),
        messages_sent=int(sorted_unique(send_receiver).shape[0]),
        messages_received=int(sorted_unique(halo_owner).shape[0]),
        nonzeros=int(np.count_nonzero(block.data)), size=int(owned.shape[0]),
        connectivity=int(local_read.shape[0] + send_cols.shape[0]
                         - np.union1d(local_read, send_cols).shape[0]),
        cut_pairs=int(neighbours.shape[0]))
    local_column = np.empty(n, dtype=np.int64)
    local_column[owned] = np.arange(owned.shape[0])
    plan = Plan(halo_cols, halo_owner, send_cols, send_receiver, local_column[send_cols])
    position = np.empty(local.shape[0], dtype=np.int64)
    position[local] = np.arange(local.shape[0])
    del local
    # the shard is assembled first and the cut's arrays dropped; then the features arrive into it
    arriving = np.empty((0, *graph.features.shape[1:]), dtype=graph.features.dtype)
    shard = assemble_shard(rank, identity, owned, OwnedRows(block, features=arriving, **vertex), plan, local_column)
    del block, vertex, plan, local_column, owned
    return_freed_heap()  # the cut's temporaries, before the part's features arrive
    shard.features = features_to_owners(group, graph, parts, position)
    return shard, counts
