"""A model on one rank's shard: its layers, the distributed operator they aggregate with, and what layer 0 reads.

What training and prediction share. :class:`~distgcn.training.trainer.Trainer` adds the optimizer, the batches
and the metrics; ``distgcn predict`` (:mod:`distgcn.training.prediction`) loads saved weights into one and runs
it once.
"""

from __future__ import annotations

import numpy as np
import torch

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import Transport
from distgcn.config import DTYPES as DTYPE_NAMES
from distgcn.config import TrainConfig
from distgcn.kernels import Kernels, kernels_for
from distgcn.nn.model import LayerStack, LocalGraph
from distgcn.nn.registry import model_class
from distgcn.nn.sparse_input import SparseRows, sparse_pays_off
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.broadcast import broadcast_plan
from distgcn.spmm.halo import HALO_DTYPES, HaloExchanger, HaloPlan

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


class ShardModel:
    """The layers of ``config`` on this rank's rows, with the halo exchange they need (built collectively)."""

    def __init__(self, shard: Shard, transport: Transport, config: TrainConfig, kernels: Kernels | str = "torch",
                 widths: list[int] | None = None):
        """``widths``: the model's layer widths (saved weights give them); None: from ``config``, the graph's
        feature width (the widest over ranks) and its classes."""
        self.shard = shard
        self.transport = transport
        self.config = config
        self.dtype = dtype = DTYPES[config.dtype]
        self.counters = CommCounters()
        device = transport.device
        self.kernels = kernels_for(device, kernels)
        if config.comm == "broadcast":
            plan, halo_block = broadcast_plan(shard, transport, device)
        else:
            plan, halo_block = HaloPlan.from_shard(shard, device), shard.halo_block
        total_sent = transport.allreduce([plan.rows_sent])[0]
        exchanger = HaloExchanger(plan, transport, self.counters, exchanges=total_sent > 0,
                                  wire_dtype=HALO_DTYPES[config.halo_dtype] if config.halo_dtype else None,
                                  window=config.halo_window)
        model = model_class(config.conv)
        self.aggregation = model.aggregation(LocalGraph(shard.owned_block, halo_block, shard.global_ids,
                                                        shard.halo_global_ids, exchanger, dtype, self.kernels))
        """What the model aggregates with (:meth:`distgcn.nn.model.LayerStack.aggregation`): Â·H (GCN), D⁻¹A·H
        (GraphSAGE), or the edges and halo rows (GAT); only that operator is built."""
        features = torch.from_numpy(np.ascontiguousarray(shard.features)).to(device, dtype)
        num_features = int(transport.allreduce([features.shape[1]], op="max")[0])
        if widths is None:
            widths = config.widths(num_features, shard.num_classes)
        self.model: LayerStack = model.from_config(config, widths, dtype).to(device)
        self.inputs = self._model_inputs(features)

    @torch.no_grad()
    def _model_inputs(self, features: torch.Tensor) -> torch.Tensor | SparseRows:
        """What layer 0 reads: X, or Â·X computed here once (one exchange) when the first layer is cached.

        Kept as sparse rows on the CPU when that is cheaper (:mod:`distgcn.nn.sparse_input`); every rank
        decides alike from global counts, so all ranks take the same code path.
        """
        if self.config.first_layer == "cached":
            features = self.aggregation(features)
            self.counters.reset()  # a setup cost, not an epoch's traffic
        if features.device.type != "cpu":
            return features
        out_width = self.model.first_output_width
        nonzeros, entries = self.transport.allreduce([int(torch.count_nonzero(features)), features.numel()])
        if not sparse_pays_off(int(nonzeros), int(entries), self.model.widths[0], out_width):
            return features
        return SparseRows(features.numpy(), self.shard.global_ids, features.dtype)

    @torch.no_grad()
    def layer_outputs(self, epoch: int) -> list[torch.Tensor]:
        """Every layer's output on this rank's rows with the current weights, dropout off (collective).

        ``epoch`` keys nothing once dropout is off; it is passed as training passes it."""
        self.model.eval()
        return self.model.layer_outputs(self.inputs, self.aggregation, self.shard.global_ids, epoch)
