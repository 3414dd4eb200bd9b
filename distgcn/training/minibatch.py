"""Minibatch training's steps: K sampled subgraphs per epoch, each a distributed SpMM over its own restricted plan.

A :class:`SampledBatches` is the trainer's batch source (:mod:`distgcn.training.steps`)
when a run has a sampler. Evaluation (accuracies) stays full-graph, as in
GraphSAINT, through the trainer's own adjacency; only the optimizer steps use batches.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch

from distgcn.comm.counters import CommCounters
from distgcn.comm.named_allreduce import MAX, SUM, allreduce_named
from distgcn.comm.transport import Transport
from distgcn.config import MinibatchConfig, TrainConfig
from distgcn.kernels import Kernels
from distgcn.nn.sparse_input import SparseRows
from distgcn.sampling.device import DeviceSampler, on_device
from distgcn.sampling.distributed import (
    DistributedSampler,
    LocalNormalization,
    batch_key,
    presample,
)
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import HaloExchanger
from distgcn.spmm.product import DistributedAdjacency, spmm
from distgcn.spmm.restricted import (
    BatchBlocks,
    DeviceBatchBlocks,
    ShardBlocksOn,
    build_batch,
    build_batch_on_device,
)
from distgcn.training.sampler_choice import make_distributed_sampler, samples_on_device
from distgcn.training.steps import Step, cross_entropies


def _synchronize(device: torch.device) -> None:
    """Wait for the work queued on a GPU (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TrainingRank(Protocol):
    """What a batch source reads of the trainer that owns it (:class:`distgcn.training.trainer.Trainer`)."""

    config: TrainConfig
    counters: CommCounters
    dtype: torch.dtype
    global_counts: dict[str, int]
    inputs: torch.Tensor | SparseRows
    kernels: Kernels
    labels: torch.Tensor
    masks: dict[str, torch.Tensor]
    shard: Shard
    transport: Transport


class SampledBatches:
    """K optimizer steps per epoch on sampled subgraphs, keyed by (seed, epoch, batch) so every run draws alike."""

    def __init__(self, trainer: TrainingRank, config: MinibatchConfig, on_presample: Callable[[], None] | None = None):
        """Set up the sampler and pre-sample the normalization (collective); ``on_presample`` after each batch."""
        self.trainer = trainer
        self.config = config
        device = trainer.transport.device
        host = make_distributed_sampler(config.sampler, trainer.shard, trainer.transport, config.batch_size,
                                        config.options)
        self.on_device = samples_on_device(config.sample_on, device)
        self.sampler: DistributedSampler | DeviceSampler = on_device(host, device) if self.on_device else host
        self.device_blocks = ShardBlocksOn(trainer.shard, device) if self.on_device else None
        """The shard's blocks on the device, which device batches are cut from."""
        self.per_epoch = config.batches_per_epoch or max(1, math.ceil(trainer.shard.n_global / config.batch_size))
        self.normalization: LocalNormalization | None = (
            presample(self.sampler, trainer.config.seed, config.norm_samples, on_presample) if config.norm_samples
            else None)
        self._measured: list[dict[str, float]] = []
        """This epoch's per-batch measurements on this rank, in batch order."""

    def _batch_adjacency(self, blocks: BatchBlocks | DeviceBatchBlocks) -> DistributedAdjacency:
        owned, halo = blocks.owned_block, blocks.halo_block
        t = self.trainer
        symmetric = None
        if isinstance(blocks, DeviceBatchBlocks):
            symmetric = self.device_blocks.symmetric and self.normalization is None  # C(v) / C(u, v) is not
            if self.normalization is not None:
                owned, halo = (dataclasses.replace(b, values=b.values * self.normalization.aggregator_scale(
                    blocks.rows[b.entry_rows()], entries, name))
                    for b, entries, name in ((owned, blocks.owned_entries, "owned"),
                                             (halo, blocks.halo_entries, "halo")))
        elif self.normalization is not None:
            owned = owned.copy()
            halo = halo.copy()
            owned.data = owned.data * self.normalization.aggregator_scale(
                blocks.rows[np.repeat(np.arange(owned.shape[0]), np.diff(owned.indptr))], blocks.owned_entries,
                "owned")
            halo.data = halo.data * self.normalization.aggregator_scale(
                blocks.rows[np.repeat(np.arange(halo.shape[0]), np.diff(halo.indptr))], blocks.halo_entries,
                "halo")
        exchanger = HaloExchanger(blocks.plan, t.transport, t.counters, exchanges=t.transport.size > 1,
                                  window=t.config.halo_window)
        return DistributedAdjacency(owned, halo, exchanger, t.dtype, t.kernels, symmetric=symmetric)

    def _step(self, blocks: BatchBlocks | DeviceBatchBlocks, number: int) -> Step:
        """Step ``number`` (1, 2, ... over the run) on the batch's rows, its loss GraphSAINT-weighted (collective)."""
        t = self.trainer
        device = t.transport.device
        adjacency = self._batch_adjacency(blocks)
        if self.on_device:  # a GPU's batch rows stay there; on the CPU the tensor and the array share memory
            rows = blocks.rows
            host_rows = rows.numpy() if device.type == "cpu" else None
        else:
            rows = torch.from_numpy(blocks.rows).to(device)
            host_rows = blocks.rows
        train = t.masks["train"][rows]
        labels = t.labels[rows][train]
        targets = rows[train] if self.on_device else blocks.rows[train.cpu().numpy()]
        if self.normalization is not None:
            weights = self.normalization.loss_weights(targets, t.global_counts["train"])
            scale = torch.as_tensor(weights).to(device, t.dtype)
        else:
            in_batch = t.transport.allreduce([int(targets.shape[0])])[0]
            scale = torch.full((targets.shape[0],), 1.0 / max(in_batch, 1), dtype=t.dtype, device=device)
        if isinstance(t.inputs, SparseRows):  # sparse features are held on the host
            inputs = t.inputs.take(rows.cpu().numpy() if host_rows is None else host_rows)
        else:
            inputs = t.inputs[rows]
        # dropout keys: global ids, hashed where the activations are (a GPU reads them from its own copy)
        row_ids = self.sampler.global_ids[rows] if host_rows is None else t.shard.global_ids[host_rows]
        return Step(inputs, lambda h: spmm(adjacency, h), row_ids, number,
                    lambda logits: (cross_entropies(logits[train], labels) * scale).sum())

    def _traffic(self) -> dict[str, int]:
        c = self.trainer.counters
        return {"halo_rows": c.halo_rows, "messages": c.messages, **self.sampler.traffic}

    def steps(self, epoch: int) -> Iterator[Step]:
        self._measured = []
        for batch in range(self.per_epoch):
            before = self._traffic()
            start = time.perf_counter()
            owned_in, halo_in = self.sampler.sample(batch_key(self.trainer.config.seed, epoch, batch))
            if self.on_device:
                _synchronize(owned_in.device)  # a GPU queues its work: the time is the sampling's, not its launch
            sample_s = time.perf_counter() - start
            if self.on_device:
                blocks = build_batch_on_device(self.device_blocks, self.sampler.bytes, owned_in, halo_in)
            else:
                blocks = build_batch(self.trainer.shard, self.sampler.bytes, owned_in, halo_in,
                                     self.trainer.transport.device)
            yield self._step(blocks, (epoch - 1) * self.per_epoch + batch + 1)
            # resumed when the trainer asks for the next step: this one has been taken
            after = self._traffic()
            self._measured.append({"batch_vertices": int(blocks.rows.shape[0]),
                                   **{key: after[key] - before[key] for key in after},
                                   "batch_s": time.perf_counter() - start, "sample_s": sample_s})

    def epoch_metrics(self, losses: list[float]) -> dict:
        """Each batch's loss, vertices and traffic summed over ranks and its slowest rank's times (collective)."""
        local = [{"loss": loss, **measured} for loss, measured in zip(losses, self._measured)]
        counted = [key for key in local[0] if key not in ("loss", "batch_s", "sample_s")]
        reduced = allreduce_named(self.trainer.transport, local,
                                  {**dict.fromkeys(["loss", *counted], SUM), "batch_s": MAX, "sample_s": MAX})
        iterations = [{"batch": b, "loss": r["loss"], **{key: int(r[key]) for key in counted},
                       "batch_s": r["batch_s"], "sample_s": r["sample_s"]} for b, r in enumerate(reduced)]
        return {"batch_vertices": float(np.mean([it["batch_vertices"] for it in iterations])),
                "iterations": iterations}

    def identity(self) -> dict:
        """The sampler's settings: a checkpoint must match them too."""
        m = self.config
        identity = {"sampler": m.sampler, "batch_size": m.batch_size, "batches_per_epoch": self.per_epoch,
                    "norm_samples": m.norm_samples}
        if m.options:  # node and edge have none: their checkpoints keep the identity they had before rw/frontier
            identity["options"] = m.options
        return {"minibatch": identity}
