"""Differentiable [H; halo rows of H]: the exchange that models aggregating by more than a product with Â use.

GAT scores every edge of Â's pattern from both of its endpoints, so its
aggregation is not a fixed sparse matrix times H: each rank needs the halo
rows themselves, next to its own. Forward runs the same halo exchange as the
SpMM (same plan, same rows, same counters); backward sends the gradient of
the halo rows back to their owners over the reverse exchange, which adds it
into the rows they sent. Rows are owned whole in a 1D partition, so anything
computed per row over its neighbours (a softmax) needs nothing more.
"""

from __future__ import annotations

import torch

from distgcn.spmm.halo import HaloExchanger


class _GatherHalo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, exchanger: HaloExchanger) -> torch.Tensor:  # type: ignore[override]
        ctx.exchanger = exchanger
        h = h.contiguous()
        plan = exchanger.plan
        extended = h.new_empty((plan.n_owned + plan.n_halo, *h.shape[1:]))
        extended[:plan.n_owned] = h
        halo = extended[plan.n_owned:]
        exchange = exchanger.start_forward(h)
        for k, rows in exchange.arrivals():
            halo[plan.recv_slices[k]] = rows
        exchange.finish()
        return extended

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        exchanger: HaloExchanger = ctx.exchanger
        n_owned = exchanger.plan.n_owned
        grad_owned = grad[:n_owned].clone()
        halo_grad = grad[n_owned:]
        recv_slices = exchanger.plan.recv_slices
        exchange = exchanger.start_reverse(grad.shape[1], grad.dtype,
                                           lambda k, out: out.copy_(halo_grad[recv_slices[k]]))
        exchange.add_into(grad_owned)
        exchange.finish()
        return grad_owned, None


def gather_halo(exchanger: HaloExchanger, h: torch.Tensor) -> torch.Tensor:
    """[h; its halo rows]: (n_owned + n_halo) x width, rows in the shard's local column numbering (collective)."""
    return _GatherHalo.apply(h, exchanger)
