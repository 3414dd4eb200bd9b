"""The training pipeline: shard → memory check → trainer → checkpoints and resume → metrics → weights.

One function, :func:`run`, for ``distgcn train`` and :func:`distgcn.api.train`:
both build a checked :class:`~distgcn.config.RunConfig`, start a transport
and set the threads, then call it on every rank. A setting refused on any
rank is a :class:`~distgcn.comm.collective.CollectiveInputError` on all of them,
worded by the caller's ``name_field`` (the command line's flags).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from distgcn.comm.agreement import agree_on_config
from distgcn.comm.collective import CollectiveInputError, agree
from distgcn.comm.transport import Transport
from distgcn.config import (
    SCHEDULE_OPTIONS,
    ConfigError,
    MinibatchConfig,
    RunConfig,
    SourceConfig,
    TrainConfig,
)
from distgcn.data.prepare import GraphOptions
from distgcn.errors import InputError
from distgcn.io import limits
from distgcn.io.checkpoint import (
    RunIdentity,
    checkpoint_dir,
    checkpoint_path,
    newest_checkpoint,
    save_checkpoint,
)
from distgcn.io.metrics_log import MetricsWriter, format_epoch, format_epoch_detail
from distgcn.io.safe_io import METRICS, WEIGHTS, check_target, claimed
from distgcn.io.weights import model_record, write_weights
from distgcn.kernels import Kernels, kernels_for
from distgcn.memory import prediction as memory
from distgcn.partitioning.models import GIL_HOLDING_MODELS
from distgcn.runtime import signals
from distgcn.runtime.progress import Progress
from distgcn.runtime.threads import (
    available_cores,
    cpu_set,
    load_average,
    node_cpus,
    process_age_s,
)
from distgcn.shard.directory import graph_source, read_meta
from distgcn.shard.distribute import load_own_shard
from distgcn.shard.rank_shard import Shard
from distgcn.shard.scatter import build_and_scatter, startup_partitioning
from distgcn.training import soundness
from distgcn.training.sampler_choice import sampler_options, samples_on_device
from distgcn.training.trainer import Trainer

T = TypeVar("T")
ShardSource = Callable[[Transport, Progress], Shard]
"""Gets this rank's shard (collective)."""
NameField = Callable[[str], str]
"""Words a configuration field for the user (the command line: its flag)."""


@dataclass
class Outcome:
    """What a run left on this rank."""

    trainer: Trainer
    shard: Shard
    history: list[dict]
    """One metrics record per epoch trained by this run (identical on every rank)."""
    stopped_after: int | None
    """The epoch after which the scheduler's warning stopped training; None when it ran to the end."""
    best_epoch: int | None = None
    """With ``keep_best``: the epoch whose weights the trainer holds now and ``save_weights`` wrote."""


def minibatch_config(sampler: str, batch_size: int, given: dict[str, Any], batches_per_epoch: int | None,
                     norm_samples: int, sample_on: str = "auto") -> MinibatchConfig:
    """The minibatch settings with the sampler's options resolved and checked (before any rank communicates)."""
    counts = MinibatchConfig(sampler, batch_size, batches_per_epoch, norm_samples,
                             sample_on=sample_on)  # checked before the options
    return dataclasses.replace(counts, options=sampler_options(sampler, batch_size, given))


def shards_from(source: SourceConfig, seed: int) -> ShardSource:
    """The shard of a partition directory, or of the graph that rank 0 partitions and sends."""
    def load(transport: Transport, progress: Progress) -> Shard:
        if source.partition_dir is not None:
            with progress.phase("loading shards"):
                return load_own_shard(transport, source.partition_dir)
        options = GraphOptions(spec=source.graph, symmetrize=source.symmetrize, features=source.features,
                               classes=source.classes, seed=seed, feature_norm=source.feature_norm)
        with progress.phase(f"partitioning on rank 0 ({source.partition}) and sending shards") as phase:
            with phase.outside_the_gil() if source.partition in GIL_HOLDING_MODELS else nullcontext():
                return build_and_scatter(transport, options, startup_partitioning(source.partition, seed),
                                         vertex_order=source.vertex_order)
    return load


