"""The Python API: load or convert a graph, partition it, read its metrics, train, predict.

The same pipeline as the command line, for scripts and notebooks
(docs/api.md). :func:`train` runs in a plain Python process as one rank, and
under ``mpiexec -n P`` when every rank calls it with the same arguments. Bad
input raises :class:`~distgcn.errors.InputError` on every rank alike.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from distgcn.config import (
    VERTEX_ORDER,
    ComputeConfig,
    PartitionConfig,
    PredictConfig,
    RunConfig,
    SourceConfig,
    default_of,
    leaf_fields,
)
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
from distgcn.io.weights import SavedWeights, read_weights
from distgcn.training.results import RankOutputs, TrainResult, VertexRows
from distgcn.training.settings import SAMPLER_OPTION_NAMES

if TYPE_CHECKING:
    from distgcn.comm.transport import Transport
    from distgcn.shard.rank_shard import Shard

__all__ = ["GraphOptions", "Partition", "RankOutputs", "SavedWeights", "TrainResult", "VertexRows",
           "default_transport", "from_networkx", "from_pyg", "from_scipy", "load_graph", "load_weights", "partition",
           "predict", "to_networkx", "to_scipy", "train"]

GraphSource = Graph | str | Path | GraphOptions
"""A Graph in memory, a PyTorch Geometric ``Data`` (read by :func:`from_pyg`), a spec as
``distgcn train --graph`` takes it, or a spec with its loading options."""
_TRANSPORTS: dict[str, Transport] = {}
"""The transports :func:`default_transport` has started in this process, by backend."""

_EXPANDED = {"minibatch.options": [f"minibatch.options.{name}" for name in SAMPLER_OPTION_NAMES],
             "partitioning.sampler": ["partitioning.sampler.name", "partitioning.sampler.batch_size",
                                      *[f"partitioning.sampler.options.{name}" for name in SAMPLER_OPTION_NAMES]]}
"""Fields that hold several settings (the sampler options; a SamplerSpec), and the paths of those settings."""
_RENAMED = {"source.partition": "partition_model", "minibatch.options.pop": "frontier_pop",
            "partitioning.sampler.name": "sampler", "partitioning.sampler.options.pop": "frontier_pop"}
"""Keywords that are not their field's name: as the command line's flags (``--frontier-pop``), or where the
field's name is taken (``partition_model``, as ``source`` is train's graph)."""
API_DEFAULTS = {"progress.quiet": True, "quiet": True}
"""The API's own defaults (train's ``progress.quiet``; PartitionConfig's ``quiet``, Partition.write's): a library
prints nothing unless asked."""
TRAIN_FROM_SOURCE = ("source.partition_dir", "source.graph", "source.symmetrize", "source.features",
                     "source.classes")
"""RunConfig fields that :func:`train`'s ``source`` carries (a directory, a spec, or GraphOptions for the rest)."""
PARTITION_ELSEWHERE = {"parts": "partition(parts)", "partitioning.model": "partition(model)",
                       "graph": "partition(graph)", "symmetrize": "GraphOptions.symmetrize",
                       "features": "GraphOptions.features", "classes": "GraphOptions.classes",
                       "out": "Partition.write(out)", "force": "Partition.write(force)",
                       "vertex_order": "Partition.write(vertex_order)", "quiet": "Partition.write(quiet)",
                       "verbose": "Partition.write(verbose)",
                       "central": "command line --central"}
"""PartitionConfig fields that :func:`partition` takes other than as keywords: where each is given (``central``
only means something under mpiexec: the API partitions in one process)."""


@dataclass(frozen=True)
class Keyword:
    """One keyword of :func:`train` or :func:`partition`: the configuration field it sets, and its default."""

    path: str
    """The field's dotted path (``train.epochs``; ``minibatch.options.walk_length`` for a sampler option)."""
    default: Any
    annotation: Any


def keywords(config: type, elsewhere: tuple[str, ...] | dict[str, str]) -> dict[str, Keyword]:
    """The keywords that reach every field of ``config`` except those given ``elsewhere``: one per field (the
    field's name, or :data:`_RENAMED`), with the field's default (or :data:`API_DEFAULTS`). Generated from the
    configuration, so that a field added there is a keyword here."""
    found: dict[str, Keyword] = {}
    for path, (_owner, declared) in leaf_fields(config).items():
        if path in elsewhere:
            continue
        if path in _EXPANDED:
            for part in _EXPANDED[path]:
                found[_RENAMED.get(part, part.rsplit(".", 1)[-1])] = Keyword(part, None, "Any")
            continue
        if path in API_DEFAULTS:
            default = API_DEFAULTS[path]
        elif declared.default_factory is not dataclasses.MISSING:
            default = declared.default_factory()
        else:
            default = None if declared.default is dataclasses.MISSING else declared.default
        optional = declared.default is dataclasses.MISSING and declared.default_factory is dataclasses.MISSING
        found[_RENAMED.get(path, declared.name)] = Keyword(path, default,
                                                           f"{declared.type} | None" if optional else declared.type)
    return found


