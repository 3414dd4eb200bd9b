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

from distgcn.config import SamplerSpec
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.metrics import partition_metrics
from distgcn.partitioning.models import (
    GIL_HOLDING_MODELS,
    check_partitioner,
    compute_parts,
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


def write_partition(options: GraphOptions, out: str | Path, nparts: int, model: str, *, epsilon: float = 0.03,
                    seed: int = 0, partitioner: str | None = None, preset: str | None = None,
                    parts_file: str | None = None, force: bool = False, quiet: bool = False,
                    verbose: bool = False, sampler: SamplerSpec | None = None, shp: dict | None = None,
                    vertex_order: str = "rcm", vertex_weight: str = "nonzeros", threads: int | None = None) -> dict:
    """Load, partition, measure and shard a graph; return the metadata written to meta.json.

    Progress goes to stderr (see :mod:`distgcn.runtime.progress`): none with ``quiet``, details with ``verbose``.
    ``sampler`` and ``shp`` configure the stochastic model (see :func:`distgcn.partitioning.models.compute_parts`);
    ``vertex_order`` numbers each shard's rows (:data:`distgcn.config.VERTEX_ORDERS`);
    ``vertex_weight`` is what the partition balances (:func:`distgcn.partitioning.weights.vertex_weights`);
    ``threads`` are Mt-KaHyPar's and KaMinPar's (default: all cores).
    """
    check_partitioner(model, partitioner, preset)  # before the load, which may take minutes
    inputs = input_paths(options.spec, parts_file)
    out = check_output(out, force, inputs)  # fail before the long work, not after
    progress = Progress(QUIET if quiet else VERBOSE if verbose else NORMAL)
    done = partition_graph(options, nparts, model, progress, epsilon=epsilon, seed=seed, partitioner=partitioner,
                           preset=preset, parts_file=parts_file, sampler=sampler, shp=shp,
                           vertex_weight=vertex_weight, threads=threads)
    return save_partition(out, done.data, done.a_hat, done.parts, done.info, done.metrics, graph_source(options),
                          progress, vertex_order, force=force, inputs=inputs)


def partition_graph(options: GraphOptions, nparts: int, model: str, progress: Progress, *, epsilon: float = 0.03,
                    seed: int = 0, partitioner: str | None = None, preset: str | None = None,
                    parts_file: str | None = None, sampler: SamplerSpec | None = None, shp: dict | None = None,
                    vertex_weight: str = "nonzeros", threads: int | None = None) -> Partitioned:
    """Load and prepare a graph, compute its part vector and measure its communication (arguments as
    :func:`write_partition`'s)."""
    data, a_hat, parts, info = load_and_partition(options, nparts, model, progress, epsilon=epsilon, seed=seed,
                                                  partitioner=partitioner, preset=preset, parts_file=parts_file,
                                                  sampler=sampler, shp=shp, vertex_weight=vertex_weight,
                                                  threads=threads)
    with progress.phase("measuring communication") as phase:
        metrics = partition_metrics(a_hat, parts, nparts)
        phase.finish(metrics_line(metrics))
    return Partitioned(data, a_hat, parts, info, metrics)


def load_and_partition(options: GraphOptions, nparts: int, model: str, progress: Progress, *,
                       epsilon: float = 0.03, seed: int = 0, partitioner: str | None = None,
                       preset: str | None = None, parts_file: str | None = None, sampler: SamplerSpec | None = None,
                       shp: dict | None = None, vertex_weight: str = "nonzeros",
                       threads: int | None = None) -> tuple[GraphData, sp.csr_matrix, np.ndarray, dict]:
    """The graph (without its adjacency), Â, the part vector and what the partitioning model reported (not yet
    measured)."""
    data, a_hat = load(options, progress)
    spill = Spill(data, a_hat)  # the features and Â leave memory while the partitioner holds its own graph
    with progress.phase(f"partitioning ({model}, P={nparts})") as phase:
        if model == "hypergraph":
            spill.move_vertex_arrays()
        with phase.outside_the_gil() if model in GIL_HOLDING_MODELS else nullcontext():
            parts, info = compute_parts(model, a_hat, nparts, epsilon=epsilon, seed=seed, partitioner=partitioner,
                                        preset=preset, parts_file=parts_file, sampler=sampler, shp=shp,
                                        vertex_weight=vertex_weight, threads=threads, while_tool_runs=spill)
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
                   source: dict, progress: Progress, vertex_order: str = "rcm", *, force: bool = False,
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
