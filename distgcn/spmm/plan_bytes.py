"""Small per-row messages over a shard's halo plan: values forward to halo copies, or back to owners.

Sampling needs to move one byte (membership) or one float (a partial sum) per
halo row, in the same pairs as the SpMM's halo exchange; these helpers do it
with the transport's point-to-point exchange and no global communication.
Random walks also send a variable number of items (walkers) from halo copies
to the rows' owners (:meth:`PlanBytes.to_owners`).
"""

from __future__ import annotations

import numpy as np
import torch

from distgcn.comm.transport import Transport
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import offsets_to_slices


class PlanBytes:
    """Forward (owner -> halo copies) and reverse (halo copies -> owner) exchanges of one value per row."""

    def __init__(self, shard: Shard, transport: Transport):
        self.transport = transport
        self.send_index = np.asarray(shard.send_index, dtype=np.int64)
        self.send = [(int(p), s) for p, s in zip(shard.send_peers, offsets_to_slices(shard.send_offsets))]
        self.recv = [(int(p), s) for p, s in zip(shard.recv_peers, offsets_to_slices(shard.recv_offsets))]
        self.n_halo = shard.n_halo
        self.halo_peer = np.repeat(np.arange(len(self.recv)), np.diff(shard.recv_offsets))
        """int64 [n_halo]: index in ``recv`` of the owner of each halo row."""
        self.recv_start = np.asarray(shard.recv_offsets[:-1], dtype=np.int64)
        self.send_start = np.asarray(shard.send_offsets[:-1], dtype=np.int64)

    def _run(self, sends: list, recvs: list) -> None:
        exchange = self.transport.exchange(sends, recvs)
        for _ in exchange.completed_receives():
            pass
        exchange.wait_sends()

    def forward(self, owned: np.ndarray) -> np.ndarray:
        """The owners' values of this rank's halo rows (``owned``: one value per owned row)."""
        packed = torch.from_numpy(np.ascontiguousarray(owned[self.send_index]))
        halo = torch.empty((self.n_halo,), dtype=packed.dtype)
        self._run([(p, packed[s]) for p, s in self.send], [(p, halo[s]) for p, s in self.recv])
        return halo.numpy()

    def reverse(self, halo: np.ndarray) -> np.ndarray:
        """What the halo copies of the rows this rank sends hold: one value per ``send_index`` entry."""
        values = torch.from_numpy(np.ascontiguousarray(halo))
        incoming = torch.empty((self.send_index.shape[0],), dtype=values.dtype)
        self._run([(p, values[s]) for p, s in self.recv], [(p, incoming[s]) for p, s in self.send])
        return incoming.numpy()

    def reverse_add(self, owned: np.ndarray, halo: np.ndarray) -> np.ndarray:
        """``owned`` plus every halo copy's partial, added in peer order (deterministic for a partition)."""
        out = owned.copy()
        np.add.at(out, self.send_index, self.reverse(halo))
        return out

    def reverse_or(self, owned: np.ndarray, halo: np.ndarray) -> np.ndarray:
        """``owned`` OR any halo copy's flag (bool)."""
        out = owned.copy()
        out[self.send_index[self.reverse(halo.astype(np.uint8)) != 0]] = True
        return out

    def to_owners(self, halo_rows: np.ndarray, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Send one int64 per item to the owner of its halo row (reverse direction, variable length).

        An item names its row by the row's position in the owner's send list
        for this rank (the same position it has in this rank's halo slice), so
        no global id lookup is needed. A first exchange sends each owner its
        item count (one int64 per plan pair), then only non-empty messages
        carry (position, payload) pairs. Returns the owned local rows and
        payloads this rank received, and the number of non-empty messages it sent.
        """
        peer = self.halo_peer[halo_rows]
        order = np.argsort(peer, kind="stable")
        body = np.stack((halo_rows - self.recv_start[peer], payload), axis=1).astype(np.int64)[order]
        flat = torch.from_numpy(body.reshape(-1))
        out_counts = torch.from_numpy(np.bincount(peer, minlength=len(self.recv)).astype(np.int64))
        in_counts = torch.zeros(len(self.send), dtype=torch.int64)
        self._run([(p, out_counts[i:i + 1]) for i, (p, _) in enumerate(self.recv)],
                  [(p, in_counts[i:i + 1]) for i, (p, _) in enumerate(self.send)])
        incoming = torch.empty((2 * int(in_counts.sum()),), dtype=torch.int64)
        sends = [(p, flat[2 * a:2 * b]) for (p, _), (a, b) in zip(self.recv, _bounds(out_counts)) if b > a]
        self._run(sends, [(p, incoming[2 * a:2 * b]) for (p, _), (a, b) in zip(self.send, _bounds(in_counts))
                          if b > a])
        got = incoming.numpy().reshape(-1, 2)
        first = np.repeat(self.send_start, in_counts.numpy())
        return self.send_index[first + got[:, 0]], got[:, 1].copy(), len(sends)


def _bounds(counts: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each of consecutive chunks with these sizes."""
    ends = np.cumsum(counts.numpy()).tolist()
    return [(end - int(c), end) for c, end in zip(counts.tolist(), ends)]
