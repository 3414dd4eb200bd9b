"""Partitioning inside a training job (``train --graph``): rank 0 loads, partitions and cuts the graph,
and :func:`distgcn.shard.distribute.scatter_shards` takes each rank its shard.

The in-memory counterpart of :mod:`distgcn.shard.write`, which writes the
same shards to a partition directory; for graphs small enough to partition
at start-up.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from distgcn.comm.collective import agree
from distgcn.comm.transport import Transport
from distgcn.config import VERTEX_ORDER, PartitionerConfig
from distgcn.data.graph import Graph
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.models import run_model
from distgcn.shard.cut import iter_shards
from distgcn.shard.directory import partition_id
from distgcn.shard.distribute import scatter_shards
from distgcn.shard.rank_shard import Shard


def startup_partitioning(model: str, seed: int) -> PartitionerConfig:
    """The partitioner settings of a partition made when training starts, chosen so that the part vector depends
    on the seed only and a resumed run partitions again into the partition its checkpoints were written for:
    Mt-KaHyPar's deterministic preset for the hypergraph model (whatever the thread count), one thread for the
    graph model (KaMinPar is reproducible on one thread only; METIS always runs on one)."""
    if model == "hypergraph":
        return PartitionerConfig(model=model, seed=seed, preset="deterministic")
    return PartitionerConfig(model=model, seed=seed, threads=1 if model == "graph" else None)


def build_and_scatter(transport: Transport, options: GraphOptions, partitioning: PartitionerConfig,
                      vertex_order: str | None = None) -> Shard:
    """Rank 0 loads and partitions the graph as ``partitioning`` says, then sends every rank its shard (numbering
    its rows by ``vertex_order``; None: :data:`distgcn.config.VERTEX_ORDER`)."""
    def load_on_root() -> tuple[Graph, sp.csr_matrix, np.ndarray] | None:
        if transport.rank != 0:
            return None
        graph, a_hat = prepare_graph(options)
        parts, _info = run_model(partitioning, a_hat, transport.size)
        return graph, a_hat, parts

    return cut_and_scatter(transport, agree(transport, load_on_root), vertex_order or VERTEX_ORDER)


def cut_and_scatter(transport: Transport, prepared: tuple[Graph, sp.csr_matrix, np.ndarray] | None,
                    vertex_order: str = VERTEX_ORDER) -> Shard:
    """Rank 0 cuts its (graph, Â, part vector) into shards and sends each rank its own; others pass None."""
    if transport.rank != 0:
        return scatter_shards(transport, None)
    assert prepared is not None
    graph, a_hat, parts = prepared
    fingerprint = graph.fingerprint()
    pid = partition_id(fingerprint, parts, transport.size)
    return scatter_shards(transport, iter_shards(graph, a_hat, parts, transport.size, pid, vertex_order,
                                                 graph_fingerprint=fingerprint))
