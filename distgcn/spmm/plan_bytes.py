"""Small per-row messages over a shard's halo plan: values forward to halo copies, or back to owners.

Sampling needs to move one byte (membership) or one float (a partial sum) per
halo row, in the same pairs as the SpMM's halo exchange; these helpers do it
with the transport's point-to-point exchange and no global communication.
Random walks also send a variable number of items (walkers) from halo copies
to the rows' owners (:meth:`PlanBytes.to_owners`). Values may be numpy arrays
(the host samplers) or tensors on any device (the device samplers,
:mod:`distgcn.sampling.device`); messages travel on the transport's device.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from distgcn.comm.transport import Transport
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import offsets_to_slices

Values = TypeVar("Values", np.ndarray, torch.Tensor)
"""One value per row: a numpy array (the host samplers) or a tensor on any device (the device samplers)."""


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
        self._tensors: dict[tuple[str, torch.device], torch.Tensor] = {}

    def _run(self, sends: list, recvs: list) -> None:
        exchange = self.transport.exchange(sends, recvs)
        for _ in exchange.completed_receives():
            pass
        exchange.wait_sends()

    def forward(self, owned: Values) -> Values:
        """The owners' values of this rank's halo rows (``owned``: one value per owned row).

        numpy in, numpy out; a tensor in, a tensor on its device out. Messages travel on the transport's device.
        """
        if isinstance(owned, np.ndarray):
            return self.forward(torch.from_numpy(np.ascontiguousarray(owned))).numpy()
        wire = self.transport.device
        packed = owned[self.tensor("send_index", owned.device)].to(wire)
        halo = torch.empty((self.n_halo,), dtype=packed.dtype, device=wire)
        self._run([(p, packed[s]) for p, s in self.send], [(p, halo[s]) for p, s in self.recv])
        return halo.to(owned.device)

    def reverse(self, halo: Values) -> Values:
        """What the halo copies of the rows this rank sends hold: one value per ``send_index`` entry."""
        if isinstance(halo, np.ndarray):
            return self.reverse(torch.from_numpy(np.ascontiguousarray(halo))).numpy()
        wire = self.transport.device
        values = halo.to(wire)
        incoming = torch.empty((self.send_index.shape[0],), dtype=values.dtype, device=wire)
        self._run([(p, values[s]) for p, s in self.recv], [(p, incoming[s]) for p, s in self.send])
        return incoming.to(halo.device)

    def reverse_add(self, owned: np.ndarray, halo: np.ndarray) -> np.ndarray:
        """``owned`` plus every halo copy's partial, added in peer order (deterministic for a partition)."""
        out = owned.copy()
        np.add.at(out, self.send_index, self.reverse(halo))
        return out

    def reverse_or(self, owned: Values, halo: Values) -> Values:
        """``owned`` OR any halo copy's flag (bool)."""
        if isinstance(owned, np.ndarray):
            out = owned.copy()
            out[self.send_index[self.reverse(halo.astype(np.uint8)) != 0]] = True
            return out
        out = owned.clone()
        out[self.tensor("send_index", owned.device)[self.reverse(halo.to(torch.uint8)) != 0]] = True
        return out

    def to_owners(self, halo_rows: np.ndarray, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Send one int64 per item to the owner of its halo row (reverse direction, variable length).

        An item names its row by the row's position in the owner's send list
        for this rank (the same position it has in this rank's halo slice), so
        no global id lookup is needed. A first exchange sends each owner its
        item count (one int64 per plan pair), then only non-empty messages
        carry (position, payload) pairs. Returns the owned local rows and
        payloads this rank received, and the number of non-empty messages it sent.
        numpy in, numpy out; tensors in, tensors on their device out.
        """
        if isinstance(halo_rows, np.ndarray):
            rows, items, messages = self.to_owners(torch.from_numpy(halo_rows), torch.from_numpy(payload))
            return rows.numpy(), items.numpy(), messages
        device, wire = halo_rows.device, self.transport.device
        peer = self.tensor("halo_peer", device)[halo_rows]
        order = torch.sort(peer, stable=True).indices
        position = halo_rows - self.tensor("recv_start", device)[peer]
        body = torch.stack((position, payload.long()), dim=1)[order].reshape(-1).to(wire)
        out_counts = torch.bincount(peer, minlength=len(self.recv)).to(wire)
        in_counts = torch.zeros(len(self.send), dtype=torch.int64, device=wire)
        self._run([(p, out_counts[i:i + 1]) for i, (p, _) in enumerate(self.recv)],
                  [(p, in_counts[i:i + 1]) for i, (p, _) in enumerate(self.send)])
        in_host, out_host = in_counts.cpu(), out_counts.cpu()
        incoming = torch.empty((2 * int(in_host.sum()),), dtype=torch.int64, device=wire)
        sends = [(p, body[2 * a:2 * b]) for (p, _), (a, b) in zip(self.recv, _bounds(out_host)) if b > a]
        self._run(sends, [(p, incoming[2 * a:2 * b]) for (p, _), (a, b) in zip(self.send, _bounds(in_host))
                          if b > a])
        got = incoming.to(device).reshape(-1, 2)
        first = torch.repeat_interleave(self.tensor("send_start", device), in_host.to(device))
        return self.tensor("send_index", device)[first + got[:, 0]], got[:, 1].clone(), len(sends)

    def tensor(self, name: str, device: torch.device) -> torch.Tensor:
        """One of the int64 arrays above as a tensor on ``device`` (made once per device)."""
        key = (name, device)
        if key not in self._tensors:
            self._tensors[key] = torch.from_numpy(getattr(self, name)).to(device)
        return self._tensors[key]


def _bounds(counts: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each of consecutive chunks with these sizes."""
    ends = np.cumsum(counts.numpy()).tolist()
    return [(end - int(c), end) for c, end in zip(counts.tolist(), ends)]