def run(config: RunConfig, transport: Transport, threads: int, shard_source: ShardSource,
        name_field: NameField = str) -> Outcome:
    """Train on this rank as ``config`` says, with ``threads`` compute threads already set (collective).

    First the ranks agree on the settings (a rank given others would enter other collectives), then rank 0
    claims the outputs it will write and the checkpoint directory, so that a second run wanting any of them
    is refused before it loads anything.
    """
    agree_on_config(transport, config)
    outputs, root = config.outputs, transport.rank == 0
    files = [(Path(path), kind) for path, kind in ((outputs.metrics, METRICS), (outputs.save_weights, WEIGHTS))
             if path]

    def claim(held: ExitStack) -> None:
        for path, kind in files:
            check_target(path, kind)  # a path that cannot be written is refused as such, before it is claimed
        held.enter_context(claimed((path, kind.name) for path, kind in files))

    with ExitStack() as held:
        agree(transport, lambda: claim(held) if root else None)
        directory = agree(transport, lambda: worded(lambda: checkpoint_dir(
            outputs.checkpoint_dir, resume=outputs.resume, owner=root), name_field)) if outputs.checkpoint_dir else None
        return _run(config, transport, threads, shard_source, name_field, directory)


def _run(config: RunConfig, transport: Transport, threads: int, shard_source: ShardSource, name_field: NameField,
         directory: Path | None) -> Outcome:
    def agreed(step: Callable[[], T]) -> T:
        return agree(transport, lambda: worded(step, name_field))

    outputs, train = config.outputs, config.train
    started = (load_average(), process_age_s())  # before loading, while this job has added least to the load
    kernels = agreed(lambda: kernels_for(transport.device, config.compute.spmm_kernel))
    root = transport.rank == 0
    progress = Progress.for_rank(transport.rank, quiet=config.progress.quiet, verbose=config.progress.verbose)
    agreed(lambda: _warm_up(kernels, train, transport.size > 1))
    shard = shard_source(transport, progress)
    if outputs.save_weights:  # a bad path must fail now, not after the training it would have saved
        agreed(lambda: check_target(Path(outputs.save_weights), WEIGHTS) if root else None)
    header = _run_header(config, shard, transport, threads, kernels.name) if root else None
    if header is not None and config.minibatch is not None:
        header["minibatch"] = {**vars(config.minibatch),
                               "sampled_on": "device" if samples_on_device(config.minibatch.sample_on,
                                                                           transport.device) else "host"}
    if header is not None and progress.verbose:
        for line in settings_lines(header):
            progress.detail(line)
    ranks_on_node = transport.ranks_on_this_node()  # collective: every rank asks
    nodes = transport.allgather_object(soundness.NodeUse(socket.gethostname(), tuple(sorted(cpu_set())), node_cpus(),
                                                         threads, *started))  # collective
    if header is not None:
        # rank 0's node, and whether any node's threads wait for a core: a report marks such runs
        header["node"] = {"ranks": ranks_on_node, "cores": available_cores(), "device": transport.device.type,
                          **soundness.node_record(nodes, transport.device.type)}
        for warning in _unsound(config, header, nodes, transport.device.type, shard.num_classes):
            progress.warn(warning)
    agreed(lambda: _check_memory(shard, train, transport, kernels))
    trainer = agreed(lambda: _make_trainer(shard, transport, config, kernels, progress))
    identity = RunIdentity(shard.graph_fingerprint, shard.partition_id, trainer.model_config())
    if outputs.resume:
        _resume(trainer, transport, directory, identity, name_field)
    resume_after = trainer.completed_epochs if outputs.resume else None
    writer = agreed(lambda: MetricsWriter(outputs.metrics if root else None, header, resume_after,
                                          restart=outputs.restart_metrics))
    history: list[dict] = []
    saved_epoch = None

    def checkpoint(epoch: int) -> None:
        agreed(lambda: save_checkpoint(directory, epoch, trainer.state_dict(), identity, outputs.checkpoint_keep)
               if root else None)

    with progress.phase("training", total=train.epochs - trainer.completed_epochs) as phase:
        for record in trainer.epochs():
            history.append(record)
            phase.advance()
            unwritten: InputError | None = None
            if root:
                try:
                    writer.write(record)
                except InputError as exc:  # a full disk: every rank stops at this epoch, not only the writer
                    unwritten = exc
                else:
                    if not config.progress.quiet:
                        progress.echo(format_epoch(record))
                    if progress.verbose:
                        progress.echo(format_epoch_detail(record))
            warned, failed = _epoch_flags(transport, unwritten is not None)
            if failed:
                where = "rank 0: " if transport.size > 1 else ""
                raise CollectiveInputError(f"{where}{unwritten}" if root else "rank 0 could not write the metrics file",
                                           printed_here=root)
            epoch = record["epoch"]
            if directory is not None and outputs.checkpoint_every and (
                    epoch % outputs.checkpoint_every == 0 or epoch == train.epochs):
                checkpoint(epoch)
                saved_epoch = epoch
            if epoch < train.epochs and warned:  # every rank stops after this same epoch
                if directory is not None and saved_epoch != epoch:
                    checkpoint(epoch)
                phase.finish(f"stopped after epoch {epoch} of {train.epochs} at the scheduler's warning")
                if root:
                    writer.close()
                    kept = f"checkpoint of epoch {epoch} in {directory}" if directory is not None else \
                        f"stopped after epoch {epoch}, no {name_field('outputs.checkpoint_dir')}"
                    signals.report(signals.WARNING_SIGNAL, what=f"{kept}; the job stops")
                return Outcome(trainer, shard, history, stopped_after=epoch)
    if trainer.stopped_early:
        epoch = trainer.completed_epochs
        if directory is not None and outputs.checkpoint_every and saved_epoch != epoch:
            checkpoint(epoch)  # a resumed run then finds nothing left to train
        if history:
            phase_note = (f"stopped early after epoch {epoch}: no better {trainer.selection.metric} for "
                          f"{train.patience} epochs (best: epoch {trainer.selection.best_epoch})")
            progress.info(phase_note)
    if root:
        writer.close()
    best_epoch = trainer.use_best_weights()
    if outputs.save_weights:
        record = model_record(train, trainer.model.widths, best_epoch or trainer.completed_epochs,
                              f"best {train.keep_best}" if best_epoch is not None else "last",
                              _graph_read(config, shard))
        agreed(lambda: write_weights(Path(outputs.save_weights), trainer.weights(), record) if root else None)
    return Outcome(trainer, shard, history, stopped_after=None, best_epoch=best_epoch)


