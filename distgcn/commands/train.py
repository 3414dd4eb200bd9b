"""``distgcn train``: get this rank's shard, train, report (rank 0 prints and writes)."""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..checkpoint import RunIdentity, checkpoint_dir, checkpoint_path, newest_checkpoint, save_checkpoint
from ..distribute import build_and_scatter, load_own_shard, read_meta
from .. import memory, signals
from ..errors import InputError
from ..collective import CollectiveInputError, abort_on_unexpected, agree
from ..threads import default_threads, set_threads
from ..transport.setup import make_transport
from ..metrics_log import MetricsWriter, format_epoch, format_epoch_detail
from ..prepare import GraphOptions
from ..progress import Progress
from ..safe_io import WEIGHTS, check_target, write_npz
from ..spmm import choose_kernel
from ..minibatch import MinibatchConfig, MinibatchTrainer, sampler_options
from ..sampling.cli_options import sampler_spec
from ..trainer import TrainConfig, Trainer, TrainingDiverged


def _config(args: argparse.Namespace) -> TrainConfig:
    if args.layers < 2:
        raise InputError(f"--layers: expected at least 2, got {args.layers}")
    if len(args.hidden) not in (1, args.layers - 1):
        raise InputError(f"--hidden: expected 1 or {args.layers - 1} widths for {args.layers} layers, "
                         f"got {len(args.hidden)}")
    return TrainConfig(layers=args.layers, hidden=args.hidden, epochs=args.epochs, lr=args.lr,
                       dropout=args.dropout, weight_decay=args.weight_decay, optimizer=args.optimizer,
                       seed=args.seed, dtype=args.dtype, first_layer=args.first_layer, comm=args.comm,
                       halo_dtype=args.halo_dtype)


def _minibatch(args: argparse.Namespace) -> MinibatchConfig | None:
    """The minibatch settings, None for full-batch training (no --sampler)."""
    spec = sampler_spec(args)
    if spec is None:
        if args.batches_per_epoch is not None:
            raise InputError("--batches-per-epoch needs --sampler")
        return None
    if args.halo_dtype is not None:
        raise InputError("--halo-dtype applies to full-batch training only: minibatch steps (--sampler) "
                         "exchange in the training dtype")
    options = sampler_options(spec.name, spec.batch_size, spec.options)
    if args.norm_samples < 0:
        raise InputError(f"--norm-samples: expected an integer >= 0, got {args.norm_samples}")
    return MinibatchConfig(spec.name, spec.batch_size, args.batches_per_epoch, args.norm_samples, options)


def run_train(args: argparse.Namespace) -> int:
    minibatch = _minibatch(args)
    if (args.partition_dir is None) == (args.graph is None):
        raise InputError("train needs exactly one of DIR (a partition directory) or --graph GRAPH")
    if args.vertex_order is not None and args.partition_dir is not None:
        raise InputError("--vertex-order applies to --graph; the shards in DIR keep the order they were written with")
    if (args.resume or args.checkpoint_every) and not args.checkpoint_dir:
        raise InputError("--resume and --checkpoint-every need --checkpoint-dir D")
    config = _config(args)
    signals.defer_warning()  # the scheduler's warning ends training at an epoch boundary, after a checkpoint
    transport = make_transport(args.backend)
    signals.attach_job(transport.rank, transport.size, transport.abort)
    try:
        code = _train(args, config, transport, minibatch)
    except CollectiveInputError as exc:
        if exc.printed_here:
            print(f"distgcn: error: {exc}", file=sys.stderr)
        code = 2
    except TrainingDiverged as exc:  # raised by every rank in the same epoch (the loss is global)
        if transport.rank == 0:
            kept = f"; checkpoints in {args.checkpoint_dir} end before it" if args.checkpoint_dir else ""
            print(f"distgcn: error: {exc}{kept}", file=sys.stderr)
        code = 3
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(transport, exc)
        return 1
    transport.close()  # every path above is taken by all ranks together
    return code


