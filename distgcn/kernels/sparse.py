"""The local sparse × dense products (``train --spmm-kernel``): one class per kernel, one interface.

A :class:`SparseBlock` holds one CSR block of Â in the form its kernel wants
and writes its product with a dense tensor into an output, or adds it there.
The distributed SpMM gets its blocks from :meth:`distgcn.kernels.Kernels.sparse_block`
and never asks which kernel it has. A new kernel is a subclass here and an
entry in :data:`distgcn.kernels.PRODUCTS`.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.kernels import PRODUCTS
from distgcn.kernels import csr as csr_kernel
from distgcn.kernels.csr_tensors import CsrTensors

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


class SparseBlock(ABC):
    """A local CSR block and its product with dense tensors."""

    def __init__(self, matrix: sp.csr_matrix | CsrTensors, dtype: torch.dtype, device: torch.device):
        self.empty = matrix.nnz == 0
        if isinstance(matrix, CsrTensors):
            self._store_tensors(matrix, dtype, device)
            return
        matrix = sp.csr_matrix(matrix)
        matrix.sort_indices()
        self._store(matrix, dtype, device)

    def _store_tensors(self, matrix: CsrTensors, dtype: torch.dtype, device: torch.device) -> None:
        """Keep a block cut on the device; a host kernel takes it through scipy (no copy on the CPU)."""
        self._store(matrix.to_scipy(), dtype, device)

    @abstractmethod
    def _store(self, matrix: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> None:
        """Keep ``matrix`` (sorted, canonical) in this kernel's form."""

    @abstractmethod
    def _product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out = block @ dense, for a block with entries (``out``'s old values are not read)."""

    @abstractmethod
    def _add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out += block @ dense, for a block with entries."""

    @abstractmethod
    def _add_transpose_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out += blockᵀ @ dense, for a block with entries."""

    @classmethod
    def warm_up(cls, dtype: np.dtype, widths: Iterable[int], transposes: bool) -> None:
        """Compile this kernel's loops for ``dtype`` and ``widths`` (and with ``transposes`` its transpose
        products) before a rank's arrays exist; nothing for a kernel without loops of its own."""

    def product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out = block @ dense: the first product into a fresh buffer, which then needs no zeroing pass."""
        if self.empty:
            out.zero_()
        else:
            self._product(out, dense)

    def add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out += block @ dense."""
        if not self.empty:
            self._add_product(out, dense)

    def add_transpose_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out += blockᵀ @ dense (the backward of a block that is not its own transpose)."""
        if not self.empty:
            self._add_transpose_product(out, dense)


class TorchBlock(SparseBlock):
    """torch's CSR product: multi-threaded, and the one that runs on a GPU."""

    def _store(self, matrix: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> None:
        self.matrix = torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64)),
            torch.from_numpy(matrix.indices.astype(np.int64)),
            torch.from_numpy(np.asarray(matrix.data)).to(dtype),
            size=matrix.shape,
            check_invariants=False,  # built from a sorted, canonical scipy CSR
        ).to(device)
        self.transposed: torch.Tensor | None = None

    def _store_tensors(self, matrix: CsrTensors, dtype: torch.dtype, device: torch.device) -> None:
        self.matrix = torch.sparse_csr_tensor(matrix.indptr, matrix.indices, matrix.values.to(dtype),
                                              size=matrix.shape, check_invariants=False).to(device)
        self.transposed = None

    def _product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        out.copy_(self.matrix @ dense)

    def _add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        out.add_(self.matrix @ dense)

    def _add_transpose_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        if self.transposed is None:  # built on first use: a product by the CSC view measured 3x slower
            # via COO, whose transpose and conversions torch has on every device
            self.transposed = self.matrix.to_sparse_coo().t().coalesce().to_sparse_csr()
        out.add_(self.transposed @ dense)


class ScipyBlock(SparseBlock):
    """scipy's CSR product (one thread, CPU only), with int32 indices where they fit."""

    def _store(self, matrix: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> None:
        # astype copies through scipy's constructor, which stores int32 indices where they fit: half the index
        # bytes of int64, and scipy and numba take both (tests/kernels/test_spmm_kernels.py checks it)
        self.matrix = matrix.astype(torch.empty((), dtype=dtype).numpy().dtype)

    def _product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        out.copy_(torch.from_numpy(self.matrix @ dense.detach().numpy()))

    def _add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        out.add_(torch.from_numpy(self.matrix @ dense.detach().numpy()))

    def _add_transpose_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        # .T is a CSC view of the same arrays; its product scatters rows of dense in row order (one thread)
        out.add_(torch.from_numpy(self.matrix.T @ dense.detach().numpy()))


class NumbaBlock(ScipyBlock):
    """Our loops (:mod:`distgcn.kernels.csr`) for products and transpose products of ``MIN_WIDTH`` columns or more,
    on every thread given; below, torch's CSR product and scipy's transpose product (one thread). One int32 CSR in
    memory, which torch reads in place; no transpose is stored.

    Measured on Slashdot and the 10^6 R-MAT (``benchmarks/spmm_kernels.py``): torch's product over int32 indices is about as fast as our loop up to 4 columns; from 8
    columns ours is faster (2x at 8), and at 64 columns several times torch's and scipy's.
    """

    def _store(self, matrix: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> None:
        super()._store(matrix, dtype, device)
        self.bounds: dict[int, np.ndarray] = {}
        """Row blocks per thread count (csr_kernel.row_blocks)."""
        self.column_bounds: dict[int, np.ndarray] = {}
        """Column blocks per thread count, for the transpose product (csr_kernel.column_blocks)."""
        m = self.matrix  # scipy keeps indptr and indices of one dtype, as torch needs
        self.view = torch.sparse_csr_tensor(torch.from_numpy(m.indptr), torch.from_numpy(m.indices),
                                            torch.from_numpy(m.data), size=m.shape, check_invariants=False)
        """The same arrays as a torch CSR tensor (no copy)."""

    @classmethod
    def warm_up(cls, dtype: np.dtype, widths: Iterable[int], transposes: bool) -> None:
        csr_kernel.compile_now(dtype, widths, transpose=transposes)

    def _product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        if dense.shape[1] < csr_kernel.MIN_WIDTH:
            torch.mm(self.view, dense.detach(), out=out)
        else:
            self._loop(out, dense, accumulate=False)

    def _add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        if dense.shape[1] < csr_kernel.MIN_WIDTH:
            out.addmm_(self.view, dense.detach())
        else:
            self._loop(out, dense, accumulate=True)

    def _add_transpose_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        if dense.shape[1] < csr_kernel.MIN_WIDTH:
            super()._add_transpose_product(out, dense)
        else:
            m = self.matrix
            csr_kernel.add_transpose_product(m.indptr, m.indices, m.data, dense.detach().contiguous().numpy(),
                                             out.numpy(), self.column_bounds)

    def _loop(self, out: torch.Tensor, dense: torch.Tensor, accumulate: bool) -> None:
        m = self.matrix
        csr_kernel.add_product(m.indptr, m.indices, m.data, dense.detach().contiguous().numpy(), out.numpy(),
                               self.bounds, accumulate)


BLOCKS: dict[str, type[SparseBlock]] = {name: globals()[kernel.block_class] for name, kernel in PRODUCTS.items()}
"""The block class of each product kernel (:data:`distgcn.kernels.PRODUCTS`)."""
