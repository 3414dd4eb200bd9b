"""``distgcn train``: the run's configuration from the arguments, then the pipeline on every rank.

Rank 0 prints the summary and writes the outputs; the exit status says how the run ended
(0, 2 bad input, 3 diverged, 128 + N at the scheduler's warning N).
"""

from __future__ import annotations

import argparse
import sys

from distgcn.cli.options import (
    HALO_WINDOW_HELP,
    add_graph_options,
    add_vertex_order_option,
    epochs_int,
    field_flags,
    field_options,
    halo_window,
    non_negative_float,
    positive_int,
    probability,
    seed_int,
    threads_int,
    widths,
)
from distgcn.cli.sampler_options import add_sampler_options
from distgcn.config import (
    DEFAULT_PARTITION_MODEL,
    ComputeConfig,
    MinibatchConfig,
    OutputConfig,
    ProgressConfig,
    RunConfig,
    SourceConfig,
    TrainConfig,
)
from distgcn.errors import InputError


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    train = commands.add_parser("train", help="train a GCN on P ranks (launch with mpiexec -n P)",
                                description="Train a GCN; each rank holds only its rows of Â, H and G.")
    train.add_argument("partition_dir", nargs="?", metavar="DIR",
                       help="a partition directory written by 'distgcn partition' (each rank reads its shard)")
    train.add_argument("--graph", metavar="GRAPH",
                       help="a graph file or directory, or synthetic:... ; partitioned on rank 0")
    train.add_argument("--partition", **field_options(SourceConfig, "partition"),
                       help="how rank 0 partitions --graph; hypergraph uses Mt-KaHyPar's deterministic preset, so "
                            f"that a resumed run gets the same partition (default: {DEFAULT_PARTITION_MODEL})")
    add_vertex_order_option(train, "with --graph: ", SourceConfig)
    add_graph_options(train, SourceConfig)
    train.add_argument("--conv", **field_options(TrainConfig, "conv"),
                       help="layer type: gcn, sage (GraphSAGE, mean aggregator) or gat (graph attention); all "
                            "aggregate over Â's pattern on the same halo plan (docs/models.md; default: gcn)")
    train.add_argument("--layers", type=int, **field_options(TrainConfig, "layers"),
                       help="number of layers, >= 2 (default: 2)")
    train.add_argument("--hidden", type=widths, **field_options(TrainConfig, "hidden"), metavar="H[,H...]",
                       help="hidden width, or one width per hidden layer; with --conv gat, per head "
                            "(default: 16)")
    train.add_argument("--heads", type=positive_int, **field_options(TrainConfig, "heads"),
                       help="--conv gat: attention heads of each hidden layer, concatenated (default: 8)")
    train.add_argument("--output-heads", type=positive_int, **field_options(TrainConfig, "output_heads"),
                       help="--conv gat: attention heads of the last layer, averaged (default: 1)")
    train.add_argument("--attention-dropout", type=probability, **field_options(TrainConfig, "attention_dropout"),
                       help="--conv gat: dropout of the attention coefficients (default: --dropout)")
    train.add_argument("--no-root-weight", dest="root_weight", action="store_false",
                       **field_options(TrainConfig, "root_weight"),
                       help="--conv sage: no W_self term, a vertex's own row enters only if it is its own "
                            "neighbour (default: W_self·h_v + W_neigh·mean)")
    train.add_argument("--epochs", type=epochs_int, **field_options(TrainConfig, "epochs"),
                       help="epochs, at most 99999999 (default: 200)")
    train.add_argument("--lr", type=non_negative_float, **field_options(TrainConfig, "lr"),
                       help="learning rate (default: 0.01)")
    train.add_argument("--lr-schedule", **field_options(TrainConfig, "lr_schedule"),
                       help="learning rate by epoch: constant, step (times --lr-gamma every --lr-step epochs), "
                            "cosine (from --lr down to --lr-min over --epochs) or plateau (times --lr-gamma after "
                            "more than --lr-patience epochs without a better watched metric) (docs/runtime.md; "
                            "default: constant)")
    train.add_argument("--lr-step", type=epochs_int, **field_options(TrainConfig, "lr_step"), metavar="N",
                       help="--lr-schedule step: epochs between two decays")
    train.add_argument("--lr-gamma", type=non_negative_float, **field_options(TrainConfig, "lr_gamma"),
                       metavar="G", help="--lr-schedule step or plateau: the factor of each decay (default: 0.1)")
    train.add_argument("--lr-min", type=non_negative_float, **field_options(TrainConfig, "lr_min"), metavar="LR",
                       help="--lr-schedule cosine: the last rate; plateau: the lowest (default: 0)")
    train.add_argument("--lr-patience", type=int, **field_options(TrainConfig, "lr_patience"), metavar="N",
                       help="--lr-schedule plateau: decay after more than N epochs without a better watched "
                            "metric (default: 10)")
    train.add_argument("--keep-best", **field_options(TrainConfig, "keep_best"), metavar="METRIC",
                       help="val_acc or val_loss: keep the weights of the epoch with the best value; --save-weights "
                            "writes them and the summary names the epoch (default: the last epoch's weights)")
    train.add_argument("--patience", type=epochs_int, **field_options(TrainConfig, "patience"), metavar="N",
                       help="stop early after N epochs without a better watched metric (--keep-best's, else "
                            "val_loss)")
    train.add_argument("--dropout", type=probability, **field_options(TrainConfig, "dropout"),
                       help="dropout probability (default: 0.5)")
    train.add_argument("--weight-decay", type=non_negative_float, **field_options(TrainConfig, "weight_decay"),
                       help="L2 weight decay (default: 5e-4)")
    train.add_argument("--optimizer", **field_options(TrainConfig, "optimizer"), help="(default: adam)")
    train.add_argument("--seed", type=seed_int, **field_options(TrainConfig, "seed"),
                       help="seed of the weights, dropout, random partition and random features, 0..2147483647 "
                            "(default: 0)")
    train.add_argument("--dtype", **field_options(TrainConfig, "dtype"), help="(default: float32)")
    train.add_argument("--first-layer", **field_options(TrainConfig, "first_layer"),
                       help="cached: compute Â·X once at setup, so the first layer needs no exchange per epoch; "
                            "dropout then applies after the aggregation (a different model; default: exact)")
    train.add_argument("--comm", **field_options(TrainConfig, "comm"),
                       help="broadcast: every rank sends its whole block of H at every SpMM, the CAGNET-style "
                            "1D algorithm, for comparison (default: halo, only the rows Â needs)")
    train.add_argument("--halo-dtype", **field_options(TrainConfig, "halo_dtype"),
                       help="send halo rows (forward) and halo partial products (backward) in this dtype, "
                            "converted back to --dtype on arrival: 2-byte types halve the bytes sent for a "
                            "rounding of what crosses ranks (default: --dtype, no conversion)")
    train.add_argument("--halo-window", type=halo_window, **field_options(TrainConfig, "halo_window"), metavar="K",
                       help=HALO_WINDOW_HELP + " (default: 4)")
    train.add_argument("--threads", type=threads_int, **field_options(ComputeConfig, "threads"),
                       help="compute threads per rank (torch, BLAS and our numba kernels); default: "
                            "SLURM_CPUS_PER_TASK under Slurm, else the node's cores divided by the ranks on the node")
    train.add_argument("--spmm-kernel", **field_options(ComputeConfig, "spmm_kernel"),
                       help="local sparse product: auto = numba on the CPU (our loop on --threads threads; "
                            "torch's CSR product on int32 indices below 8 columns), torch CSR on a GPU "
                            "(default: auto; measured in docs/performance.md)")
    train.add_argument("--backend", **field_options(ComputeConfig, "backend"),
                       help="transport: mpi (mpi4py), gloo (torch.distributed on CPUs) or nccl (one GPU per rank); "
                            "default: nccl when a GPU is visible and no MPI launcher started the job, else mpi "
                            "(docs/gpu.md)")
    train.add_argument("--metrics", **field_options(OutputConfig, "metrics"), metavar="FILE",
                       help="write one JSON object per epoch to FILE (rank 0)")
    train.add_argument("--save-weights", **field_options(OutputConfig, "save_weights"), metavar="FILE",
                       help="write the final weights to FILE (.npz, rank 0)")
    train.add_argument("--checkpoint-dir", **field_options(OutputConfig, "checkpoint_dir"), metavar="D",
                       help="directory for checkpoints (created; must be visible to every rank)")
    train.add_argument("--checkpoint-every", type=positive_int, **field_options(OutputConfig, "checkpoint_every"),
                       metavar="K",
                       help="write a checkpoint every K epochs and after the last one")
    train.add_argument("--checkpoint-keep", type=positive_int, **field_options(OutputConfig, "checkpoint_keep"),
                       metavar="N",
                       help="keep the newest N checkpoints (default: 3)")
    train.add_argument("--resume", action="store_true", **field_options(OutputConfig, "resume"),
                       help="continue from the newest sound checkpoint in --checkpoint-dir (start afresh if "
                            "there is none, so a requeued job can always pass it)")
    train.add_argument("--restart-metrics", action="store_true", **field_options(OutputConfig, "restart_metrics"),
                       help="with --resume: start a new --metrics file after the checkpoint's epoch instead of "
                            "continuing the old one, which is refused when it is another run's or lacks epochs")
    add_sampler_options(train)
    train.add_argument("--batches-per-epoch", type=positive_int, **field_options(MinibatchConfig, "batches_per_epoch"),
                       metavar="K",
                       help="with --sampler: optimizer steps (minibatches) per epoch (default: ceil(n / N))")
    train.add_argument("--norm-samples", type=int, **field_options(MinibatchConfig, "norm_samples"), metavar="B",
                       help="with --sampler: pre-sampled batches for GraphSAINT normalization; 0 turns it off "
                            "(default: 50)")
    train.add_argument("--sample-on", **field_options(MinibatchConfig, "sample_on"),
                       help="with --sampler: where batches are drawn and cut; host = numpy and numba on the CPU, "
                            "device = torch on the rank's device (its GPU with nccl), auto = device on a GPU, host "
                            "on a CPU; every choice draws the same batches (default: auto)")
    train.add_argument("--quiet", action="store_true", **field_options(ProgressConfig, "quiet"),
                       help="no per-epoch lines or progress; only the summary")
    train.add_argument("--verbose", action="store_true", **field_options(ProgressConfig, "verbose"),
                       help="also each epoch's time split and traffic, and the run's settings")
    train.set_defaults(field_name=field_flags(train))
    return train


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's configuration (checked) from train's arguments, whose dests are its fields' names; refused before
    any transport starts."""
    from distgcn.training.settings import run_config as from_settings

    config = from_settings(vars(args))
    config.source.require_one()
    return config


def _announce(args: argparse.Namespace) -> None:
    """Rank 0 of a launched job says that it started, before the seconds of importing torch and starting MPI.

    Read from the launcher's environment alone; a process started by hand (launcher none) stays as it was.
    """
    from distgcn.comm import launch as launched
    from distgcn.runtime.progress import Progress

    launch = launched.this_process()
    if launch.launcher != "none":
        Progress.for_rank(launch.rank, quiet=args.quiet, verbose=args.verbose).info(
            f"starting {launch.world_size} rank(s) ({launch.launcher}): loading torch, then the transport")


def _unreadable_graph(args: argparse.Namespace) -> InputError | None:
    """What is wrong with --graph, found by the rank that reads it (rank 0) before the seconds of importing torch
    and starting MPI: a path that is not there or in no known format. None elsewhere and for a synthetic spec."""
    from distgcn.comm import launch

    if args.graph is None or args.partition_dir is not None or args.graph.startswith("synthetic:") \
            or launch.this_process().rank != 0:
        return None
    from distgcn.data import detect_format

    try:
        detect_format(args.graph)
    except InputError as exc:
        return exc
    return None


def _refuse(error: InputError | None) -> None:
    if error is not None:
        raise error


def run(args: argparse.Namespace) -> int:
    from distgcn.comm import launch
    from distgcn.kernels.allocator import keep_freed_memory, prefer_huge_pages

    prefer_huge_pages()  # before anything imports torch
    unreadable = _unreadable_graph(args)
    if unreadable is not None:
        if launch.this_process().world_size == 1:
            raise unreadable
        # at once; the other ranks learn it once the transport is up, and every rank then ends with status 2
        print(f"distgcn: error: rank 0: {unreadable}", file=sys.stderr, flush=True)
    else:
        _announce(args)
    from distgcn.comm.agreement import RanksDisagree
    from distgcn.comm.collective import CollectiveInputError, abort_on_unexpected, agree
    from distgcn.comm.transport.setup import make_transport
    from distgcn.runtime import signals
    from distgcn.runtime.threads import default_threads, set_threads
    from distgcn.training.trainer import TrainingDiverged

    config = run_config(args)
    signals.defer_warning()  # the scheduler's warning ends training at an epoch boundary, after a checkpoint
    transport = make_transport(config.compute.backend)
    signals.attach_job(transport.rank, transport.size, transport.abort)
    try:
        agree(transport, lambda: _refuse(unreadable))  # every rank, so that none waits on another's arguments
        ranks_on_node = transport.ranks_on_this_node()  # collective: every rank asks, whatever its --threads
        threads = config.compute.threads or default_threads(ranks_on_node)
        set_threads(threads)
        keep_freed_memory()
        code = _train(config, transport, threads, args.field_name)
    except CollectiveInputError as exc:
        if exc.printed_here and unreadable is None:  # the unreadable graph was reported before the imports
            print(f"distgcn: error: {exc}", file=sys.stderr)
        code = 2
    except RanksDisagree as exc:  # raised by every rank together
        if exc.printed_here:
            print(f"distgcn: error: {exc.render(args.field_name)}", file=sys.stderr)
        code = 2
    except TrainingDiverged as exc:  # raised by every rank in the same epoch (the loss is global)
        if transport.rank == 0:
            directory = config.outputs.checkpoint_dir
            kept = f"; checkpoints in {directory} end before it" if directory else ""
            print(f"distgcn: error: {exc}{kept}", file=sys.stderr)
        code = 3
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(transport, exc)
        return 1
    transport.close()  # every path above is taken by all ranks together
    return code


def _train(config: RunConfig, transport, threads: int, field_name) -> int:
    from distgcn.runtime import signals
    from distgcn.training import pipeline

    outcome = pipeline.run(config, transport, threads, pipeline.shards_from(config.source, config.train.seed),
                           field_name)
    if outcome.stopped_after is not None:
        return signals.exit_code(signals.WARNING_SIGNAL)
    if transport.rank == 0:
        if outcome.history:
            print(_summary(outcome.history[-1], transport.size), flush=True)
        elif outcome.trainer.stopped_early:
            print(f"done: the checkpoint is at epoch {outcome.trainer.completed_epochs}, where early stopping "
                  f"(--patience {config.train.patience}) ended training; nothing left to train", flush=True)
        else:
            print(f"done: the checkpoint is at epoch {outcome.trainer.completed_epochs} >= --epochs "
                  f"{config.train.epochs}; nothing left to train", flush=True)
        if outcome.best_epoch is not None:
            print(_kept(outcome, config.train.keep_best), flush=True)
    return 0


def _kept(outcome, metric: str) -> str:
    """The line that names the epoch whose weights were kept, with its accuracies where this run trained it."""
    best = next((m for m in outcome.history if m["epoch"] == outcome.best_epoch), None)
    scores = (f": val acc {best['val_acc']:.4f}  val loss {best['val_loss']:.4f}  test acc {best['test_acc']:.4f}"
              if best is not None else " (trained before the resumed checkpoint)")
    return f"kept the weights of epoch {outcome.best_epoch}, the best {metric}{scores}"


def _summary(m: dict, ranks: int) -> str:
    return (
        f"done: {m['epoch']} epochs on {ranks} rank(s)  final loss {m['loss']:.4f}  "
        f"train acc {m['train_acc']:.4f}  val acc {m['val_acc']:.4f}  test acc {m['test_acc']:.4f}\n"
        f"communication per epoch: {m['halo_rows']} halo rows ({m['halo_bytes'] / 1e6:.2f} MB) in "
        f"{m['messages']} messages over {m['spmm_exchanges']} SpMM exchanges; busiest rank sent "
        f"{m['max_rank_halo_rows']} rows; comm wait {m['comm_wait_s'] * 1e3:.1f} ms, "
        f"allreduce {m['allreduce_s'] * 1e3:.1f} ms of {m['epoch_s'] * 1e3:.1f} ms"
    )