TRAIN_KEYWORDS = keywords(RunConfig, TRAIN_FROM_SOURCE)
"""train's keywords: every RunConfig field that its source does not carry."""
PARTITION_KEYWORDS = keywords(PartitionConfig, PARTITION_ELSEWHERE)
"""partition's keywords: the PartitionConfig fields that are not its arguments or Partition.write's."""


def _signature(function: Any, table: dict[str, Keyword]) -> None:
    """Show ``function``'s ``**settings`` as the keywords of ``table`` (help(), inspect.signature)."""
    signature = inspect.signature(function)
    before = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    generated = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=keyword.default,
                                   annotation=keyword.annotation) for name, keyword in table.items()]
    function.__signature__ = signature.replace(parameters=before + generated)


def _settings(function: str, table: dict[str, Keyword], given: dict[str, Any]) -> dict[str, Any]:
    """The keywords given, by field name (the last part of the path), over the defaults of ``table``."""
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    values = {name: keyword.default for name, keyword in table.items()} | given
    return {_setting_name(table[name].path): str(value) if isinstance(value, Path) else value
            for name, value in values.items()}


def _setting_name(path: str) -> str:
    """The name a setting goes by in the builders' settings (distgcn.training.settings): its field's."""
    return "sampler" if path == "partitioning.sampler.name" else path.rsplit(".", 1)[-1]


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

    def write(self, out: str | Path, *, force: bool = default_of(PartitionConfig, "force"),
              quiet: bool = API_DEFAULTS["quiet"], verbose: bool = default_of(PartitionConfig, "verbose"),
              vertex_order: str = default_of(PartitionConfig, "vertex_order")) -> dict:
        """Write the directory that ``distgcn partition --out`` writes; return its meta.json contents.

        ``force``, ``quiet``, ``verbose`` and ``vertex_order`` are the command line's flags of those names.
        ``distgcn stats``, ``distgcn train DIR`` and :func:`train` read it like any other.
        """
        from distgcn.runtime.progress import NORMAL, QUIET, VERBOSE, Progress
        from distgcn.shard.cut import GraphData
        from distgcn.shard.directory import check_output, input_paths
        from distgcn.shard.write import save_partition

        inputs = input_paths(self.source.get("spec"))
        directory = check_output(out, force, inputs)
        progress = Progress(QUIET if quiet else VERBOSE if verbose else NORMAL)
        return save_partition(directory, GraphData.of(self.graph, self.a_hat), self.a_hat, self.parts, self.info,
                              self.metrics, self.source, progress, vertex_order, force=force, inputs=inputs)


def partition(graph: GraphSource | None, parts: int | None = None, model: str | None = None, *,
              config: PartitionConfig | None = None, **settings: Any) -> Partition:
    """Prepare ``graph`` as ``distgcn partition`` does and split it into ``parts`` parts with ``model``.

    The keywords are the command line's options of the same names (:data:`PARTITION_KEYWORDS`; models,
    partitioners, presets, threads: docs/partitioning.md; the stochastic model's ``sampler``, ``batch_size`` and
    sampler options, ``shp_*``), or ``config`` gives them all as a :class:`~distgcn.config.PartitionConfig`
    (``graph`` None: the graph its ``graph`` field names; its ``out``, if set, is written as
    :meth:`Partition.write` writes). ``seed`` seeds the partitioner and, for a spec string, random features.
    A Graph passed in is not modified.
    """
    from distgcn.partitioning.metrics import partition_metrics
    from distgcn.partitioning.models import run_model

    if config is None:
        if parts is None:
            raise TypeError("partition() missing required argument: 'parts' (or config=)")
        config = _partition_config(parts, model, _settings("partition", PARTITION_KEYWORDS, settings))
    elif parts is not None or model is not None or settings:
        raise TypeError("partition() takes config= or parts, model and keywords, not both")
    if graph is None and config.graph is not None:
        graph = GraphOptions(spec=config.graph, symmetrize=config.symmetrize, features=config.features,
                             classes=config.classes, seed=config.partitioning.seed, feature_norm=config.feature_norm)
    elif config.graph is not None:
        raise InputError("partition: give the graph once, as the graph argument or as config.graph")
    prepared, a_hat, source = _prepare(graph, config.feature_norm, config.partitioning.seed)
    vector, info = run_model(config.partitioning, a_hat, config.parts)
    split = Partition(prepared, a_hat, vector, info, partition_metrics(a_hat, vector, config.parts), source)
    if config.out is not None:
        split.write(config.out, force=config.force, quiet=config.quiet, verbose=config.verbose,
                    vertex_order=config.vertex_order)
    return split