def _train(args: argparse.Namespace, config: TrainConfig, transport, minibatch: MinibatchConfig | None) -> int:
    threads = args.threads or default_threads(transport.ranks_on_this_node())
    set_threads(threads)
    kernel = agree(transport, lambda: choose_kernel(args.spmm_kernel, threads, transport.device))
    root = transport.rank == 0
    progress = Progress.for_rank(transport.rank, quiet=args.quiet, verbose=args.verbose)
    if args.partition_dir is not None:
        with progress.phase("loading shards"):
            shard = load_own_shard(transport, args.partition_dir)
    else:
        options = GraphOptions(spec=args.graph, symmetrize=args.symmetrize, features=args.features,
                               classes=args.classes, seed=args.seed, feature_norm=args.feature_norm)
        with progress.phase(f"partitioning on rank 0 ({args.partition}) and sending shards"):
            shard = build_and_scatter(transport, options, args.partition, args.seed,
                                      vertex_order=args.vertex_order or "rcm")

    if args.save_weights:  # a bad path must fail now, not after the training it would have saved
        agree(transport, lambda: check_target(Path(args.save_weights), WEIGHTS) if root else None)
    run = _run_header(args, shard, config, transport, threads, kernel) if root else None
    if run is not None and minibatch is not None:
        run["minibatch"] = dict(vars(minibatch))
    progress.detail(f"run: {json.dumps(run)}")
    agree(transport, lambda: _check_memory(shard, config, transport))
    trainer = agree(transport, lambda: _make_trainer(shard, transport, config, kernel, minibatch, progress))
    identity = RunIdentity(shard.graph_fingerprint, shard.partition_id, trainer.model_config())
    directory = agree(transport, lambda: checkpoint_dir(args.checkpoint_dir, resume=args.resume, owner=root)
                      ) if args.checkpoint_dir else None
    if args.resume:
        _resume(trainer, transport, directory, identity)
    resume_after = trainer.completed_epochs if args.resume else None
    writer = agree(transport, lambda: MetricsWriter(args.metrics if root else None, run, resume_after))
    last: dict = {}
    saved_epoch = None

    def checkpoint(epoch: int) -> None:
        agree(transport, lambda: save_checkpoint(directory, epoch, trainer.state_dict(), identity,
                                                 args.checkpoint_keep) if root else None)

    with progress.phase("training", total=config.epochs - trainer.completed_epochs) as phase:
        for record in trainer.epochs():
            last = record
            phase.advance()
            if root:
                writer.write(record)
                if not args.quiet:
                    progress.echo(format_epoch(record))
                if progress.verbose:
                    progress.echo(format_epoch_detail(record))
            epoch = record["epoch"]
            if directory is not None and args.checkpoint_every and (
                    epoch % args.checkpoint_every == 0 or epoch == config.epochs):
                checkpoint(epoch)
                saved_epoch = epoch
            if epoch < config.epochs and _warned(transport):  # every rank stops after this same epoch
                if directory is not None and saved_epoch != epoch:
                    checkpoint(epoch)
                phase.finish(f"stopped after epoch {epoch} of {config.epochs} at the scheduler's warning")
                if root:
                    writer.close()
                    kept = f"checkpoint of epoch {epoch} in {directory}" if directory is not None else \
                        f"stopped after epoch {epoch}, no --checkpoint-dir"
                    signals.report(signals.WARNING_SIGNAL, what=f"{kept}; the job stops")
                return signals.exit_code(signals.WARNING_SIGNAL)
    if root:
        writer.close()
    if args.save_weights:
        agree(transport, lambda: _save_weights(Path(args.save_weights), trainer) if root else None)
    if root:
        if last:
            print(_summary(last, transport.size), flush=True)
        else:
            print(f"done: the checkpoint is at epoch {trainer.completed_epochs} >= --epochs {config.epochs}; "
                  "nothing left to train", flush=True)
    return 0


def _warned(transport) -> bool:
    """Whether any rank has received the scheduler's warning (one small reduction per epoch, all ranks alike)."""
    return transport.allreduce([float(signals.warning_received())], op="max")[0] > 0


def _save_weights(path: Path, trainer: Trainer) -> None:
    write_npz(path, WEIGHTS, *trainer.weights())


