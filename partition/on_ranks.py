"""The part vector computed by all ranks together, each holding only its rows of Â.

- ``random``, ``contiguous``, ``external``: the part vector depends on the vertex count alone, so every rank
  computes it (:func:`distgcn.partitioning.models.graph_free_parts`): no step is central.
- ``graph``: Zoltan's graph method on its parallel partitioner PHG (the edge cut), or PT-Scotch's distributed
  graph partitioner (``--partitioner ptscotch``); ``hypergraph``: Zoltan's PHG on the column nets, which
  minimises the same connectivity − 1 (both libraries in :mod:`distgcn.partitioning.engines`).

Both libraries are built against the system's MPI, and run on the communicator of this job: mpi4py must be
built against that same MPI (:func:`engine_problem` says what is missing). Every rank ends with the whole
part vector (n entries): cutting the shards looks up the part of each column a rank's rows touch.
"""

from __future__ import annotations

import time

import numpy as np

from distgcn.config import PartitionerConfig
from distgcn.data.distributed.graph import RankGraph
from distgcn.data.distributed.ids import Exchanging
from distgcn.partitioning.models import (
    DISTRIBUTED_SERVES,
    GRAPH_FREE_MODELS,
    graph_free_parts,
    start_model,
)

ENGINES = {"graph": "zoltan", "hypergraph": "zoltan"}
"""The distributed partitioner each model runs unless --partitioner names another: Zoltan for both (PT-Scotch
needs about twice its memory per rank on a skewed graph: docs/partitioning.md, "Distributed partitioners")."""
DISTRIBUTED_MODELS = (*GRAPH_FREE_MODELS, *ENGINES)


def distributed_problem(config: PartitionerConfig, group: Exchanging) -> str | None:
    """Why ``config`` cannot be partitioned by the ranks together in this job, or None if it can."""
    model = (config.model or "").lower()
    if model not in DISTRIBUTED_MODELS:
        return f"the {model} model has no distributed path"
    if model in GRAPH_FREE_MODELS:
        return None
    engine = (config.partitioner or ENGINES[model]).lower()
    if model not in DISTRIBUTED_SERVES.get(engine, ()):
        return f"--partitioner {config.partitioner} runs in one process (the distributed one is {ENGINES[model]})"
    from distgcn.partitioning.engines import engine_problem

    return engine_problem(engine, getattr(group, "comm", None))


def parts_on_ranks(group: Exchanging, config: PartitionerConfig, graph: RankGraph,
                   nparts: int) -> tuple[np.ndarray, dict]:
    """(the whole part vector, what the model reports for meta.json), the same on every rank; collective."""
    model, info, versions = start_model(config, graph.n, nparts)
    t0 = time.perf_counter()
    if model in GRAPH_FREE_MODELS:
        parts = graph_free_parts(config, graph.n, nparts, info)
    else:
        from distgcn.partitioning.engines import engine_parts

        local, extra, engine_versions = engine_parts((config.partitioner or ENGINES[model]).lower(), group, config,
                                                     graph, nparts)
        parts = np.concatenate(group.allgather_object(local)).astype(np.int64)
        info.update(epsilon=float(config.epsilon), seed=int(config.seed), vertex_weight=config.vertex_weight,
                    **extra)
        versions.update(engine_versions)
    info["partition_s"] = max(group.allgather_object(time.perf_counter() - t0))
    info["versions"] = versions
    return parts, info
