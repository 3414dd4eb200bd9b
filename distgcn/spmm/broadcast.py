"""``train --comm broadcast``: the CAGNET-style 1D algorithm, as a peer to compare the halo exchange with.

Every rank sends its whole block of H to every other rank at every SpMM
(CAGNET broadcasts it; point-to-point sends of the same rows move the same
volume), whatever Â's sparsity needs. It is expressed as a halo plan whose
halo is every row owned elsewhere, so the SpMM, its overlap and its counters
are the ones the halo mode uses: only the plan differs.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.comm.transport import Transport
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import HaloPlan, offsets_to_slices


def broadcast_plan(shard: Shard, transport: Transport,
                   device: torch.device = torch.device("cpu")) -> tuple[HaloPlan, sp.csr_matrix]:
    """The all-rows plan and the halo block renumbered to its columns (collective: gathers owned ids)."""
    owned = transport.allgather_object(shard.global_ids)
    peers = [p for p in range(shard.nparts) if p != shard.rank]
    offsets = np.concatenate([[0], np.cumsum([len(owned[p]) for p in peers])]).astype(np.int64)
    halo = shard.halo_block.tocoo()
    sender = np.repeat(np.asarray(shard.recv_peers, dtype=np.int64), np.diff(shard.recv_offsets))[halo.col]
    peer_index = sender - (sender > shard.rank)
    column = np.empty_like(peer_index)
    global_id = shard.halo_global_ids[halo.col]
    for k, peer in enumerate(peers):
        here = peer_index == k
        by_id = np.argsort(owned[peer])  # owned rows are in the owner's local order, not by id
        column[here] = offsets[k] + by_id[np.searchsorted(owned[peer], global_id[here], sorter=by_id)]
    halo_block = sp.csr_matrix((halo.data, (halo.row, column)), shape=(shard.n_owned, int(offsets[-1])))
    n = shard.n_owned
    send_index = np.tile(np.arange(n, dtype=np.int64), len(peers))  # one copy per peer: backward sums them
    plan = HaloPlan(n_owned=n, n_halo=int(offsets[-1]), send_peers=peers,
                    send_slices=offsets_to_slices(np.arange(len(peers) + 1) * n),
                    send_index=torch.from_numpy(send_index).to(device), recv_peers=peers,
                    recv_slices=offsets_to_slices(offsets))
    return plan, halo_block
