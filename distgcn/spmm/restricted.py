"""One minibatch's piece of the distributed Â[S, S] and the halo plan restricted to the rows it needs.

Rank p holds the rows S ∩ owned(p). Of its halo rows it needs only those in S
that one of its batch rows references; it tells their owners so with one byte
per halo row (the reverse direction of the full plan), and each owner then
sends exactly those rows during the batch's SpMMs. Filtering both ends of
every pair with the same bytes keeps the sender's order equal to the
receiver's halo order, so the restricted plan is again contiguous per sender.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import HaloPlan, offsets_to_slices
from distgcn.spmm.plan_bytes import PlanBytes


@dataclass
class BatchBlocks:
    """A batch on this rank: its rows (owned local ids), blocks of Â[S, S] and the restricted plan."""

    rows: np.ndarray
    owned_block: sp.csr_matrix
    halo_block: sp.csr_matrix
    plan: HaloPlan
    owned_entries: np.ndarray
    """Position in the shard's owned block of each entry of ``owned_block`` (for per-entry weights)."""
    halo_entries: np.ndarray


def _select(block: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """block[rows][:, cols] and the position in ``block`` of each kept entry."""
    ids = sp.csr_matrix((np.arange(1, block.nnz + 1, dtype=np.float64), block.indices, block.indptr),
                        shape=block.shape)[rows][:, cols]
    ids.sort_indices()
    positions = ids.data.astype(np.int64) - 1
    return sp.csr_matrix((block.data[positions], ids.indices, ids.indptr), shape=ids.shape), positions


def build_batch(shard: Shard, plan_bytes: PlanBytes, owned_in: np.ndarray, halo_in: np.ndarray,
                device: torch.device) -> BatchBlocks:
    """The batch's blocks and restricted plan (collective: one reverse byte exchange)."""
    rows = np.flatnonzero(owned_in)
    owned_block, owned_entries = _select(shard.owned_block.tocsr(), rows, rows)
    halo_rows = shard.halo_block.tocsr()[rows]
    need = halo_in & (np.bincount(halo_rows.indices, minlength=shard.n_halo) > 0)
    halo_cols = np.flatnonzero(need)
    halo_block, halo_entries = _select(shard.halo_block.tocsr(), rows, halo_cols)
    wanted = plan_bytes.reverse(need.astype(np.uint8)) != 0  # per send_index entry: does the peer need it
    new_local = np.cumsum(owned_in) - 1
    send_peers, send_counts, send_index = [], [], []
    for peer, s in plan_bytes.send:
        chosen = plan_bytes.send_index[s][wanted[s]]
        if chosen.size:
            send_peers.append(peer)
            send_counts.append(int(chosen.size))
            send_index.append(new_local[chosen])
    recv_peers, recv_counts = [], []
    for peer, s in plan_bytes.recv:
        count = int(need[s].sum())
        if count:
            recv_peers.append(peer)
            recv_counts.append(count)
    index = np.concatenate(send_index) if send_index else np.zeros(0, dtype=np.int64)
    plan = HaloPlan(n_owned=int(rows.size), n_halo=int(halo_cols.size), send_peers=send_peers,
                    send_slices=offsets_to_slices(np.cumsum([0, *send_counts])),
                    send_index=torch.from_numpy(index).to(device), recv_peers=recv_peers,
                    recv_slices=offsets_to_slices(np.cumsum([0, *recv_counts])))
    return BatchBlocks(rows, owned_block, halo_block, plan, owned_entries, halo_entries)
