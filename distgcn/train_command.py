"""``distgcn train``: get this rank's shard, train, report (rank 0 prints and writes)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .distribute import build_and_scatter, load_own_shard
from .errors import InputError
from .launch import CollectiveInputError, abort_on_unexpected, agree, default_threads, ranks_on_this_node, \
    set_threads
from .metrics_log import MetricsWriter, format_epoch
from .prepare import GraphOptions
from .spmm import choose_kernel
from .trainer import TrainConfig, Trainer
from .transport import MPITransport


def _config(args: argparse.Namespace) -> TrainConfig:
    if args.layers < 2:
        raise InputError(f"--layers: expected at least 2, got {args.layers}")
    if len(args.hidden) not in (1, args.layers - 1):
        raise InputError(f"--hidden: expected 1 or {args.layers - 1} widths for {args.layers} layers, "
                         f"got {len(args.hidden)}")
    return TrainConfig(layers=args.layers, hidden=args.hidden, epochs=args.epochs, lr=args.lr,
                       dropout=args.dropout, weight_decay=args.weight_decay, optimizer=args.optimizer,
                       seed=args.seed, dtype=args.dtype)


def run_train(args: argparse.Namespace) -> int:
    if (args.partition_dir is None) == (args.graph is None):
        raise InputError("train needs exactly one of DIR (a partition directory) or --graph GRAPH")
    config = _config(args)
    transport = MPITransport()
    try:
        return _train(args, config, transport)
    except CollectiveInputError as exc:
        if exc.printed_here:
            print(f"distgcn: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(transport, exc)
        return 1


def _train(args: argparse.Namespace, config: TrainConfig, transport) -> int:
    threads = args.threads or default_threads(ranks_on_this_node(transport))
    set_threads(threads)
    kernel = choose_kernel(args.spmm_kernel, threads)
    root = transport.rank == 0
    if args.partition_dir is not None:
        shard = load_own_shard(transport, args.partition_dir)
    else:
        options = GraphOptions(spec=args.graph, symmetrize=args.symmetrize, features=args.features,
                               classes=args.classes, seed=args.seed, feature_norm=args.feature_norm)
        shard = build_and_scatter(transport, options, args.partition, args.seed)

    writer = agree(transport, lambda: MetricsWriter(args.metrics if root else None))
    trainer = agree(transport, lambda: _make_trainer(shard, transport, config, kernel))
    last: dict = {}
    for record in trainer.epochs():
        last = record
        if root:
            writer.write(record)
            if not args.quiet:
                print(format_epoch(record), flush=True)
    if root:
        writer.close()
        if args.save_weights:
            np.savez(args.save_weights, *trainer.weights())
        print(_summary(last, transport.size), flush=True)
    return 0


def _make_trainer(shard, transport, config: TrainConfig, kernel: str) -> Trainer:
    try:
        return Trainer(shard, transport, config, kernel)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _summary(m: dict, ranks: int) -> str:
    return (
        f"done: {m['epoch']} epochs on {ranks} rank(s)  final loss {m['loss']:.4f}  "
        f"train acc {m['train_acc']:.4f}  val acc {m['val_acc']:.4f}  test acc {m['test_acc']:.4f}\n"
        f"communication per epoch: {m['halo_rows']} halo rows ({m['halo_bytes'] / 1e6:.2f} MB) in "
        f"{m['messages']} messages over {m['spmm_exchanges']} SpMM exchanges; busiest rank sent "
        f"{m['max_rank_halo_rows']} rows; comm wait {m['comm_wait_s'] * 1e3:.1f} ms, "
        f"allreduce {m['allreduce_s'] * 1e3:.1f} ms of {m['epoch_s'] * 1e3:.1f} ms"
    )
