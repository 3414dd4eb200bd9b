"""``mpiexec -n P distgcn partition GRAPH --parts P``: read, partition, cut and write with every rank's share only.

The ranks read the graph together (:func:`distgcn.data.distributed.load.load_rank_graph`), compute the part
vector together (:func:`distgcn.partitioning.on_ranks.parts_on_ranks`), and each cuts and writes its own shard
from the rows sent to it (:mod:`distgcn.shard.rank_rows`). Rank 0 writes parts.npy and, last, meta.json into the
staging directory and renames it into place: the directory is byte for byte the one one process writes for the
same part vector (meta.json's timings aside).

What a rank holds, besides its shard: its range of A's and Â's rows and of the vertex data (about 1/P of each),
the rows routed to it, and arrays of n entries: the part vector (every column's owner is looked up in it) and a
table of local row numbers; reading an edge list adds the ids it read, and random training data the labels and
the split permutation (drawn whole, as one process draws them).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import numpy as np

from distgcn.comm.collective import Group, agree, agree_on_failure
from distgcn.config import VERTEX_ORDER, PartitionerConfig
from distgcn.data.distributed.graph import RankGraph, num_classes
from distgcn.data.distributed.load import load_rank_graph
from distgcn.data.prepare import GraphOptions
from distgcn.io.page_cache import return_freed_heap, spilled
from distgcn.partitioning.on_ranks import ENGINES, parts_on_ranks
from distgcn.runtime.faults import inject_shard_fault
from distgcn.runtime.progress import Progress
from distgcn.shard.cut import ShardIdentity
from distgcn.shard.directory import (
    directory_meta,
    finish_directory,
    graph_source,
    input_paths,
    partition_id,
    remove_staging,
    staging_directory,
    write_parts,
    write_shard,
    writing_partition,
)
from distgcn.shard.rank_rows import cut_from_rows
from distgcn.shard.rank_shard import Shard
from distgcn.shard.rank_shards import check_job, merged_metrics
from distgcn.shard.write import metrics_line, partitioner_config


def write_partition_from_rows(group: Group, options: GraphOptions, out: str | Path, nparts: int,
                              partitioning: PartitionerConfig | str, *, force: bool = False, quiet: bool = False,
                              verbose: bool = False, vertex_order: str = VERTEX_ORDER) -> dict | None:
    """Read, partition, cut and write on every rank of ``group`` (its size must be ``nparts``); meta.json's
    contents on rank 0, else None. Bad input on any rank is a CollectiveInputError on every rank (the ranks
    reading and partitioning together find it together)."""
    partitioning = partitioner_config(partitioning)
    engine = ENGINES.get((partitioning.model or "").lower())
    if engine is not None and partitioning.partitioner is None:  # the model's distributed partitioner, by name
        partitioning = dataclasses.replace(partitioning, partitioner=engine)
    root = group.rank == 0
    progress = Progress.for_rank(group.rank, quiet=quiet, verbose=verbose)
    inputs = input_paths(options.spec, partitioning.parts_file)

    out = agree(group, lambda: check_job(group.size, nparts, partitioning, out, force, inputs))
    graph, parts, info, totals = _read_and_partition(group, options, partitioning, nparts, progress)
    fields = {"name": graph.name, "n": graph.n, "edges": sum(t[0] for t in totals), "nnz": sum(t[1] for t in totals),
              "features": int(graph.features.shape[1]), "classes": num_classes(group, graph)}
    identity = ShardIdentity(nparts, graph.n, fields["classes"], partition_id(graph.fingerprint, parts, nparts),
                             graph.fingerprint)

    def stage() -> str | None:
        if not root:
            return None
        with staging_directory(out) as staging:
            write_parts(staging, parts)
        return str(staging)

    staging = Path(group.allgather_object(agree_on_failure(group, stage))[0])
    try:
        with progress.phase(f"cutting, measuring and writing shards on {nparts} ranks") as phase:
            shard, counts = cut_from_rows(group, graph, parts, identity, vertex_order)
            del graph

            entry = agree_on_failure(group, partial(_write_own, group.rank, out, staging, shard, progress))
            del shard
            written = group.allgather_object((entry, counts))
            metrics = merged_metrics([c for _, c in written], identity.n_global)
            phase.finish(metrics_line(metrics))
        entries = [e for e, _ in written]

        def finish() -> dict | None:
            if not root:
                return None
            with writing_partition(out):
                meta = directory_meta(staging, fields, identity.partition_id, identity.graph_fingerprint, info,
                                      metrics, graph_source(options), vertex_order, entries)
                finish_directory(staging, out, meta, force=force, inputs=inputs)
            return meta

        meta = agree_on_failure(group, finish)
    except BaseException:  # a failure of a step is every rank's together: none writes to the staging any more
        if root:
            remove_staging(staging)
        raise
    if root:
        progress.info(f"wrote {out} ({nparts} shards, read, partitioned and written by the ranks)")
    return meta


def _read_and_partition(group: Group, options: GraphOptions, partitioning: PartitionerConfig, nparts: int,
                        progress: Progress) -> tuple[RankGraph, np.ndarray, dict, list[tuple[int, int]]]:
    """This rank's share of the graph, the part vector, what the partitioner reported, and every rank's
    (nonzeros of A, of Â) read."""
    with progress.phase(f"reading {options.spec} on {group.size} ranks") as phase:
        graph = agree(group, lambda: load_rank_graph(group, options))
        return_freed_heap()  # reading's temporaries, before the partitioner's
        totals = group.allgather_object((graph.edges, int(graph.a_hat.nnz)))
        phase.finish(f"{graph.n} vertices, {sum(t[1] for t in totals)} nonzeros in Â, {graph.rows} rows read here")
    with progress.phase(f"partitioning ({partitioning.model}, P={nparts}, on the ranks)") as phase:
        if (partitioning.model or "").lower() in ENGINES:  # the engine builds its own graph: the features wait
            graph.features = spilled(graph.features)  # in the page cache, not in this process
        parts, info = agree(group, lambda: parts_on_ranks(group, partitioning, graph, nparts))
        phase.finish(f"the partitioner took {info['partition_s']:.2f}s")
    return graph, parts, info, totals


def _write_own(rank: int, out: Path, staging: Path, shard: Shard, progress: Progress) -> dict:
    inject_shard_fault(rank)
    with writing_partition(out):
        return write_shard(staging, shard, progress)
