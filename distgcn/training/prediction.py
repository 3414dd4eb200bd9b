"""Prediction from saved weights: the model a weights file records, built on this rank's shard, run once.

One function, :func:`predict`, for ``distgcn predict`` and :func:`distgcn.api.predict`. The forward pass is the
trainer's own (:class:`~distgcn.training.shard_model.ShardModel`, dropout off), so on the same shards and ranks
it gives the training process's outputs bit for bit; on other ranks, the same up to float rounding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from distgcn.comm.collective import agree
from distgcn.comm.transport import Transport
from distgcn.config import PredictConfig, TrainConfig
from distgcn.data.prepare import GraphOptions
from distgcn.errors import InputError
from distgcn.io.weights import SavedWeights
from distgcn.kernels import kernels_for
from distgcn.runtime.progress import Progress
from distgcn.shard.directory import META_FILE
from distgcn.shard.distribute import load_own_shard
from distgcn.shard.rank_shard import Shard
from distgcn.shard.scatter import build_and_scatter, startup_partitioning
from distgcn.training.results import RankOutputs
from distgcn.training.shard_model import ShardModel


def predict(saved: SavedWeights, config: TrainConfig, transport: Transport, shard: Shard, kernel: str,
            progress: Progress) -> RankOutputs:
    """Every layer's output on this rank's rows with the saved weights (collective).

    ``config``: the model's settings (:meth:`SavedWeights.config`) with the run's own (the halo window)."""
    widths = saved.widths
    features = int(transport.allreduce([shard.features.shape[1]], op="max")[0])
    if features != widths[0]:
        agree(transport, lambda: _refuse(f"the graph has {features} feature columns, the weights' first layer "
                                         f"takes {widths[0]}", saved))
    kernels = agree(transport, lambda: kernels_for(transport.device, kernel))
    with progress.phase("predicting"):
        net = agree(transport, lambda: ShardModel(shard, transport, config, kernels, widths=widths))
        agree(transport, lambda: load_into(net.model, saved))
        outputs = [output.cpu().numpy() for output in net.layer_outputs(int(saved.record["epoch"]))]
    return RankOutputs.of(shard.global_ids, outputs, transport)


def _refuse(message: str, saved: SavedWeights) -> None:
    raise InputError(message, path=saved.path)


@torch.no_grad()
def load_into(model: torch.nn.Module, saved: SavedWeights) -> None:
    """Copy the saved parameters into ``model`` (in its parameters' order); InputError where they do not fit."""
    params = list(model.parameters())
    want = [tuple(p.shape) for p in params]
    got = [tuple(np.shape(a)) for a in saved.parameters]
    if got != want:
        raise InputError(f"the parameters' shapes {got} do not fit the recorded {saved.record['conv']} model of "
                         f"widths {saved.widths} ({want})", path=saved.path)
    for param, array in zip(params, saved.parameters):
        param.copy_(torch.from_numpy(np.asarray(array)).to(param.dtype))


def own_shard(config: PredictConfig, saved: SavedWeights, transport: Transport, progress: Progress) -> Shard:
    """This rank's shard of ``config.source``: read from a partition directory, or cut from the graph that rank 0
    reads as the weights file records training read it (unless ``config`` says otherwise) and partitions."""
    if transport.allgather_object((Path(config.source) / META_FILE).is_file())[0]:
        with progress.phase("loading shards"):
            return load_own_shard(transport, config.source)
    trained = saved.record.get("graph") or {}
    drawn = trained.get("random_features_seed")  # random features: drawn again as training drew them
    widths = saved.widths
    options = GraphOptions(spec=config.source,
                           symmetrize=trained.get("symmetrize", False) if config.symmetrize is None
                           else config.symmetrize,
                           features=widths[0] if drawn is not None else None,
                           classes=widths[-1] if drawn is not None else None,
                           seed=drawn if drawn is not None else config.seed,
                           feature_norm=config.feature_norm or trained.get("feature_norm", "row"))
    with progress.phase(f"partitioning on rank 0 ({config.partition}) and sending shards"):
        return build_and_scatter(transport, options, startup_partitioning(config.partition, config.seed))
