"""Minibatch training: K sampled subgraphs per epoch, each a distributed SpMM over its own restricted plan.

Evaluation (accuracies) stays full-graph, as in GraphSAINT, through the
full-batch trainer's adjacency; only the optimizer steps use batches.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..config import MinibatchConfig, TrainConfig
from ..faults import inject_faults
from ..halo import HaloExchanger
from ..shard import Shard
from ..sparse_input import SparseRows
from ..spmm import DistributedAdjacency, spmm
from ..trainer import DTYPES, Trainer
from ..transport import Transport
from .batch import BatchBlocks, build_batch
from .factory import make_distributed_sampler
from .normalization import LocalNormalization, presample
from .sampling import batch_key


class MinibatchTrainer(Trainer):
    """A :class:`Trainer` whose epochs are K optimizer steps on sampled subgraphs."""

    def __init__(self, shard: Shard, transport: Transport, config: TrainConfig, minibatch: MinibatchConfig,
                 kernel: str = "torch", on_presample: Callable[[], None] | None = None):
        """``on_presample`` is called after each of the normalization's pre-sampled batches (progress)."""
        if config.first_layer != "exact" or config.comm != "halo":
            raise ValueError("minibatch training needs --first-layer exact and the halo exchange: a batch "
                             "aggregates over its own subgraph Â[S, S]")
        super().__init__(shard, transport, config, kernel)
        self.minibatch = minibatch
        self.kernel = kernel
        self.sampler = make_distributed_sampler(minibatch.sampler, shard, transport, minibatch.batch_size,
                                                minibatch.options)
        self.batches = minibatch.batches_per_epoch or max(1, math.ceil(shard.n_global / minibatch.batch_size))
        self.normalization: LocalNormalization | None = (
            presample(self.sampler, config.seed, minibatch.norm_samples, on_presample) if minibatch.norm_samples
            else None)
        self.iterations: list[dict] = []

    def _batch_adjacency(self, blocks: BatchBlocks) -> DistributedAdjacency:
        owned, halo = blocks.owned_block, blocks.halo_block
        if self.normalization is not None:
            owned = owned.copy()
            halo = halo.copy()
            owned.data = owned.data * self.normalization.aggregator_scale(
                blocks.rows[np.repeat(np.arange(owned.shape[0]), np.diff(owned.indptr))], blocks.owned_entries,
                "owned")
            halo.data = halo.data * self.normalization.aggregator_scale(
                blocks.rows[np.repeat(np.arange(halo.shape[0]), np.diff(halo.indptr))], blocks.halo_entries,
                "halo")
        exchanger = HaloExchanger(blocks.plan, self.transport, self.counters, exchanges=self.transport.size > 1)
        return DistributedAdjacency(owned, halo, exchanger, DTYPES[self.config.dtype], self.kernel)

    def train_batch(self, epoch: int, batch: int) -> tuple[float, int, float]:
        """One optimizer step on batch ``batch`` of ``epoch``; returns (loss share, batch rows here, sampling s)."""
        start = time.perf_counter()
        owned_in, halo_in = self.sampler.sample(batch_key(self.config.seed, epoch, batch))
        sample_s = time.perf_counter() - start
        blocks = build_batch(self.shard, self.sampler.bytes, owned_in, halo_in, self.transport.device)
        adjacency = self._batch_adjacency(blocks)
        rows = torch.from_numpy(blocks.rows).to(self.transport.device)
        train = self.masks["train"][rows]
        targets = blocks.rows[train.cpu().numpy()]
        if self.normalization is not None:
            weights = self.normalization.loss_weights(targets, self.global_counts["train"])
            scale = torch.from_numpy(weights).to(self.transport.device, DTYPES[self.config.dtype])
        else:
            in_batch = self.transport.allreduce([int(targets.size)])[0]
            scale = torch.full((targets.size,), 1.0 / max(in_batch, 1), dtype=DTYPES[self.config.dtype],
                               device=self.transport.device)
        self.model.train()
        self.optimizer.zero_grad()
        step = (epoch - 1) * self.batches + batch + 1  # a distinct dropout mask per optimizer step
        inputs = self.inputs.take(blocks.rows) if isinstance(self.inputs, SparseRows) else self.inputs[rows]
        logits = self.model(inputs, lambda h: spmm(adjacency, h), self.shard.global_ids[blocks.rows], step)
        losses = F.cross_entropy(logits[train], self.labels[rows][train], reduction="none")
        loss = (losses * scale).sum()
        inject_faults(self.transport.rank, epoch)
        loss.backward()
        self.grad_sync.wait()
        self.optimizer.step()
        return float(loss.detach()), int(blocks.rows.size), sample_s

    def train_epoch(self, epoch: int) -> float:
        """K batches; returns this rank's share of the mean batch loss, and keeps per-batch records."""
        shares, local, times = [], [], []
        c = self.counters
        traffic = self.sampler.traffic
        for batch in range(self.batches):
            before = (c.halo_rows, c.messages, *traffic.values())
            start = time.perf_counter()
            loss, vertices, sample_s = self.train_batch(epoch, batch)
            after = (c.halo_rows, c.messages, *traffic.values())
            local.append([loss, vertices, *(a - b for a, b in zip(after, before))])
            times += [time.perf_counter() - start, sample_s]
            shares.append(loss)
        width = len(local[0])
        sums = self.transport.allreduce([x for rec in local for x in rec])
        slowest = self.transport.allreduce(times, op="max")
        keys = ["halo_rows", "messages", *traffic]
        self.iterations = [{"batch": b, "loss": sums[width * b], "batch_vertices": int(sums[width * b + 1]),
                            **{k: int(sums[width * b + 2 + i]) for i, k in enumerate(keys)},
                            "batch_s": slowest[2 * b], "sample_s": slowest[2 * b + 1]} for b in range(self.batches)]
        return float(np.mean(shares))

    def _reduce_metrics(self, epoch: int, loss_share: float, correct: list[int], epoch_s: float) -> dict:
        record = super()._reduce_metrics(epoch, loss_share, correct, epoch_s)
        record["batch_vertices"] = float(np.mean([it["batch_vertices"] for it in self.iterations]))
        record["iterations"] = self.iterations
        return record

    def model_config(self) -> str:
        """The full-batch model's settings plus the sampler's: a checkpoint must match both."""
        config = json.loads(super().model_config())
        m = self.minibatch
        config["minibatch"] = {"sampler": m.sampler, "batch_size": m.batch_size, "batches_per_epoch": self.batches,
                               "norm_samples": m.norm_samples}
        if m.options:  # node and edge have none: their checkpoints keep the identity they had before rw/frontier
            config["minibatch"]["options"] = m.options
        return json.dumps(config, sort_keys=True)
