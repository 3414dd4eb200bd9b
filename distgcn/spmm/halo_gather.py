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
        exchange = exchanger.start_forward(h)
        # halo rows are grouped by sender in rank order, so the messages in order are the halo rows in order
        parts = [h] + [rows for _, rows in exchange.arrivals()]
        extended = torch.cat(parts)
        exchange.finish()
        return extended

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        exchanger: HaloExchanger = ctx.exchanger
        n_owned = exchanger.plan.n_owned
        grad_owned = grad[:n_owned].clone()
        partials = exchanger.halo_partials(grad.shape[1], grad.dtype)
        partials.copy_(grad[n_owned:])
        exchange = exchanger.start_reverse(partials)
        exchange.add_into(grad_owned)
        exchange.finish()
        return grad_owned, None


def gather_halo(exchanger: HaloExchanger, h: torch.Tensor) -> torch.Tensor:
    """[h; its halo rows]: (n_owned + n_halo) x width, rows in the shard's local column numbering (collective)."""
    return _GatherHalo.apply(h, exchanger)