def _resume(trainer: Trainer, transport, directory, identity: RunIdentity) -> None:
    """Load the newest sound checkpoint on every rank (the directory must be visible to all ranks)."""
    root = transport.rank == 0

    def warn(message: str) -> None:
        if root:
            print(f"distgcn: {message}", file=sys.stderr, flush=True)

    contents = agree(transport, lambda: newest_checkpoint(directory, identity, warn))
    epoch = contents["epoch"] if contents is not None else 0
    high, negated_low = transport.allreduce([epoch, -epoch], op="max")
    if high != -negated_low:
        raise CollectiveInputError(f"ranks found different newest checkpoints (epochs {int(-negated_low)} to "
                                   f"{int(high)}): put --checkpoint-dir on a filesystem every rank sees",
                                   printed_here=root)
    if contents is not None:
        agree(transport, lambda: _load_state(trainer, contents["state"], checkpoint_path(directory, epoch)))
    if root:  # shown even with --quiet: a log must say where a resumed run started
        print(f"resuming after epoch {epoch} from {directory}" if contents is not None
              else f"no checkpoint in {directory}; starting at epoch 1", flush=True)


def _load_state(trainer: Trainer, state: dict, path: Path) -> None:
    """Restore a verified checkpoint's state; one whose contents do not fit this model is bad input, not a crash."""
    try:
        trainer.load_state_dict(state)
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise InputError(f"checkpoint state does not fit this run ({type(exc).__name__}: {exc}); "
                         "move the file away to resume from the previous one", path=path) from None


def _run_header(args: argparse.Namespace, shard, config: TrainConfig, transport, threads: int, kernel: str) -> dict:
    """What produced a metrics file, so that reports can group runs by P, partition model and graph."""
    if args.partition_dir is not None:
        meta = read_meta(Path(args.partition_dir))
        graph = {key: meta.get("graph", {}).get(key) for key in ("name", "fingerprint", "spec")}
        model = meta.get("model")
    else:
        graph, model = {"name": None, "fingerprint": None, "spec": args.graph}, args.partition
    try:
        distgcn_version = version("distgcn")
    except PackageNotFoundError:
        distgcn_version = None
    return {"ranks": transport.size, "partition_model": model, "partition_id": shard.partition_id,
            "partition_dir": args.partition_dir, "graph": graph, "layers": config.layers,
            "widths": config.widths(int(shard.features.shape[1]), shard.num_classes), "dtype": config.dtype,
            "epochs": config.epochs, "seed": config.seed, "first_layer": config.first_layer,
            "comm": config.comm, "halo_dtype": config.halo_dtype or config.dtype, "threads": threads,
            "spmm_kernel": kernel, "backend": transport.backend, "distgcn_version": distgcn_version}


def _check_memory(shard, config: TrainConfig, transport) -> None:
    """Refuse, before allocating anything, a model whose predicted peak exceeds this rank's memory."""
    widths = config.widths(int(shard.features.shape[1]), shard.num_classes)
    predicted = memory.predict(memory.sizes_of(shard), memory.ModelShape(widths, config.dtype, config.optimizer,
                                                                         config.dropout),
                               on_gpu=transport.device.type == "cuda")
    where = str(transport.device) if transport.device.type == "cuda" else "this node, shared by its ranks,"
    memory.refuse_if_too_big(predicted, memory.available_bytes(transport.device, transport.ranks_on_this_node()),
                             where)


def _make_trainer(shard, transport, config: TrainConfig, kernel: str, minibatch: MinibatchConfig | None = None,
                  progress: Progress | None = None) -> Trainer:
    try:
        if minibatch is not None and minibatch.norm_samples and progress is not None:
            with progress.phase(f"pre-sampling {minibatch.norm_samples} batches for the GraphSAINT normalization",
                                total=minibatch.norm_samples) as phase:
                return MinibatchTrainer(shard, transport, config, minibatch, kernel, on_presample=phase.advance)
        if minibatch is not None:
            return MinibatchTrainer(shard, transport, config, minibatch, kernel)
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
