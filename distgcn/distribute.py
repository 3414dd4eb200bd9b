"""Getting each rank its shard: from a partition directory, or built on rank 0 and sent.

A partition directory (written by ``distgcn partition``) lets every rank read
only its own file. For small graphs, ``train --graph`` partitions on rank 0
and sends each rank its shard through the transport, one at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .errors import InputError
from .graph import Graph
from .launch import agree
from .prepare import GraphOptions, prepare_graph
from .shard import Shard
from .transport import Transport

META_FILE = "meta.json"


def shard_filename(rank: int) -> str:
    return f"shard-{rank:05d}.npz"


def read_meta(directory: Path) -> dict:
    path = directory / META_FILE
    if not path.is_file():
        raise InputError(f"not a partition directory (no {META_FILE})", path=directory)
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read partition metadata ({exc})", path=path) from None
    for key in ("parts", "partition_id"):
        if key not in meta:
            raise InputError(f"partition metadata lacks {key!r}", path=path)
    return meta


def load_own_shard(transport: Transport, directory: str | Path) -> Shard:
    """Each rank reads meta.json and its own shard file, checked against the job size."""
    directory = Path(directory)

    def step() -> Shard:
        meta = read_meta(directory)
        if int(meta["parts"]) != transport.size:
            raise InputError(
                f"partition has {meta['parts']} parts but the job has {transport.size} ranks "
                f"(launch {meta['parts']} ranks, or partition again with --parts {transport.size})",
                path=directory,
            )
        path = directory / shard_filename(transport.rank)
        shard = Shard.load(path)
        if shard.partition_id != meta["partition_id"] or shard.rank != transport.rank:
            raise InputError(
                f"shard belongs to another partition or rank (partition {shard.partition_id}, rank {shard.rank}; "
                f"expected {meta['partition_id']}, rank {transport.rank})",
                path=path,
            )
        return shard

    return agree(transport, step)


def build_and_scatter(
    transport: Transport, options: GraphOptions, model: str, seed: int, epsilon: float = 0.03,
    vertex_order: str = "rcm",
) -> Shard:
    """Rank 0 loads and partitions the graph, then sends every rank its shard."""
    from partition.models import compute_parts

    def load_on_root():
        if transport.rank != 0:
            return None
        graph, a_hat = prepare_graph(options)
        parts, _info = compute_parts(model, a_hat, transport.size, epsilon=epsilon, seed=seed)
        return graph, a_hat, parts

    return scatter_shards(transport, agree(transport, load_on_root), vertex_order)


def scatter_shards(transport: Transport, prepared: tuple[Graph, sp.csr_matrix, np.ndarray] | None,
                   vertex_order: str = "rcm") -> Shard:
    """Rank 0 cuts its (graph, Â, part vector) into shards and sends each rank its own; others pass None."""
    from partition.shards import iter_shards, partition_id

    if transport.rank == 0:
        assert prepared is not None
        graph, a_hat, parts = prepared
        pid = partition_id(graph.fingerprint(), parts, transport.size)
        own = None
        for shard in iter_shards(graph, a_hat, parts, transport.size, pid, vertex_order):
            if shard.rank == 0:
                own = shard
            else:
                transport.send_object(shard.to_arrays(), dest=shard.rank)
        assert own is not None
        return own
    return Shard.from_arrays(transport.recv_object(source=0), source="shard from rank 0")
