"""Small per-row messages over a shard's halo plan: values forward to halo copies, or back to owners.

Sampling needs to move one byte (membership) or one float (a partial sum) per
halo row, in the same pairs as the SpMM's halo exchange; these helpers do it
with the transport's point-to-point exchange and no global communication.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shard import Shard
from ..transport import Transport


class PlanBytes:
    """Forward (owner -> halo copies) and reverse (halo copies -> owner) exchanges of one value per row."""

    def __init__(self, shard: Shard, transport: Transport):
        self.transport = transport
        self.send_index = np.asarray(shard.send_index, dtype=np.int64)
        self.send = [(int(p), slice(int(a), int(b)))
                     for p, a, b in zip(shard.send_peers, shard.send_offsets[:-1], shard.send_offsets[1:])]
        self.recv = [(int(p), slice(int(a), int(b)))
                     for p, a, b in zip(shard.recv_peers, shard.recv_offsets[:-1], shard.recv_offsets[1:])]
        self.n_halo = shard.n_halo

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
