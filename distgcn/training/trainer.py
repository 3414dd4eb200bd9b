"""Distributed training of a GCN on one rank's shard: each epoch, the steps of a batch source, then evaluation.

Every rank runs this same loop on its own rows. Full-batch training takes one
step per epoch on the whole shard (:class:`distgcn.training.steps.FullBatch`), minibatch
training K steps on sampled subgraphs (:class:`distgcn.training.minibatch.SampledBatches`);
either way the ranks' weight gradients are summed (the allreduce) into the
single-process gradient of the step, and accuracies are measured on the full graph.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from distgcn.comm.counters import CommCounters
from distgcn.comm.gradsync import GradientSync
from distgcn.comm.named_allreduce import MAX, SUM, allreduce_named
from distgcn.comm.transport import Transport
from distgcn.config import ConfigError, MinibatchConfig, TrainConfig
from distgcn.io.checkpoint import (
    capture_rng_states,
    check_optimizer_state,
    restore_rng_states,
)
from distgcn.io.schema import SPLIT_KEYS
from distgcn.kernels import Kernels
from distgcn.kernels.kept_buffers import kept_between_epochs
from distgcn.nn.registry import model_class
from distgcn.runtime.faults import inject_faults
from distgcn.shard.rank_shard import Shard
from distgcn.training import optimizers
from distgcn.training.minibatch import SampledBatches
from distgcn.training.selection import Selection
from distgcn.training.shard_model import DTYPES, ShardModel
from distgcn.training.steps import BatchSource, FullBatch, Step, cross_entropies

__all__ = ["DTYPES", "Trainer", "TrainingDiverged", "make_optimizer"]


class TrainingDiverged(RuntimeError):
    """The global loss became NaN or infinite; every rank raises it in the same epoch."""

    def __init__(self, epoch: int, loss: float):
        super().__init__(f"loss is {loss} at epoch {epoch}: training diverged (lower --lr, or use float64)")
        self.epoch = epoch


OPTIMIZER_CLASSES = {"adam": optimizers.Adam, "sgd": optimizers.SGD}
"""The classes behind config.OPTIMIZERS (the names are checked when the configuration is built): torch's, without
the torch.compile guards whose import costs every training process seconds (distgcn/training/optimizers.py)."""


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    return OPTIMIZER_CLASSES[config.optimizer](params, lr=config.lr, weight_decay=config.weight_decay)


EPOCH_REDUCTIONS = {
    **dict.fromkeys(["loss", "val_loss", "train_hits", "val_hits", "test_hits", "halo_rows", "halo_bytes", "messages",
                     "comm_share"], SUM),
    **dict.fromkeys(["epoch_s", "compute_s", "comm_wait_s", "allreduce_s", "max_rank_halo_rows", "spmm_exchanges"],
                    MAX),
}
"""How each field of an epoch's metrics combines over ranks: totals, or the slowest (busiest) rank's value.

``comm_share`` is summed only to be divided by the number of ranks: the mean of each rank's own share."""


def rank_comm_share(counters: CommCounters, epoch_s: float) -> float:
    """The share of this rank's epoch it spent blocked on halo messages or gradient allreduces.

    Both are timed inside the epoch, one after the other on the rank's thread, so the share is at most 1.
    The epoch record carries its mean over ranks; the maxima ``comm_wait_s`` and ``allreduce_s`` may come
    from different ranks, so their sum over the slowest ``epoch_s`` can exceed 1 (issue #16).
    """
    return (counters.comm_wait_s + counters.allreduce_s) / epoch_s if epoch_s > 0 else 0.0