def _partition_config(parts: int, model: str | None, settings: dict[str, Any]) -> PartitionConfig:
    """partition's configuration (checked, its seed before a partitioner's C int could overflow) from its
    arguments and its keywords by field name."""
    from distgcn.config import PartitionerConfig
    from distgcn.training.settings import sampler_of

    given = settings | {"parts": parts, "quiet": API_DEFAULTS["quiet"]} | ({"model": model} if model else {})
    return PartitionConfig.from_settings(given, sampler_of(PartitionerConfig.SECTION, settings))


def train(source: GraphSource | Partition | None = None, *, config: RunConfig | None = None,
          transport: Transport | None = None, **settings: Any) -> TrainResult:
    """Train a GCN (``conv`` "sage", "gat": GraphSAGE, GAT) as ``distgcn train`` does, on this process's rank;
    collective under mpiexec.

    ``source``: a partition directory (each rank reads its own shard), a
    :class:`Partition` with as many parts as ranks, or a graph, which rank 0
    partitions with ``partition_model`` (as ``train --graph --partition``).
    Graphs and Partitions are read on rank 0 only; other ranks may pass None.
    ``feature_norm`` applies to a graph partitioned here (a directory's shards hold prepared features).
    The keywords are the command line's options of the same names (:data:`TRAIN_KEYWORDS`; docs/api.md), or
    ``config`` gives them all as a :class:`~distgcn.config.RunConfig` (``source`` None: the directory or graph
    its ``source`` names). ``sampler`` and ``batch_size`` train on minibatches. ``threads`` sets torch's threads
    for this call only (default: as they are). The transport is :func:`default_transport` unless one is given.
    """
    import torch

    from distgcn.comm.collective import CollectiveInputError
    from distgcn.training import pipeline

    config, source = _run_config(source, config, settings)
    transport = transport if transport is not None else default_transport(config.compute.backend)
    previous_threads = torch.get_num_threads()
    try:
        if config.compute.threads is not None:
            torch.set_num_threads(config.compute.threads)

        def own_shard(transport: Transport, _progress: object) -> Shard:
            return _own_shard(source, transport, config)

        outcome = pipeline.run(config, transport, torch.get_num_threads(), own_shard)
        outputs = [t.cpu().numpy() for t in outcome.trainer.layer_outputs()]
    except CollectiveInputError as exc:
        raise InputError(str(exc)) from None
    finally:
        torch.set_num_threads(previous_threads)
    ordered = RankOutputs.of(outcome.shard.global_ids, outputs, transport)
    return TrainResult(**vars(ordered), history=outcome.history, weights=outcome.trainer.weights())


def load_weights(path: str | Path) -> SavedWeights:
    """Read a weights file of ``train --save-weights`` (or ``train(save_weights=...)``): the record of its model
    (``record``: layer type, widths, epoch, how the graph was read, distgcn version) and its parameters.
    A file that is not one, or records no model distgcn builds, raises InputError naming it."""
    return read_weights(path)


