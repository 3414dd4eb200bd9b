"""The Python API: load or convert a graph, partition it, read its metrics, train, predict.

The same pipeline as the command line, for scripts and notebooks
(docs/api.md). :func:`train` runs in a plain Python process as one rank, and
under ``mpiexec -n P`` when every rank calls it with the same arguments. Bad
input raises :class:`~distgcn.errors.InputError` on every rank alike.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from distgcn.config import DEFAULT_PARTITION_MODEL
from distgcn.data import load_graph
from distgcn.data.graph import Graph
from distgcn.data.interop import (
    from_networkx,
    from_pyg,
    from_scipy,
    to_networkx,
    to_scipy,
)
from distgcn.data.prepare import GraphOptions, prepare_graph, prepare_loaded_graph
from distgcn.errors import InputError
from distgcn.training.results import TrainResult, VertexRows

if TYPE_CHECKING:
    from distgcn.comm.transport import Transport
    from distgcn.config import RunConfig
    from distgcn.shard.rank_shard import Shard

__all__ = ["GraphOptions", "Partition", "TrainResult", "VertexRows", "default_transport", "from_networkx",
           "from_pyg", "from_scipy", "load_graph", "partition", "to_networkx", "to_scipy", "train"]

GraphSource = Graph | str | Path | GraphOptions
"""A Graph in memory, a PyTorch Geometric ``Data`` (read by :func:`from_pyg`), a spec as
``distgcn train --graph`` takes it, or a spec with its loading options."""
_TRANSPORTS: dict[str, Transport] = {}
"""The transports :func:`default_transport` has started in this process, by backend."""


@dataclass
class Partition:
    """A graph split into parts, held in memory: the part vector and its exact communication metrics."""

    graph: Graph
    """The graph as prepared for training (features normalized as asked)."""
    a_hat: sp.csr_matrix
    """Â = D^-1/2 (A + I) D^-1/2, the matrix whose rows are distributed."""
    parts: np.ndarray
    """int64 [n]: the rank that owns each vertex."""
    info: dict
    """How the parts were computed: model, partitioner, preset, epsilon, seed, partition_s, versions."""
    metrics: dict
    """Volume, messages, imbalance, connectivity-1, edge cut, ... (:func:`distgcn.partitioning.metrics.partition_metrics`)."""
    source: dict = field(repr=False)
    """How the graph was read, as meta.json records it: spec, symmetrize, feature_norm, random_features_seed."""

    @property
    def nparts(self) -> int:
        return int(self.metrics["parts"])

    @property
    def partition_id(self) -> str:
        """The id that ties shards and checkpoints to this graph and part vector."""
        from distgcn.shard.directory import partition_id

        return partition_id(self.graph.fingerprint(), self.parts, self.nparts)

    def write(self, out: str | Path, *, force: bool = False, quiet: bool = True) -> dict:
        """Write the directory that ``distgcn partition --out`` writes; return its meta.json contents.

        ``distgcn stats``, ``distgcn train DIR`` and :func:`train` read it like any other.
        """
        from distgcn.runtime.progress import NORMAL, QUIET, Progress
        from distgcn.shard.cut import GraphData
        from distgcn.shard.directory import check_output, input_paths
        from distgcn.shard.write import save_partition

        inputs = input_paths(self.source.get("spec"))
        directory = check_output(out, force, inputs)
        return save_partition(directory, GraphData.of(self.graph, self.a_hat), self.a_hat, self.parts, self.info,
                              self.metrics, self.source, Progress(QUIET if quiet else NORMAL), force=force,
                              inputs=inputs)


def partition(graph: GraphSource, parts: int, model: str = DEFAULT_PARTITION_MODEL, *, epsilon: float = 0.03,
              seed: int = 0, partitioner: str | None = None, preset: str | None = None,
              parts_file: str | Path | None = None, feature_norm: str = "row",
              threads: int | None = None) -> Partition:
    """Prepare ``graph`` as ``distgcn partition`` does and split it into ``parts`` parts with ``model``.

    Models, partitioners, presets and threads are those of the command line
    (docs/partitioning.md). ``seed`` seeds the partitioner and, for a spec
    string, random features. A Graph passed in is not modified.
    """
    from distgcn.config import check_seed
    from distgcn.partitioning.metrics import partition_metrics
    from distgcn.partitioning.models import compute_parts

    check_seed("partition", seed)  # before the load, and before a partitioner's C int could overflow
    prepared, a_hat, source = _prepare(graph, feature_norm, seed)
    vector, info = compute_parts(model, a_hat, parts, epsilon=epsilon, seed=seed, partitioner=partitioner,
                                 preset=preset, parts_file=parts_file, threads=threads)
    return Partition(prepared, a_hat, vector, info, partition_metrics(a_hat, vector, parts), source)


def train(source: GraphSource | Partition | None, *, partition_model: str = DEFAULT_PARTITION_MODEL,
          epochs: int = 200, layers: int = 2, hidden: int | tuple[int, ...] = 16, lr: float = 0.01,
          dropout: float = 0.5,
          weight_decay: float = 5e-4, optimizer: str = "adam", seed: int = 0, dtype: str = "float32",
          feature_norm: str = "row", vertex_order: str | None = None, first_layer: str = "exact",
          comm: str = "halo", halo_dtype: str | None = None, conv: str = "gcn", heads: int = 8,
          output_heads: int = 1, attention_dropout: float | None = None, root_weight: bool = True,
          sampler: str | None = None,
          batch_size: int | None = None, batches_per_epoch: int | None = None, norm_samples: int = 50,
          walk_length: int | None = None, frontier_size: int | None = None, threads: int | None = None,
          spmm_kernel: str = "auto", backend: str | None = None, metrics: str | Path | None = None,
          save_weights: str | Path | None = None, checkpoint_dir: str | Path | None = None,
          checkpoint_every: int | None = None, checkpoint_keep: int = 3, resume: bool = False,
          restart_metrics: bool = False, quiet: bool = True, verbose: bool = False,
          transport: Transport | None = None) -> TrainResult:
    """Train a GCN (``conv`` "sage", "gat": GraphSAGE, GAT) as ``distgcn train`` does, on this process's rank;
    collective under mpiexec.

    ``source``: a partition directory (each rank reads its own shard), a
    :class:`Partition` with as many parts as ranks, or a graph, which rank 0
    partitions with ``partition_model`` (as ``train --graph --partition``).
    Graphs and Partitions are read on rank 0 only; other ranks may pass None.
    ``feature_norm`` applies to a graph partitioned here (a directory's shards hold prepared features).
    The other keywords are the command line's options of the same names (docs/api.md); ``sampler``
    and ``batch_size`` train on minibatches. ``threads`` sets torch's threads for this call only
    (default: as they are). The transport is :func:`default_transport` unless one is given.
    """
    import torch

    from distgcn.comm.collective import CollectiveInputError
    from distgcn.training import pipeline

    config = _config(source, dict(locals()))
    transport = transport if transport is not None else default_transport(config.compute.backend)
    previous_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)

        def own_shard(transport: Transport, _progress: object) -> Shard:
            return _own_shard(source, transport, partition_model, seed, feature_norm, vertex_order or "rcm")

        outcome = pipeline.run(config, transport, torch.get_num_threads(), own_shard)
        outputs = [t.cpu().numpy() for t in outcome.trainer.layer_outputs()]
    except CollectiveInputError as exc:
        raise InputError(str(exc)) from None
    finally:
        torch.set_num_threads(previous_threads)
    shard = outcome.shard
    by_id = np.argsort(shard.global_ids, kind="stable")  # a shard's rows are in its local (e.g. RCM) order
    return TrainResult(history=outcome.history, weights=outcome.trainer.weights(), ids=shard.global_ids[by_id],
                       layer_outputs=[o[by_id] for o in outputs], rank=transport.rank, size=transport.size,
                       transport=transport)


def default_transport(backend: str | None = None) -> Transport:
    """This process's transport for ``backend`` (None: the command line's default), started on first use.

    Started once per backend because a torch.distributed process group can be
    started only once per process. The launcher (mpiexec, torchrun, srun) is
    found as the command line finds it; without one, the job is one rank
    (MPI as a singleton, or a one-rank gloo/nccl group).
    """
    import torch

    from distgcn.comm.transport.setup import default_backend, detect, make_transport

    if backend is None:
        backend = default_backend(detect(os.environ), torch.cuda.is_available())
    if backend not in _TRANSPORTS:
        _TRANSPORTS[backend] = make_transport(backend)
    return _TRANSPORTS[backend]


def _prepare(source: GraphSource, feature_norm: str, seed: int) -> tuple[Graph, sp.csr_matrix, dict]:
    """The prepared graph, Â, and the description of its source that meta.json keeps."""
    from distgcn.data.interop import from_pyg, is_pyg_data

    if is_pyg_data(source):
        source = from_pyg(source)
    if isinstance(source, Graph):
        graph, a_hat = prepare_loaded_graph(dataclasses.replace(source), source.name, feature_norm)
        return graph, a_hat, {"spec": None, "symmetrize": False, "feature_norm": feature_norm,
                              "random_features_seed": None}
    if isinstance(source, (str, Path)):
        options = GraphOptions(spec=str(source), seed=seed, feature_norm=feature_norm)
    elif isinstance(source, GraphOptions):
        options = source
    else:
        raise InputError(f"expected a Graph, a torch_geometric Data, a graph spec or GraphOptions, "
                         f"got {type(source).__name__}")
    from distgcn.shard.directory import graph_source

    graph, a_hat = prepare_graph(options)
    return graph, a_hat, graph_source(options)


def _own_shard(source: GraphSource | Partition | None, transport: Transport, model: str, seed: int,
               feature_norm: str, vertex_order: str) -> Shard:
    """This rank's shard: read from a partition directory, or cut on rank 0 and sent (rank 0 decides which)."""
    from distgcn.comm.collective import agree
    from distgcn.shard.directory import META_FILE
    from distgcn.shard.distribute import load_own_shard
    from distgcn.shard.scatter import cut_and_scatter, startup_options

    is_directory = isinstance(source, (str, Path)) and (Path(source) / META_FILE).is_file()
    if transport.allgather_object(is_directory)[0]:

        def own_directory() -> str | Path:
            if not isinstance(source, (str, Path)):
                raise InputError("rank 0 trains from a partition directory: every rank must name it")
            return source

        return load_own_shard(transport, agree(transport, own_directory))

    def on_root() -> tuple[Graph, sp.csr_matrix, np.ndarray] | None:
        if transport.rank != 0:
            return None
        if source is None:
            raise InputError("rank 0 needs a graph, a Partition or a partition directory (got None)")
        if isinstance(source, Partition):
            if source.nparts != transport.size:
                raise InputError(f"the Partition has {source.nparts} parts but the job has {transport.size} ranks")
            return source.graph, source.a_hat, source.parts
        split = partition(source, transport.size, model, seed=seed, feature_norm=feature_norm,
                          **startup_options(model))
        return split.graph, split.a_hat, split.parts

    return cut_and_scatter(transport, agree(transport, on_root), vertex_order)