def _graph_read(config: RunConfig, shard: Shard) -> dict:
    """How the trained graph was read (meta.json's ``graph`` object, with its fingerprint), for a weights file."""
    source = config.source
    if source.partition_dir is not None:
        graph = dict(read_meta(Path(source.partition_dir)).get("graph", {}))
    elif source.graph is not None:
        graph = graph_source(GraphOptions(spec=source.graph, symmetrize=source.symmetrize, features=source.features,
                                          classes=source.classes, seed=config.train.seed,
                                          feature_norm=source.feature_norm))
    else:
        graph = {"spec": None}
    return {**graph, "fingerprint": shard.graph_fingerprint}


def worded(step: Callable[[], T], name_field: NameField) -> T:
    """Run ``step``; a refused setting is worded for the user, and a ValueError (a setting the code
    refuses) becomes an InputError."""
    try:
        return step()
    except ConfigError as exc:
        raise InputError(exc.render(name_field)) from None
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _epoch_flags(transport: Transport, write_failed: bool) -> tuple[bool, bool]:
    """Whether any rank has received the scheduler's warning, and whether the metrics writer (rank 0) failed to
    write this epoch's record: one small reduction per epoch, all ranks alike, so that all stop together."""
    warned, failed = transport.allreduce([float(signals.warning_received()), float(write_failed)], op="max")
    return warned > 0, failed > 0


def _resume(trainer: Trainer, transport: Transport, directory: Path, identity: RunIdentity,
            name_field: NameField) -> None:
    """Load the newest sound checkpoint on every rank (the directory must be visible to all ranks)."""
    root = transport.rank == 0

    def warn(message: str) -> None:
        if root:
            print(f"distgcn: {message}", file=sys.stderr, flush=True)

    contents = agree(transport, lambda: newest_checkpoint(directory, identity, warn))
    epoch = contents["epoch"] if contents is not None else 0
    high, negated_low = transport.allreduce([epoch, -epoch], op="max")
    if high != -negated_low:
        where = name_field("outputs.checkpoint_dir")
        raise CollectiveInputError(f"ranks found different newest checkpoints (epochs {int(-negated_low)} to "
                                   f"{int(high)}): put {where} on a filesystem every rank sees", printed_here=root)
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


