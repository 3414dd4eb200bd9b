"""Distributed sparse-dense product Y = Â H over a 1D row partition, with autograd.

Forward: post the halo exchange, multiply the owned block while rows are in
flight, then add each sender's halo-block product as its message lands (in
sender order, so that the result does not depend on arrival order).
Backward (Y = Â H  =>  dL/dH = Âᵀ dL/dY): form the halo rows' partial
products (each halo block's transpose times dL/dY, from the forward blocks),
send them back to their owners while multiplying by the owned block's
transpose, then add what arrives into the rows that were sent. The reverse
exchange uses the same pairs and volume, so directed graphs are exact. No
transpose is stored where the owned block is its own (an undirected graph):
the forward block serves both ways.
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from distgcn.kernels import Kernels, kernels_for
from distgcn.kernels import kept_buffers as activation_buffers
from distgcn.kernels.csr_tensors import CsrTensors
from distgcn.spmm.halo import HaloExchanger


def is_symmetric(block: sp.csr_matrix) -> bool:
    """Whether a square block equals its transpose exactly (pattern and values): then it is its own backward."""
    return (block != block.T).nnz == 0


class DistributedAdjacency:
    """This rank's rows of Â, split into the owned block and one halo block per sender.

    ``kernels``: the device's kernels, or the ``--spmm-kernel`` choice they are chosen by
    (:func:`distgcn.kernels.kernels_for`); its blocks do the local products.
    """

    def __init__(self, owned_block: sp.csr_matrix | CsrTensors, halo_block: sp.csr_matrix | CsrTensors,
                 exchanger: HaloExchanger, dtype: torch.dtype, kernels: Kernels | str,
                 symmetric: bool | None = None):
        """Blocks are scipy matrices, or tensors cut on the device (a sampled batch), for which ``symmetric`` says
        whether the owned block is its own transpose (the shard's is, for a batch of an undirected graph)."""
        plan = exchanger.plan
        device = exchanger.device
        block = kernels_for(device, kernels).sparse_block
        self.exchanger = exchanger
        self.n_owned = plan.n_owned
        self.n_halo = plan.n_halo
        self.recv_slices = plan.recv_slices
        self.owned = block(owned_block, dtype, device)
        if isinstance(owned_block, CsrTensors):
            self.owned_t = self.owned if symmetric else block(owned_block.transpose(), dtype, device)
            self.halo_by_sender = [block(halo_block.columns(s.start, s.stop), dtype, device)
                                   for s in plan.recv_slices]
            return
        self.owned_t = self.owned if is_symmetric(owned_block) else block(owned_block.T.tocsr(), dtype, device)
        halo_csc = sp.csc_matrix(halo_block)
        self.halo_by_sender = [block(halo_csc[:, s].tocsr(), dtype, device) for s in plan.recv_slices]

    def matmul(self, h: torch.Tensor) -> torch.Tensor:
        """Y = Â H for this rank's rows, H given by its owned rows."""
        h = h.contiguous()
        exchange = self.exchanger.start_forward(h)
        y = activation_buffers.empty((self.n_owned, h.shape[1]), h.dtype, h.device)
        self.owned.product(y, h)
        for k, halo_rows in exchange.arrivals():
            self.halo_by_sender[k].add_product(y, halo_rows)
        exchange.finish()
        return y

    def matmul_transpose(self, g: torch.Tensor) -> torch.Tensor:
        """Âᵀ G restricted to this rank's rows, summing the other ranks' contributions."""
        g = g.contiguous()

        def fill(k: int, out: torch.Tensor) -> None:  # what this rank's rows contribute to sender k's halo rows
            out.zero_()
            self.halo_by_sender[k].add_transpose_product(out, g)

        exchange = self.exchanger.start_reverse(g.shape[1], g.dtype, fill)
        grad = activation_buffers.empty((self.n_owned, g.shape[1]), g.dtype, g.device)
        self.owned_t.product(grad, g)
        exchange.add_into(grad)
        exchange.finish()
        return grad

    def add_halo_partials(self, halo_partials: torch.Tensor, g: torch.Tensor) -> None:
        """halo_partials += (halo block)ᵀ G: what this rank's rows contribute to each halo row's gradient."""
        for block, rows in zip(self.halo_by_sender, self.recv_slices):
            block.add_transpose_product(halo_partials[rows], g)


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
