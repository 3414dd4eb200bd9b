"""Distributed sparse-dense product Y = Â H over a 1D row partition, with autograd.

Forward: post the halo exchange, multiply the owned block while rows are in
flight, then add each sender's halo-block product as its message lands (in
sender order, so that the result does not depend on arrival order).
Backward (Y = Â H  =>  dL/dH = Âᵀ dL/dY): form the halo rows' partial
products, send them back to their owners while multiplying by the owned
block's transpose, then add what arrives into the rows that were sent. The
reverse exchange uses the same pairs and volume, so directed graphs are exact.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from . import csr_kernel
from .config import KERNELS
from .errors import InputError
from .halo import HaloExchanger

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")



def choose_kernel(kernel: str, threads: int, device: torch.device = torch.device("cpu")) -> str:
    """``auto``: on one thread ``numba`` (our loop for products of 32 columns or more, scipy's
    CSR product below); torch's (multi-threaded, or on a GPU) otherwise.

    Measured in benchmarks/spmm_kernels.py (docs/performance.md): on one thread
    scipy was up to 1.8x faster than torch CSR, and our loop 1.3-1.9x faster
    than scipy at 64 columns; torch can use more threads.
    """
    if kernel not in KERNELS:
        raise ValueError(f"unknown SpMM kernel {kernel!r} (expected one of {', '.join(KERNELS)})")
    if device.type != "cpu":
        if kernel in ("scipy", "numba"):
            raise InputError(f"--spmm-kernel {kernel} runs on the CPU only; the tensors are on {device}")
        return "torch"
    if kernel == "auto":
        return "numba" if threads == 1 else "torch"
    return kernel


class SparseBlock:
    """A local CSR block and its product with dense tensors, by the chosen kernel."""

    def __init__(self, matrix: sp.csr_matrix, dtype: torch.dtype, kernel: str, device: torch.device):
        matrix = sp.csr_matrix(matrix)
        matrix.sort_indices()
        self.empty = matrix.nnz == 0
        self.kernel = kernel
        if kernel in ("scipy", "numba"):
            self.matrix = matrix.astype(torch.empty((), dtype=dtype).numpy().dtype)
        else:
            self.matrix = torch.sparse_csr_tensor(
                torch.from_numpy(matrix.indptr.astype(np.int64)),
                torch.from_numpy(matrix.indices.astype(np.int64)),
                torch.from_numpy(np.asarray(matrix.data)).to(dtype),
                size=matrix.shape,
                check_invariants=False,  # built from a sorted, canonical scipy CSR
            ).to(device)

    def add_product(self, out: torch.Tensor, dense: torch.Tensor) -> None:
        """out += block @ dense."""
        if self.empty:
            return
        if self.kernel == "numba" and dense.shape[1] >= csr_kernel.MIN_WIDTH:
            m = self.matrix
            csr_kernel.add_product(m.indptr, m.indices, m.data, dense.detach().contiguous().numpy(), out.numpy())
        elif self.kernel != "torch":
            out.add_(torch.from_numpy(self.matrix @ dense.detach().numpy()))
        else:
            out.add_(self.matrix @ dense)


class DistributedAdjacency:
    """This rank's rows of Â, split into the owned block and one halo block per sender."""

    def __init__(self, owned_block: sp.csr_matrix, halo_block: sp.csr_matrix, exchanger: HaloExchanger,
                 dtype: torch.dtype, kernel: str = "torch"):
        plan = exchanger.plan
        self.exchanger = exchanger
        self.n_owned = plan.n_owned
        self.n_halo = plan.n_halo
        device = exchanger.transport.device
        self.owned = SparseBlock(owned_block, dtype, kernel, device)
        self.owned_t = SparseBlock(owned_block.T.tocsr(), dtype, kernel, device)
        halo_csc = sp.csc_matrix(halo_block)
        self.halo_by_sender = [SparseBlock(halo_csc[:, s].tocsr(), dtype, kernel, device) for s in plan.recv_slices]
        self.halo_t = SparseBlock(halo_block.T.tocsr(), dtype, kernel, device)

    def matmul(self, h: torch.Tensor) -> torch.Tensor:
        """Y = Â H for this rank's rows, H given by its owned rows."""
        h = h.contiguous()
        halo, exchange = self.exchanger.start_forward(h)
        y = torch.zeros((self.n_owned, h.shape[1]), dtype=h.dtype, device=h.device)
        self.owned.add_product(y, h)
        slices = self.exchanger.plan.recv_slices
        for k in self.exchanger.in_order(exchange.completed_receives(), len(slices)):
            self.halo_by_sender[k].add_product(y, halo[slices[k]])
        with self.exchanger.counters.timing("comm_wait_s"):
            exchange.wait_sends()
        return y

    def matmul_transpose(self, g: torch.Tensor) -> torch.Tensor:
        """Âᵀ G restricted to this rank's rows, summing the other ranks' contributions."""
        g = g.contiguous()
        halo_grad = self.exchanger.buffer("halo", self.n_halo, g.shape[1], g.dtype)
        halo_grad.zero_()
        self.halo_t.add_product(halo_grad, g)
        incoming, exchange = self.exchanger.start_reverse(halo_grad)
        grad = torch.zeros((self.n_owned, g.shape[1]), dtype=g.dtype, device=g.device)
        self.owned_t.add_product(grad, g)
        plan = self.exchanger.plan
        for k in self.exchanger.in_order(exchange.completed_receives(), len(plan.send_slices)):
            s = plan.send_slices[k]
            grad.index_add_(0, plan.send_index[s], incoming[s])
        with self.exchanger.counters.timing("comm_wait_s"):
            exchange.wait_sends()
        return grad


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, adjacency: DistributedAdjacency) -> torch.Tensor:  # type: ignore[override]
        ctx.adjacency = adjacency
        return adjacency.matmul(h)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        return ctx.adjacency.matmul_transpose(grad_out), None


def spmm(adjacency: DistributedAdjacency, h: torch.Tensor) -> torch.Tensor:
    """Differentiable distributed Â H."""
    return _SpMM.apply(h, adjacency)
