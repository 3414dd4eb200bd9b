"""One minibatch's piece of the distributed Â[S, S] and the halo plan restricted to the rows it needs.

Rank p holds the rows S ∩ owned(p). Of its halo rows it needs only those in S
that one of its batch rows references; it tells their owners so with one byte
per halo row (the reverse direction of the full plan), and each owner then
sends exactly those rows during the batch's SpMMs. Filtering both ends of
every pair with the same bytes keeps the sender's order equal to the
receiver's halo order, so the restricted plan is again contiguous per sender.
:func:`build_batch` cuts with scipy on the host; :func:`build_batch_on_device`
cuts the same blocks and plan with tensor operations where the sampler ran
(:mod:`distgcn.sampling.device`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.kernels.csr_tensors import CsrTensors, sorted_csr_on
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import HaloPlan, offsets_to_slices
from distgcn.spmm.plan_bytes import PlanBytes
from distgcn.spmm.product import is_symmetric


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


class ShardBlocksOn:
    """The shard's owned and halo blocks as tensors on a device: what batches are cut from."""

    def __init__(self, shard: Shard, device: torch.device):
        owned, halo = shard.owned_block.tocsr(), shard.halo_block.tocsr()
        self.owned, self.owned_position = sorted_csr_on(owned, device)
        self.halo, self.halo_position = sorted_csr_on(halo, device)
        """Each block sorted on the device, and where its entries were in the shard's block (None: in place)."""
        self.n_halo = shard.n_halo
        self.symmetric = is_symmetric(owned)
        """The owned block is its own transpose, and so is every batch's (the same rows and columns of it)."""


def _entries_of_rows(csr: CsrTensors, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the entries of ``rows`` in ``csr`` (row by row) and each one's index in ``rows``: work in
    proportion to those entries, not to the whole block."""
    starts = csr.indptr[rows]
    counts = csr.indptr[rows + 1] - starts
    total = int(counts.sum())
    which = torch.repeat_interleave(torch.arange(rows.shape[0], device=rows.device), counts, output_size=total)
    first = torch.cumsum(counts, 0) - counts
    return (starts - first)[which] + torch.arange(total, device=rows.device), which


@dataclass
class DeviceBatchBlocks:
    """:class:`BatchBlocks` cut on the device: rows and entry positions are tensors, the blocks :class:`CsrTensors`."""

    rows: torch.Tensor
    owned_block: CsrTensors
    halo_block: CsrTensors
    plan: HaloPlan
    owned_entries: torch.Tensor
    """Position in the shard's owned block (its scipy order) of each entry of ``owned_block``."""
    halo_entries: torch.Tensor


def _segment_counts(flags: torch.Tensor, slices: list[tuple[int, slice]]) -> list[int]:
    """How many ``flags`` are set in each slice (one copy to the host for all of them)."""
    if not slices:
        return []
    total = torch.zeros(flags.shape[0] + 1, dtype=torch.int64, device=flags.device)
    torch.cumsum(flags.long(), 0, out=total[1:])
    bounds = torch.tensor([[s.start, s.stop] for _, s in slices], dtype=torch.int64, device=flags.device)
    return (total[bounds[:, 1]] - total[bounds[:, 0]]).tolist()


def build_batch_on_device(blocks: ShardBlocksOn, plan_bytes: PlanBytes, owned_in: torch.Tensor,
                          halo_in: torch.Tensor) -> DeviceBatchBlocks:
    """:func:`build_batch` with tensor operations on the memberships' device, and the same result (collective)."""
    device = owned_in.device
    rows = torch.nonzero(owned_in).flatten()
    n = rows.shape[0]
    new_local = torch.cumsum(owned_in, 0) - 1
    o = blocks.owned
    positions, row = _entries_of_rows(o, rows)
    keep = owned_in[o.indices[positions]]
    kept = positions[keep]
    owned_block = CsrTensors.from_entries(row[keep], new_local[o.indices[kept]], o.values[kept], (n, n))
    owned_entries = kept if blocks.owned_position is None else blocks.owned_position[kept]
    h = blocks.halo
    positions, row = _entries_of_rows(h, rows)
    cols = h.indices[positions]
    need = halo_in & (torch.bincount(cols, minlength=blocks.n_halo) > 0)
    keep = need[cols]
    kept = positions[keep]
    halo_local = torch.cumsum(need, 0) - 1
    n_need = int(need.sum())
    halo_block = CsrTensors.from_entries(row[keep], halo_local[cols[keep]], h.values[kept], (n, n_need))
    halo_entries = kept if blocks.halo_position is None else blocks.halo_position[kept]
    wanted = plan_bytes.reverse(need.to(torch.uint8)) != 0  # per send_index entry: does the peer need it
    send_counts = _segment_counts(wanted, plan_bytes.send)
    recv_counts = _segment_counts(need, plan_bytes.recv)
    send_peers = [p for (p, _), c in zip(plan_bytes.send, send_counts) if c]
    recv_peers = [p for (p, _), c in zip(plan_bytes.recv, recv_counts) if c]
    index = new_local[plan_bytes.tensor("send_index", device)[wanted]]
    plan = HaloPlan(n_owned=int(rows.shape[0]), n_halo=n_need, send_peers=send_peers,
                    send_slices=offsets_to_slices(np.cumsum([0, *[c for c in send_counts if c]])),
                    send_index=index, recv_peers=recv_peers,
                    recv_slices=offsets_to_slices(np.cumsum([0, *[c for c in recv_counts if c]])))
    return DeviceBatchBlocks(rows, owned_block, halo_block, plan, owned_entries, halo_entries)