def _run_header(config: RunConfig, shard: Shard, transport: Transport, threads: int, kernel: str) -> dict:
    """What produced a metrics file, so that reports can group runs by P, partition model and graph."""
    source, train = config.source, config.train
    if source.partition_dir is not None:
        meta = read_meta(Path(source.partition_dir))
        graph = {key: meta.get("graph", {}).get(key) for key in ("name", "fingerprint", "spec")}
        model = meta.get("model")
    else:
        graph, model = {"name": None, "fingerprint": None, "spec": source.graph}, source.partition
    try:
        distgcn_version = version("distgcn")
    except PackageNotFoundError:
        distgcn_version = None
    return {"ranks": transport.size, "partition_model": model, "partition_id": shard.partition_id,
            "partition_dir": source.partition_dir, "graph": graph, "layers": train.layers,
            "widths": train.widths(int(shard.features.shape[1]), shard.num_classes), "dtype": train.dtype,
            "epochs": train.epochs, "seed": train.seed, "conv": train.conv, "first_layer": train.first_layer,
            "comm": train.comm, "halo_dtype": train.halo_dtype or train.dtype,
            "halo_window": train.halo_window, "threads": threads,
            **({"selection": {"keep_best": train.keep_best, "watched": train.watched, "patience": train.patience}}
               if train.watched is not None else {}),
            **({"lr_schedule": {"name": train.lr_schedule, "lr": train.lr,
                                **{name: getattr(train, name) for name, readers in SCHEDULE_OPTIONS.items()
                                   if train.lr_schedule in readers}}}
               if train.lr_schedule != "constant" else {}),
            "spmm_kernel": kernel, "backend": transport.backend, "distgcn_version": distgcn_version}


def settings_lines(header: dict) -> list[str]:
    """The run's settings for --verbose, one per line (``graph.name: cora``), nested objects flattened."""
    def flat(prefix: str, value: Any) -> list[str]:
        if isinstance(value, dict) and value:
            return [line for key, item in value.items() for line in flat(f"{prefix}.{key}" if prefix else key, item)]
        return [f"  {prefix}: {json.dumps(value) if isinstance(value, (list, dict)) or value is None else value}"]
    return ["run configuration:", *flat("", header)]


def _unsound(config: RunConfig, header: dict, nodes: list[soundness.NodeUse], device: str,
             classes: int) -> list[str]:
    """The warnings of :mod:`distgcn.training.soundness` that apply to this run (rank 0, about every rank's node);
    whether its labels are random is recorded in the header's ``graph`` for reports."""
    if config.source.partition_dir is not None:
        drawn = read_meta(Path(config.source.partition_dir))["graph"].get("random_features_seed") is not None
    else:
        drawn = config.source.features is not None
    found = [soundness.random_labels(header["graph"]["spec"], drawn, classes)]
    header["graph"]["random_labels"] = found[0] is not None
    if device == "cpu":  # a GPU rank computes on its GPU, not on the node's cores
        found.append(soundness.contention(nodes))
        found.append(soundness.one_thread_kernel(header["spmm_kernel"], header["threads"]))
    return [line for line in found if line is not None]


def _warm_up(kernels: Kernels, train: TrainConfig, halo: bool) -> None:
    """The kernels this run is likely to call, compiled before its shard is loaded, so that the memory model's
    prediction holds from the first run on; ``halo``: there are other ranks, so the halo blocks' transpose products
    too."""
    kernels.warm_up(np.dtype(train.dtype), train.hidden, dropout=train.dropout > 0, transposes=halo)


def _check_memory(shard: Shard, train: TrainConfig, transport: Transport, kernels: Kernels) -> None:
    """Refuse, before allocating anything, a model whose predicted peak exceeds this rank's memory."""
    predicted = memory.predict(memory.sizes_of(shard), train, transport.device.type == "cuda", kernels.name)
    where = str(transport.device) if transport.device.type == "cuda" else "this node, shared by its ranks,"
    memory.refuse_if_too_big(predicted, limits.available_bytes(transport.device, transport.ranks_on_this_node()),
                             where)


def _make_trainer(shard: Shard, transport: Transport, config: RunConfig, kernels: Kernels,
                  progress: Progress) -> Trainer:
    minibatch = config.minibatch
    if minibatch is None or not minibatch.norm_samples:
        with progress.phase("setting up the model"):  # distgcn's optimizers skip torch.optim's seconds of torch._dynamo
            return Trainer(shard, transport, config.train, kernels, minibatch)
    with progress.phase(f"pre-sampling {minibatch.norm_samples} batches for the GraphSAINT normalization",
                        total=minibatch.norm_samples) as phase:
        return Trainer(shard, transport, config.train, kernels, minibatch, on_presample=phase.advance)
