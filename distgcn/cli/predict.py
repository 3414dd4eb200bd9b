"""``distgcn predict``: the predictions (and embeddings) of saved weights for every vertex, on any number of ranks.

The model is the one the weights file records; its forward pass is the trainer's, so on the same shards and
ranks the outputs are the training process's own, bit for bit (docs/user-guide.md, "Predicting").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distgcn.cli.options import (
    HALO_WINDOW_HELP,
    field_flags,
    field_options,
    halo_window,
    positive_int,
    seed_int,
    threads_int,
)
from distgcn.config import (
    ComputeConfig,
    PredictConfig,
    ProgressConfig,
)


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    predict = commands.add_parser("predict", help="predict every vertex's class from saved weights",
                                  description="Predict with the weights `train --save-weights` wrote: the model "
                                              "they record, on a partition directory or a graph, on P ranks.")
    predict.add_argument("source", metavar="DIR_OR_GRAPH",
                         help="a partition directory (each rank reads its shard), or a graph file or directory, or "
                              "synthetic:... (partitioned on rank 0)")
    predict.add_argument("--weights", required=True, metavar="FILE",
                         help="a weights file of `train --save-weights` (it records the model)")
    predict.add_argument("--out", required=True, metavar="PATH",
                         help="the .npz to write on rank 0: ids, predictions, logits, embeddings (--per-rank: a "
                              "directory of one file per rank)")
    predict.add_argument("--layer", type=positive_int, **field_options(PredictConfig, "layer"), metavar="K",
                         help="the layer whose outputs go in 'embeddings', 1..layers (default: the last hidden "
                              "layer)")
    predict.add_argument("--all-layers", action="store_true", **field_options(PredictConfig, "all_layers"),
                         help="also write every layer's outputs, as layer_1 ... layer_L")
    predict.add_argument("--per-rank", action="store_true", **field_options(PredictConfig, "per_rank"),
                         help="each rank writes its own rows to PATH/rank-RRRRR.npz instead of gathering all "
                              "vertices on rank 0")
    predict.add_argument("--partition", **field_options(PredictConfig, "partition"),
                         help="how rank 0 partitions a graph (default: hypergraph)")
    predict.add_argument("--seed", type=seed_int, **field_options(PredictConfig, "seed"),
                         help="seed of the partitioner of a graph (default: 0)")
    predict.add_argument("--symmetrize", action=argparse.BooleanOptionalAction,
                         **field_options(PredictConfig, "symmetrize"),
                         help="read a graph as undirected (A ∪ Aᵀ), or not (default: as the weights file records "
                              "training read it)")
    predict.add_argument("--feature-norm", **field_options(PredictConfig, "feature_norm"),
                         help="scale a graph's feature rows to unit L1 norm, or not (default: as the weights file "
                              "records)")
    predict.add_argument("--halo-window", type=halo_window, **field_options(PredictConfig, "halo_window"),
                         metavar="K", help=HALO_WINDOW_HELP + " (default: 4)")
    predict.add_argument("--threads", type=threads_int, **field_options(ComputeConfig, "threads"),
                         help="compute threads per rank (default: as train's)")
    predict.add_argument("--spmm-kernel", **field_options(ComputeConfig, "spmm_kernel"),
                         help="local sparse product, as train's (default: auto)")
    predict.add_argument("--backend", **field_options(ComputeConfig, "backend"),
                         help="transport, as train's: mpi, gloo or nccl")
    predict.add_argument("--quiet", action="store_true", **field_options(ProgressConfig, "quiet"),
                         help="print only the summary line")
    predict.add_argument("--verbose", action="store_true", **field_options(ProgressConfig, "verbose"),
                         help="also the phases' times")
    predict.set_defaults(field_name=field_flags(predict))
    return predict


def predict_config(args: argparse.Namespace) -> PredictConfig:
    """The command's configuration (checked) from its arguments, whose dests are its fields' names."""
    settings = vars(args)
    own = {name: settings[name] for name in PredictConfig.__dataclass_fields__ if name in settings}
    return PredictConfig(**own, compute=ComputeConfig(**{name: settings[name] for name in
                                                         ComputeConfig.__dataclass_fields__}),
                         progress=ProgressConfig(**{name: settings[name] for name in
                                                    ProgressConfig.__dataclass_fields__}))


def run(args: argparse.Namespace) -> int:
    from distgcn.kernels.allocator import prefer_huge_pages

    prefer_huge_pages()  # before anything imports torch
    config = predict_config(args)
    from distgcn.comm.collective import CollectiveInputError, abort_on_unexpected
    from distgcn.comm.transport.setup import make_transport
    from distgcn.runtime import signals
    from distgcn.runtime.threads import default_threads, set_threads

    transport = make_transport(config.compute.backend)
    signals.attach_job(transport.rank, transport.size, transport.abort)
    try:
        set_threads(config.compute.threads or default_threads(transport.ranks_on_this_node()))
        code = _predict(config, transport, args.field_name)
    except CollectiveInputError as exc:
        code = exc.report()
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(transport, exc)
        return 1
    transport.close()
    return code


def _predict(config: PredictConfig, transport, name_field) -> int:
    from distgcn.comm.collective import agree
    from distgcn.io.safe_io import EXPORT, check_target
    from distgcn.io.weights import read_weights
    from distgcn.runtime.progress import Progress
    from distgcn.training.pipeline import worded
    from distgcn.training.prediction import own_shard, predict

    progress = Progress.for_rank(transport.rank, quiet=config.progress.quiet, verbose=config.progress.verbose)
    root = transport.rank == 0
    if not config.per_rank:  # a path that cannot be written fails now, not after the prediction
        agree(transport, lambda: check_target(Path(config.out), EXPORT) if root else None)
    saved = agree(transport, lambda: read_weights(config.weights))  # every rank reads it: visible to all
    shard = own_shard(config, saved, transport, progress)
    layers = len(saved.widths) - 1
    if config.layer is not None and config.layer > layers:
        agree(transport, lambda: worded(lambda: _too_deep(config.layer, layers), name_field))
    outputs = predict(saved, saved.config(halo_window=config.halo_window), transport, shard,
                      config.compute.spmm_kernel, progress)
    written = outputs.export(config.out, gather=not config.per_rank, layer=config.layer,
                             all_layers=config.all_layers)
    vertices = int(transport.allreduce([len(outputs.ids)])[0])
    if root:
        record = saved.record
        where = config.out if written is None else written.parent if config.per_rank else written
        print(f"predicted {vertices} vertices on {transport.size} rank(s) with the weights of epoch "
              f"{record['epoch']} ({record['kept']}; {record['conv']}, widths {record['widths']}): {where}",
              flush=True)
    return 0


def _too_deep(layer: int, layers: int) -> None:
    from distgcn.config import ConfigError

    raise ConfigError("predict.layer", f"{{predict.layer}} {layer}: the model has {layers} layers")
