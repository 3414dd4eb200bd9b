"""Full-batch distributed training of a GCN on one rank's shard.

Every rank runs this same loop on its own rows. The loss is the sum of
per-vertex cross-entropies over the rank's training rows divided by the
*global* number of training vertices, so the sum of the ranks' weight
gradients (the allreduce) is exactly the single-process gradient.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from .broadcast import broadcast_plan
from .checkpoint import capture_rng_states, restore_rng_states
from .config import DTYPES as DTYPE_NAMES, TrainConfig
from .counters import CommCounters
from .faults import inject_faults
from .gradsync import GradientSync
from .halo import HALO_DTYPES, HaloExchanger, HaloPlan
from .model import GCN
from .shard import Shard
from .sparse_input import SparseRows, sparse_pays_off
from .spmm import DistributedAdjacency, spmm
from .transport import Transport

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


class TrainingDiverged(RuntimeError):
    """The global loss became NaN or infinite; every rank raises it in the same epoch."""

    def __init__(self, epoch: int, loss: float):
        super().__init__(f"loss is {loss} at epoch {epoch}: training diverged (lower --lr, or use float64)")
        self.epoch = epoch


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"unknown optimizer {config.optimizer!r} (expected adam or sgd)")


class Trainer:
    """Owns the model, the distributed Â and the optimizer of one rank."""

    def __init__(self, shard: Shard, transport: Transport, config: TrainConfig, kernel: str = "torch"):
        self.shard = shard
        self.transport = transport
        self.config = config
        dtype = DTYPES[config.dtype]
        self.counters = CommCounters()
        device = transport.device
        if config.comm == "broadcast":
            plan, halo_block = broadcast_plan(shard, transport, device)
        else:
            plan, halo_block = HaloPlan.from_shard(shard, device), shard.halo_block
        total_sent = transport.allreduce([plan.rows_sent])[0]
        exchanger = HaloExchanger(plan, transport, self.counters, exchanges=total_sent > 0,
                                  wire_dtype=HALO_DTYPES[config.halo_dtype] if config.halo_dtype else None)
        self.adjacency = DistributedAdjacency(shard.owned_block, halo_block, exchanger, dtype, kernel)
        features = torch.from_numpy(np.ascontiguousarray(shard.features)).to(device, dtype)
        self.labels = torch.from_numpy(shard.labels.astype(np.int64)).to(device)
        self.masks = {
            name: torch.from_numpy(np.asarray(mask, dtype=bool)).to(device)
            for name, mask in (("train", shard.train_mask), ("val", shard.val_mask), ("test", shard.test_mask))
        }
        counts = transport.allreduce([int(m.sum()) for m in self.masks.values()])
        self.global_counts = dict(zip(self.masks, (int(c) for c in counts)))
        if self.global_counts["train"] == 0:
            raise ValueError("no training vertices in the graph")
        num_features = int(transport.allreduce([features.shape[1]], op="max")[0])
        self.model = GCN(config.widths(num_features, shard.num_classes), config.dropout, config.seed,
                         dtype, config.first_layer).to(device)
        self.inputs = self._model_inputs(features)
        self.optimizer = make_optimizer(self.model.parameters(), config)
        self.grad_sync = GradientSync(self.model, transport, self.counters)
        self.completed_epochs = 0
        """Epochs already trained (by this run or the checkpoint it resumed from)."""

    def _aggregate(self, h: torch.Tensor) -> torch.Tensor:
        return spmm(self.adjacency, h)

    @torch.no_grad()
    def _model_inputs(self, features: torch.Tensor) -> torch.Tensor | SparseRows:
        """What layer 0 reads: X, or Â·X computed here once (one exchange) when the first layer is cached.

        Kept as sparse rows on the CPU when that is cheaper (:mod:`distgcn.sparse_input`); every rank
        decides alike from global counts, so all ranks take the same code path.
        """
        if self.config.first_layer == "cached":
            features = self._aggregate(features)
            self.counters.reset()  # a setup cost, not an epoch's traffic
        if features.device.type != "cpu":
            return features
        out_width = self.model.widths[1]
        nonzeros, entries = self.transport.allreduce([int(torch.count_nonzero(features)), features.numel()])
        if not sparse_pays_off(int(nonzeros), int(entries), self.model.widths[0], out_width):
            return features
        return SparseRows(features.numpy(), self.shard.global_ids, features.dtype)

    def _forward(self, epoch: int) -> torch.Tensor:
        return self.model(self.inputs, self._aggregate, self.shard.global_ids, epoch)

    def train_epoch(self, epoch: int) -> float:
        """One optimizer step; returns this rank's share of the global mean loss."""
        self.model.train()
        self.optimizer.zero_grad()
        logits = self._forward(epoch)
        mask = self.masks["train"]
        loss = F.cross_entropy(logits[mask], self.labels[mask], reduction="sum") / self.global_counts["train"]
        inject_faults(self.transport.rank, epoch)
        loss.backward()
        self.grad_sync.wait()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def correct_counts(self, epoch: int) -> list[int]:
        """Correct predictions on this rank's train, val and test rows (dropout off)."""
        self.model.eval()
        predicted = self._forward(epoch).argmax(dim=1)
        hits = predicted == self.labels
        return [int(hits[m].sum()) for m in self.masks.values()]

    @torch.no_grad()
    def layer_outputs(self) -> list[torch.Tensor]:
        """Every layer's output on this rank's rows with the current weights, dropout off (collective)."""
        self.model.eval()
        return self.model.layer_outputs(self.inputs, self._aggregate, self.shard.global_ids, self.completed_epochs)

    def epochs(self) -> Iterator[dict]:
        """Train, yielding one metrics record per epoch (identical on every rank)."""
        for epoch in range(self.completed_epochs + 1, self.config.epochs + 1):
            self.counters.reset()
            start = time.perf_counter()
            loss_share = self.train_epoch(epoch)
            correct = self.correct_counts(epoch)
            epoch_s = time.perf_counter() - start
            record = self._reduce_metrics(epoch, loss_share, correct, epoch_s)
            if not math.isfinite(record["loss"]):
                raise TrainingDiverged(epoch, record["loss"])
            self.completed_epochs = epoch
            yield record

    def _reduce_metrics(self, epoch: int, loss_share: float, correct: list[int], epoch_s: float) -> dict:
        c = self.counters
        sums = self.transport.allreduce(
            [loss_share, *correct, c.halo_rows, c.halo_bytes, c.messages]
        )
        maxima = self.transport.allreduce(
            [epoch_s, epoch_s - c.comm_wait_s - c.allreduce_s, c.comm_wait_s, c.allreduce_s, c.halo_rows,
             c.spmm_exchanges],
            op="max",
        )
        loss, n_train, n_val, n_test, halo_rows, halo_bytes, messages = sums
        counts = self.global_counts

        def accuracy(hits: float, name: str) -> float:
            return hits / counts[name] if counts[name] else float("nan")

        return {
            "epoch": epoch,
            "loss": loss,
            "train_acc": accuracy(n_train, "train"),
            "val_acc": accuracy(n_val, "val"),
            "test_acc": accuracy(n_test, "test"),
            "epoch_s": maxima[0],
            "compute_s": maxima[1],
            "comm_wait_s": maxima[2],
            "allreduce_s": maxima[3],
            "halo_rows": int(halo_rows),
            "halo_bytes": int(halo_bytes),
            "messages": int(messages),
            "max_rank_halo_rows": int(maxima[4]),
            "spmm_exchanges": int(maxima[5]),
        }

    def model_config(self) -> str:
        """Everything that shapes the model and its updates, canonically; a checkpoint must match it."""
        c = self.config
        return json.dumps({"widths": self.model.widths, "dropout": c.dropout, "lr": c.lr,
                           "weight_decay": c.weight_decay, "optimizer": c.optimizer, "seed": c.seed,
                           "dtype": c.dtype,
                           # only when not the default, so that checkpoints written before the option still match
                           **({"first_layer": c.first_layer} if c.first_layer != "exact" else {}),
                           **({"halo_dtype": c.halo_dtype} if c.halo_dtype not in (None, c.dtype) else {})},
                          sort_keys=True)

    def state_dict(self) -> dict:
        """What a checkpoint holds: identical on every rank, since the weights are replicated."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "completed_epochs": self.completed_epochs, "rng": capture_rng_states()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.completed_epochs = int(state["completed_epochs"])
        restore_rng_states(state["rng"])

    def weights(self) -> list[np.ndarray]:
        """Current parameters (identical on every rank), weights then biases."""
        return [p.detach().cpu().numpy().copy() for p in self.model.parameters()]