def predict(source: GraphSource | Partition | None, weights: SavedWeights | str | Path, *,
            partition_model: str = default_of(PredictConfig, "partition"), seed: int = default_of(PredictConfig, "seed"),
            symmetrize: bool | None = None, feature_norm: str | None = None,
            halo_window: int | None = default_of(PredictConfig, "halo_window"),
            spmm_kernel: str = default_of(ComputeConfig, "spmm_kernel"), threads: int | None = None,
            transport: Transport | None = None) -> RankOutputs:
    """Every vertex's outputs with saved weights, as ``distgcn predict`` computes them; collective under mpiexec.

    ``source``: a partition directory, a :class:`Partition` with as many parts as ranks, or a graph (rank 0
    partitions it with ``partition_model`` and ``seed``; read as the weights file records training read it, unless
    ``symmetrize`` or ``feature_norm`` are given). ``weights``: :func:`load_weights`' result or a path. The result's
    ``predict()``, ``embeddings(layer)`` and ``export(path)`` are :class:`TrainResult`'s; with the weights a
    training process ended with (or kept), on the same shards and ranks, they equal its own bit for bit.
    """
    import torch

    from distgcn.comm.collective import CollectiveInputError, agree
    from distgcn.runtime.progress import QUIET, Progress
    from distgcn.training.prediction import own_shard
    from distgcn.training.prediction import predict as predict_on_rank

    transport = transport if transport is not None else default_transport()
    previous_threads = torch.get_num_threads()
    progress = Progress(QUIET)
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        saved = weights if isinstance(weights, SavedWeights) else agree(transport, lambda: read_weights(weights))
        if isinstance(source, (str, Path)):
            settings = PredictConfig(source=str(source), weights=str(saved.path), out="", partition=partition_model,
                                     seed=seed, symmetrize=symmetrize, feature_norm=feature_norm,
                                     halo_window=halo_window)
            shard = own_shard(settings, saved, transport, progress)
        else:  # in memory (a Graph, GraphOptions, a Partition), or None on ranks other than 0
            norm = feature_norm or (saved.record.get("graph") or {}).get("feature_norm", "row")
            shard = _own_shard(source, transport, RunConfig(source=SourceConfig(partition=partition_model,
                                                                                feature_norm=norm)), seed=seed)
        return predict_on_rank(saved, saved.config(halo_window=halo_window), transport, shard, spmm_kernel,
                               progress)
    except CollectiveInputError as exc:
        raise InputError(str(exc)) from None
    finally:
        torch.set_num_threads(previous_threads)


_signature(partition, PARTITION_KEYWORDS)
_signature(train, TRAIN_KEYWORDS)
partition.__signature__ = partition.__signature__.replace(parameters=[  # type: ignore[attr-defined]
    parameter.replace(default=default_of(PartitionConfig, "partitioning").model) if parameter.name == "model"
    else parameter for parameter in partition.__signature__.parameters.values()])  # type: ignore[attr-defined]


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


def _own_shard(source: GraphSource | Partition | None, transport: Transport, config: RunConfig,
               seed: int | None = None) -> Shard:
    """This rank's shard: read from a partition directory, or cut on rank 0 and sent (rank 0 decides which).
    ``seed`` seeds rank 0's partitioner (None: the training seed)."""
    from distgcn.comm.collective import agree
    from distgcn.shard.directory import META_FILE
    from distgcn.shard.distribute import load_own_shard
    from distgcn.shard.scatter import cut_and_scatter, startup_partitioning

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
        split = partition(source, config=PartitionConfig(
            parts=transport.size, feature_norm=config.source.feature_norm,
            partitioning=startup_partitioning(config.source.partition,
                                              config.train.seed if seed is None else seed)))
        return split.graph, split.a_hat, split.parts

    return cut_and_scatter(transport, agree(transport, on_root), config.source.vertex_order or VERTEX_ORDER)


def _run_config(source: GraphSource | Partition | None, config: RunConfig | None,
                settings: dict[str, Any]) -> tuple[RunConfig, GraphSource | Partition | None]:
    """The run's configuration from train's keywords or ``config``, checked before any rank communicates, and
    the source it trains on (``config.source``'s directory or graph when ``source`` is None)."""
    from distgcn.shard.directory import META_FILE
    from distgcn.training.settings import run_config

    if config is not None and settings:
        raise TypeError(f"train() takes config= or keywords, not both (got {min(settings)!r})")
    if config is not None and source is None and config.source.partition_dir is not None:
        source = config.source.partition_dir
    elif config is not None and source is None and config.source.graph is not None:
        given = config.source
        source = GraphOptions(spec=given.graph, symmetrize=given.symmetrize, features=given.features,
                              classes=given.classes, seed=config.train.seed, feature_norm=given.feature_norm)
    elif config is not None and (config.source.partition_dir is not None or config.source.graph is not None):
        raise InputError("train: give the source once, as the source argument or in config.source")
    directory = isinstance(source, (str, Path)) and (Path(source) / META_FILE).is_file()
    spec = source.spec if isinstance(source, GraphOptions) else str(source) if isinstance(source, (str, Path)) \
        else None
    located = {"partition_dir": str(source) if directory else None, "graph": None if directory else spec}
    if config is None:
        return run_config(_settings("train", TRAIN_KEYWORDS, settings) | located), source
    return dataclasses.replace(config, source=dataclasses.replace(config.source, **located)), source
