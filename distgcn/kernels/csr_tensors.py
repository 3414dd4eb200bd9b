"""A CSR matrix held as three tensors on one device, for blocks that are cut on the device (sampled minibatches).

The sparse blocks of :mod:`distgcn.kernels.sparse` are normally built from scipy
matrices on the host; a minibatch sampled on a GPU is cut from the shard's
blocks where they live, and only its restricted blocks become products.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


@dataclass(frozen=True)
class CsrTensors:
    """CSR arrays on one device, columns increasing within each row (the canonical form scipy sorts to)."""

    indptr: torch.Tensor
    """int64 [rows + 1]."""
    indices: torch.Tensor
    """int64 [nnz]."""
    values: torch.Tensor
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @classmethod
    def from_entries(cls, rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor,
                     shape: tuple[int, int]) -> CsrTensors:
        """From entries already in row-major order with increasing columns within a row."""
        counts = torch.bincount(rows, minlength=shape[0])
        indptr = torch.zeros(shape[0] + 1, dtype=torch.int64, device=rows.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        return cls(indptr, cols, values, shape)

    def entry_rows(self) -> torch.Tensor:
        """int64 [nnz]: the row of each entry."""
        return torch.repeat_interleave(torch.arange(self.shape[0], device=self.indptr.device),
                                       torch.diff(self.indptr))

    def transpose(self) -> CsrTensors:
        rows = self.entry_rows()
        order = torch.sort(self.indices * self.shape[0] + rows).indices  # entries are distinct: no ties
        return CsrTensors.from_entries(self.indices[order], rows[order], self.values[order],
                                       (self.shape[1], self.shape[0]))

    def columns(self, start: int, stop: int) -> CsrTensors:
        """The block of columns ``start:stop``, renumbered from 0."""
        keep = (self.indices >= start) & (self.indices < stop)
        return CsrTensors.from_entries(self.entry_rows()[keep], self.indices[keep] - start, self.values[keep],
                                       (self.shape[0], stop - start))

    def to_scipy(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.values.cpu().numpy(), self.indices.cpu().numpy(), self.indptr.cpu().numpy()),
                             shape=self.shape)


def sorted_csr_on(matrix: sp.csr_matrix, device: torch.device) -> tuple[CsrTensors, torch.Tensor | None]:
    """``matrix`` on ``device`` with columns sorted within rows, and each stored entry's position in ``matrix``, so
    that per-entry arrays of ``matrix`` still apply; None where the order is already sorted (no copy kept)."""
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    order = np.lexsort((matrix.indices, rows))
    on = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    csr = CsrTensors(on(matrix.indptr.astype(np.int64)), on(matrix.indices[order].astype(np.int64)),
                     on(matrix.data[order]), matrix.shape)
    return csr, None if np.array_equal(order, np.arange(order.size)) else on(order.astype(np.int64))