def _config(source: GraphSource | Partition | None, keywords: dict) -> RunConfig:
    """The run's configuration from train's keywords, checked before any rank communicates."""
    from distgcn.config import (
        ComputeConfig,
        ConfigError,
        OutputConfig,
        ProgressConfig,
        RunConfig,
        SourceConfig,
        TrainConfig,
    )
    from distgcn.shard.directory import META_FILE
    from distgcn.training.pipeline import minibatch_config

    k = keywords
    directory = isinstance(source, (str, Path)) and (Path(source) / META_FILE).is_file()
    spec = source.spec if isinstance(source, GraphOptions) else str(source) if isinstance(source, (str, Path)) \
        else None
    minibatch = None
    if k["sampler"] is None and k["batch_size"] is not None:
        raise ConfigError("minibatch.batch_size", "{minibatch.batch_size} needs {minibatch.sampler}")
    if k["sampler"] is not None:
        given = {name: k[name] for name in ("walk_length", "frontier_size") if k[name] is not None}
        minibatch = minibatch_config(k["sampler"], k["batch_size"], given, k["batches_per_epoch"], k["norm_samples"])
    paths = {name: None if k[name] is None else str(k[name]) for name in ("metrics", "save_weights", "checkpoint_dir")}
    return RunConfig(
        source=SourceConfig(partition_dir=str(source) if directory else None, graph=None if directory else spec,
                            partition=k["partition_model"], vertex_order=k["vertex_order"],
                            feature_norm=k["feature_norm"]),
        train=TrainConfig(layers=k["layers"], hidden=k["hidden"], epochs=k["epochs"], lr=k["lr"],
                          dropout=k["dropout"], weight_decay=k["weight_decay"], optimizer=k["optimizer"],
                          seed=k["seed"], dtype=k["dtype"], first_layer=k["first_layer"], comm=k["comm"],
                          halo_dtype=k["halo_dtype"], conv=k["conv"], heads=k["heads"],
                          output_heads=k["output_heads"], attention_dropout=k["attention_dropout"],
                          root_weight=k["root_weight"]),
        minibatch=minibatch,
        compute=ComputeConfig(threads=k["threads"], spmm_kernel=k["spmm_kernel"], backend=k["backend"]),
        outputs=OutputConfig(**paths, checkpoint_every=k["checkpoint_every"], checkpoint_keep=k["checkpoint_keep"],
                             resume=k["resume"], restart_metrics=k["restart_metrics"]),
        progress=ProgressConfig(quiet=k["quiet"], verbose=k["verbose"]))