class Trainer:
    """Owns the model, the distributed Â, the optimizer and the batch source of one rank."""

    def __init__(self, shard: Shard, transport: Transport, config: TrainConfig, kernels: Kernels | str = "torch",
                 minibatch: MinibatchConfig | None = None, on_presample: Callable[[], None] | None = None):
        """Full-batch training, or with ``minibatch`` K sampled batches per epoch (collective).

        ``kernels``: the device's kernels, or the ``--spmm-kernel`` choice (:func:`distgcn.kernels.kernels_for`).
        ``on_presample`` is called after each batch the minibatch normalization pre-samples (progress).
        """
        self.shard = shard
        self.transport = transport
        self.config = config
        self.masks = {
            name: torch.from_numpy(np.asarray(mask, dtype=bool)).to(transport.device)
            for name, mask in (("train", shard.train_mask), ("val", shard.val_mask), ("test", shard.test_mask))
        }
        counts = transport.allreduce([int(m.sum()) for m in self.masks.values()])
        self.global_counts = dict(zip(self.masks, (int(c) for c in counts)))
        if self.global_counts["train"] == 0:
            raise ValueError("no training vertices in the graph")
        if config.watched is not None and self.global_counts["val"] == 0:
            flag = "train.keep_best" if config.keep_best else "train.patience" if config.patience else \
                "train.lr_schedule"
            raise ConfigError(flag, f"{{{flag}}} watches {config.watched}, but the graph has no validation vertices")
        self.net = ShardModel(shard, transport, config, kernels)
        self.dtype, self.counters, self.kernels = self.net.dtype, self.net.counters, self.net.kernels
        self.aggregation, self.model, self.inputs = self.net.aggregation, self.net.model, self.net.inputs
        self.labels = torch.from_numpy(shard.labels.astype(np.int64)).to(transport.device)
        self.optimizer = make_optimizer(self.model.parameters(), config)
        self.grad_sync = GradientSync(self.model, transport, self.counters)
        self.completed_epochs = 0
        """Epochs already trained (by this run or the checkpoint it resumed from)."""
        self.selection = Selection(config)
        self.best_state: dict | None = None
        """With ``keep_best``: a copy of the model's parameters after the best epoch so far."""
        self.stopped_early = False
        """Whether early stopping ended training before ``epochs`` (set when :meth:`epochs` ends)."""
        self._val_rows = self.masks["val"].nonzero().squeeze(1)
        self.source: BatchSource = (
            FullBatch(self.inputs, self.aggregation, shard.global_ids, self.masks["train"], self.labels,
                      self.global_counts["train"]) if minibatch is None
            else SampledBatches(self, minibatch, on_presample))

    def _forward(self, epoch: int) -> torch.Tensor:
        return self.model(self.inputs, self.aggregation, self.shard.global_ids, epoch)

    def take_step(self, step: Step, epoch: int) -> float:
        """One optimizer step; returns this rank's share of the step's global loss."""
        self.model.train()
        self.optimizer.zero_grad()
        loss = step.loss(self.model(step.inputs, step.aggregate, step.row_ids, step.dropout_step))
        inject_faults(self.transport.rank, epoch)
        loss.backward()
        self.grad_sync.wait()
        self.optimizer.step()
        return float(loss.detach())

    def train_epoch(self, epoch: int) -> tuple[float, dict]:
        """The source's steps; this rank's share of their mean loss, and what the source adds to the metrics."""
        losses = [self.take_step(step, epoch) for step in self.source.steps(epoch)]
        return float(np.mean(losses)), self.source.epoch_metrics(losses)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict[str, float]:
        """Correct predictions on this rank's train, val and test rows (dropout off), as train_hits etc., and
        its share of the validation loss (the sum over its validation rows over the global count)."""
        self.model.eval()
        logits = self._forward(epoch)
        hits = self.kernels.predicted_classes(logits) == self.labels
        found: dict[str, float] = {f"{name}_hits": int((hits & mask).sum()) for name, mask in self.masks.items()}
        val_count = self.global_counts["val"]
        val_sum = cross_entropies(logits, self.labels[self._val_rows], self._val_rows).sum() if val_count else 0.0
        found["val_loss"] = float(val_sum) / val_count if val_count else float("nan")
        return found

    def layer_outputs(self) -> list[torch.Tensor]:
        """Every layer's output on this rank's rows with the current weights, dropout off (collective)."""
        return self.net.layer_outputs(self.completed_epochs)

    def epochs(self) -> Iterator[dict]:
        """Train, yielding one metrics record per epoch (identical on every rank).

        The epochs' large activations live in buffers kept from one epoch to the next
        (:mod:`distgcn.kernels.kept_buffers`), freed when the last epoch is done."""
        self.stopped_early = False
        with kept_between_epochs():
            for epoch in range(self.completed_epochs + 1, self.config.epochs + 1):
                if self.selection.should_stop():
                    self.stopped_early = True
                    return
                lr = self.selection.learning_rate(epoch)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self.counters.reset()
                start = time.perf_counter()
                loss_share, source_metrics = self.train_epoch(epoch)
                evaluated = self.evaluate(epoch)
                epoch_s = time.perf_counter() - start
                record = {**self._reduce_metrics(epoch, loss_share, evaluated, epoch_s), **source_metrics, "lr": lr}
                if not math.isfinite(record["loss"]):
                    raise TrainingDiverged(epoch, record["loss"])
                self.completed_epochs = epoch
                if self.selection.observe(record) and self.config.keep_best is not None:
                    self.best_state = {name: value.detach().clone() for name, value in
                                       self.model.state_dict().items()}
                if self.selection.best_epoch is not None:
                    record["best_epoch"] = self.selection.best_epoch
                yield record
            self.stopped_early = self.selection.should_stop() and self.completed_epochs < self.config.epochs

    def use_best_weights(self) -> int | None:
        """With ``keep_best``: put the best epoch's weights into the model (after its last checkpoint) and return
        that epoch; None without ``keep_best`` or before any epoch."""
        if self.config.keep_best is None or self.best_state is None:
            return None
        self.model.load_state_dict(self.best_state)
        return self.selection.best_epoch

    def _reduce_metrics(self, epoch: int, loss_share: float, evaluated: dict[str, float], epoch_s: float) -> dict:
        """The epoch's record: this rank's measurements combined over ranks by EPOCH_REDUCTIONS (collective)."""
        c = self.counters
        local = {"loss": loss_share, **evaluated, "halo_rows": c.halo_rows, "halo_bytes": c.halo_bytes,
                 "messages": c.messages, "epoch_s": epoch_s, "compute_s": epoch_s - c.comm_wait_s - c.allreduce_s,
                 "comm_wait_s": c.comm_wait_s, "allreduce_s": c.allreduce_s, "max_rank_halo_rows": c.halo_rows,
                 "spmm_exchanges": c.spmm_exchanges, "comm_share": rank_comm_share(c, epoch_s)}
        ranks, me = self.transport.size, self.transport.rank
        # every rank's own split, gathered by one sum (each rank fills its own slots), in the same allreduce
        per_rank = {f"{key}@{rank}": local[key] if rank == me else 0.0
                    for rank in range(ranks) for key in ("epoch_s", *SPLIT_KEYS)}
        total = allreduce_named(self.transport, [{**local, **per_rank}],
                                {**EPOCH_REDUCTIONS, **dict.fromkeys(per_rank, SUM)})[0]
        slowest = max(range(ranks), key=lambda rank: total[f"epoch_s@{rank}"])
        counts = self.global_counts

        def accuracy(name: str) -> float:
            return total[f"{name}_hits"] / counts[name] if counts[name] else float("nan")

        return {"epoch": epoch, "loss": total["loss"],
                **{f"{name}_acc": accuracy(name) for name in ("train", "val", "test")},
                "val_loss": total["val_loss"] if counts["val"] else float("nan"),
                **{key: total[key] for key in ("epoch_s", *SPLIT_KEYS)},
                "comm_share": total["comm_share"] / self.transport.size,
                **{key: int(total[key]) for key in ("halo_rows", "halo_bytes", "messages", "max_rank_halo_rows",
                                                    "spmm_exchanges")},
                # the slowest rank's own split: unlike the per-key maxima above, it adds up to epoch_s
                "slowest_rank": slowest, **{f"slowest_{key}": total[f"{key}@{slowest}"] for key in SPLIT_KEYS}}

    def model_config(self) -> str:
        """Everything that shapes the model, its updates and its batches, canonically; a checkpoint must match it."""
        c = self.config
        return json.dumps({"widths": self.model.widths, "dropout": c.dropout, "lr": c.lr,
                           "weight_decay": c.weight_decay, "optimizer": c.optimizer, "seed": c.seed,
                           "dtype": c.dtype,
                           # only when not the default, so that checkpoints written before the option still match
                           **({"first_layer": c.first_layer} if c.first_layer != "exact" else {}),
                           **({"halo_dtype": c.halo_dtype} if c.halo_dtype not in (None, c.dtype) else {}),
                           **model_class(c.conv).identity(c),
                           **self.selection.identity(),
                           **self.source.identity()},
                          sort_keys=True)

    def state_dict(self) -> dict:
        """What a checkpoint holds: identical on every rank, since the weights are replicated."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "completed_epochs": self.completed_epochs, "rng": capture_rng_states(),
                 "selection": self.selection.state_dict()}
        if self.best_state is not None:
            state["best_model"] = self.best_state
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output; ValueError (or torch's error) where it does not fit this model."""
        self.model.load_state_dict(state["model"])
        check_optimizer_state(state["optimizer"], self.optimizer)
        self.optimizer.load_state_dict(state["optimizer"])
        self.completed_epochs = int(state["completed_epochs"])
        restore_rng_states(state["rng"])
        self.selection.load_state_dict(state.get("selection"))
        best = state.get("best_model") if self.config.keep_best is not None else None
        if best is not None and self.selection.best_epoch is not None:
            self.model.load_state_dict(best)  # checked against this model; the last epoch's weights are put back
            self.model.load_state_dict(state["model"])
            self.best_state = best
        elif self.config.keep_best is not None:
            self.selection.restart()  # the checkpoint kept no weights to go with its best epoch

    def weights(self) -> list[np.ndarray]:
        """Current parameters (identical on every rank), weights then biases."""
        return [p.detach().cpu().numpy().copy() for p in self.model.parameters()]
