"""``distgcn partition``: partition a graph offline and write the partition directory.

Load and prepare the graph, compute the part vector (:mod:`distgcn.partitioning.models`),
measure its communication (:mod:`distgcn.partitioning.metrics`), cut the shards
(:mod:`distgcn.shard.cut`) and write them with meta.json and parts.npy
(:mod:`distgcn.shard.directory`, which owns the directory's format).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.config import VERTEX_ORDER, PartitionConfig, PartitionerConfig
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.metrics import partition_metrics
from distgcn.partitioning.models import (
    GIL_HOLDING_MODELS,
    check_partitioner,
    run_model,
)
from distgcn.partitioning.stochastic import sampling_report
from distgcn.runtime.progress import NORMAL, QUIET, VERBOSE, Progress
from distgcn.shard.cut import GraphData, cut_shards
from distgcn.shard.directory import (
    check_output,
    graph_source,
    input_paths,
    partition_id,
    write_directory,
)
from distgcn.shard.spill import Spill


@dataclass
class Partitioned:
    """A graph loaded, partitioned and measured: what is cut into shards."""

    data: GraphData
    """The graph without its adjacency (Â replaces it)."""
    a_hat: sp.csr_matrix
    parts: np.ndarray
    info: dict
    """What the partitioning model reported."""
    metrics: dict
    """The exact communication metrics (:func:`distgcn.partitioning.metrics.partition_metrics`)."""


def graph_options(config: PartitionConfig) -> GraphOptions:
    """How ``distgcn partition`` reads its graph (the partitioner's seed also seeds random features)."""
    return GraphOptions(spec=config.graph, symmetrize=config.symmetrize, features=config.features,
                        classes=config.classes, seed=config.partitioning.seed, feature_norm=config.feature_norm)


def partitioner_config(partitioning: PartitionerConfig | str) -> PartitionerConfig:
    """``partitioning`` itself, or a model's name with every other setting at its default."""
    return PartitionerConfig(model=partitioning) if isinstance(partitioning, str) else partitioning


def write_partition(options: GraphOptions, out: str | Path, nparts: int, partitioning: PartitionerConfig | str, *,
                    force: bool = False, quiet: bool = False, verbose: bool = False,
                    vertex_order: str = VERTEX_ORDER) -> dict:
    """Load, partition, measure and shard a graph; return the metadata written to meta.json.

    ``partitioning`` says how the parts are computed (:func:`distgcn.partitioning.models.run_model`).
    Progress goes to stderr (see :mod:`distgcn.runtime.progress`): none with ``quiet``, details with ``verbose``.
    ``vertex_order`` numbers each shard's rows (:data:`distgcn.config.VERTEX_ORDERS`).
    """
    partitioning = partitioner_config(partitioning)
    check_partitioner(partitioning.model, partitioning.partitioner, partitioning.preset)  # before the long load
    inputs = input_paths(options.spec, partitioning.parts_file)
    out = check_output(out, force, inputs)  # fail before the long work, not after
    progress = Progress(QUIET if quiet else VERBOSE if verbose else NORMAL)
    done = partition_graph(options, nparts, partitioning, progress)
    return save_partition(out, done.data, done.a_hat, done.parts, done.info, done.metrics, graph_source(options),
                          progress, vertex_order, force=force, inputs=inputs)


def partition_graph(options: GraphOptions, nparts: int, partitioning: PartitionerConfig,
                    progress: Progress) -> Partitioned:
    """Load and prepare a graph, compute its part vector and measure its communication (arguments as
    :func:`write_partition`'s)."""
    data, a_hat, parts, info = load_and_partition(options, nparts, partitioning, progress)
    with progress.phase("measuring communication") as phase:
        metrics = partition_metrics(a_hat, parts, nparts)
        phase.finish(metrics_line(metrics))
    return Partitioned(data, a_hat, parts, info, metrics)


def load_and_partition(options: GraphOptions, nparts: int, partitioning: PartitionerConfig,
                       progress: Progress) -> tuple[GraphData, sp.csr_matrix, np.ndarray, dict]:
    """The graph (without its adjacency), Â, the part vector and what the partitioning model reported (not yet
    measured)."""
    data, a_hat = load(options, progress)
    spill = Spill(data, a_hat)  # the features and Â leave memory while the partitioner holds its own graph
    model = partitioning.model
    with progress.phase(f"partitioning ({model}, P={nparts})") as phase:
        if model == "hypergraph":
            spill.move_vertex_arrays()
        with phase.outside_the_gil() if model in GIL_HOLDING_MODELS else nullcontext():
            parts, info = run_model(partitioning, a_hat, nparts, while_tool_runs=spill)
        phase.finish(f"the partitioner took {info['partition_s']:.2f}s")
    spill.report(progress)
    if "shp" in info:
        report, warning = sampling_report(info["shp"])
        progress.info(report)
        if warning:
            progress.warn(warning)
    progress.detail("partitioner: " + json.dumps({k: v for k, v in info.items() if k != "partition_s"}))
    return data, a_hat, parts, info


def load(options: GraphOptions, progress: Progress) -> tuple[GraphData, sp.csr_matrix]:
    """The prepared graph as :class:`GraphData`, and Â: the graph's adjacency is freed on return.

    At 10^8 nonzeros the adjacency is 1.2 GB that nothing after Â needs but the fingerprint, taken here.
    """
    with progress.phase(f"loading {options.spec}") as phase:
        graph, a_hat = prepare_graph(options)
        data = GraphData.of(graph, a_hat)
        phase.finish(f"{graph.num_vertices} vertices, {a_hat.nnz} nonzeros in Â")
    return data, a_hat


def metrics_line(metrics: dict) -> str:
    return (f"volume {metrics['volume']['total']} rows, {metrics['messages']['total']} messages, "
            f"imbalance {metrics['imbalance']:.3f}")


def save_partition(out: Path, data: GraphData, a_hat: sp.csr_matrix, parts: np.ndarray, info: dict, metrics: dict,
                   source: dict, progress: Progress, vertex_order: str = VERTEX_ORDER, *, force: bool = False,
                   inputs: list[Path] | None = None) -> dict:
    """Cut a graph already partitioned and measured into shards and write its directory; return meta.json's contents.

    ``source`` says how the graph was read (:func:`distgcn.shard.directory.graph_source`); the caller has checked
    ``out`` with :func:`distgcn.shard.directory.check_output` (with the same ``force`` and ``inputs``).
    """
    nparts = int(metrics["parts"])
    pid = partition_id(data.fingerprint, parts, nparts)
    shards = cut_shards(data, a_hat, parts, nparts, pid, vertex_order)
    return write_directory(out, data.fields, parts, shards, info, metrics, source, vertex_order, progress,
                           force=force, inputs=inputs)
