"""Shards written by the ranks that read them: ``mpiexec -n P distgcn partition GRAPH --parts P ...``.

Rank 0 loads and partitions the graph as one process would
(:func:`distgcn.shard.write.load_and_partition`), then writes parts.npy and
the graph itself (Â's CSR arrays, the pattern of Âᵀ unless Â's is symmetric,
the per-vertex arrays) as plain .npy files into a scratch folder of the staging
directory, and drops the graph. Every rank (rank 0 included) then cuts its own
shard from those files, reading only its own rows a chunk at a time
(:func:`read_rows`), writes it, and counts its share of the communication
metrics; rank 0 sums the shares (:func:`merged_metrics`), removes the scratch
folder, writes meta.json last and renames the directory into place. So the
node that partitions needs memory for the graph and the part vector (and what
the partitioning model itself takes); every rank, for its shard and a few
arrays of n entries (the part vector, row pointers, a lookup table); no process
holds more than one shard, and none measures the whole graph at once.

A rank's shard equals the one :func:`distgcn.shard.cut.iter_shards` cuts (the
same :func:`distgcn.shard.cut.assemble_shard` builds both): its halo is the
remote columns of its rows, sorted by (owner, id); its sends come from the
columns of the other parts' rows, that is from its own rows of Âᵀ, sorted by
(receiver, id), the order of :func:`distgcn.partitioning.metrics.comm_pairs`. Â holds no
explicit zeros (:func:`distgcn.data.graph.normalized_adjacency` drops them), so its
stored entries are its nonzeros.

The staging directory must be on a filesystem every rank sees (as a partition
directory must be for ``train``). Bad input on any rank is an error on every
rank (exit 2), an unexpected failure too (exit 1,
:func:`distgcn.comm.collective.agree_on_failure`): rank 0 then removes the staging
directory. A full disk on any rank is bad input of this kind
(:func:`distgcn.shard.directory.writing_partition`). A rank that dies (a signal,
the out-of-memory killer) makes mpiexec end the others.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.comm.collective import Group, agree, agree_on_failure
from distgcn.config import VERTEX_ORDER, PartitionerConfig
from distgcn.data.adjacency import sorted_unique
from distgcn.data.prepare import GraphOptions
from distgcn.errors import InputError
from distgcn.io.npy_files import read_npy, read_npy_header
from distgcn.partitioning.metrics import summarize
from distgcn.partitioning.models import check_partitioner
from distgcn.runtime.faults import inject_shard_fault
from distgcn.runtime.progress import Progress
from distgcn.shard.cut import (
    VERTEX_FIELDS,
    GraphData,
    OwnedRows,
    Plan,
    ShardIdentity,
    assemble_shard,
    part_order,
)
from distgcn.shard.directory import (
    PARTS_FILE,
    check_output,
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
from distgcn.shard.rank_shard import Shard
from distgcn.shard.write import load_and_partition, metrics_line, partitioner_config

SCRATCH = "graph-for-ranks"
"""The folder of the staging directory that holds the graph while the ranks cut their shards."""
CHUNK_BYTES = 1 << 25
"""How much of a scratch file :func:`read_rows` reads at once."""


@dataclass(frozen=True)
class RankJob:
    """What rank 0 tells every rank once the graph is on disk."""

    staging: str
    identity: ShardIdentity
    symmetric: bool
    """Â's pattern equals Âᵀ's: the ranks read their rows of Âᵀ from Â's files."""
    vertex_order: str


# ---- the graph on disk, for the ranks ------------------------------------------------------------------------------

def write_scratch(directory: Path, data: GraphData, a_hat: sp.csr_matrix) -> bool:
    """Write Â, Âᵀ's pattern (unless symmetric) and the per-vertex arrays to ``directory``; True if symmetric."""
    directory.mkdir()
    for name, values in (("a.indptr", a_hat.indptr), ("a.indices", a_hat.indices), ("a.data", a_hat.data)):
        np.save(directory / f"{name}.npy", values)
    ones = np.ones(a_hat.nnz, dtype=np.int8)
    transpose = sp.csr_matrix((ones, a_hat.indices, a_hat.indptr), shape=a_hat.shape).T.tocsr()
    del ones
    transpose.sort_indices()
    symmetric = bool(np.array_equal(transpose.indptr, a_hat.indptr)
                     and np.array_equal(transpose.indices, a_hat.indices))
    if not symmetric:
        np.save(directory / "at.indptr.npy", transpose.indptr)
        np.save(directory / "at.indices.npy", transpose.indices)
    del transpose
    for name, values in data.arrays.items():
        np.save(directory / f"{name}.npy", np.ascontiguousarray(values))
    return symmetric


def read_rows(path: Path, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` (ascending) of the .npy array at ``path``, read a chunk at a time.

    Only the rows taken stay in memory, and a chunk with none of them is never read: memory-mapping the
    file instead would count every page touched in the process's resident set.
    """
    with open(path, "rb") as fh:
        header = read_npy_header(fh)
        if header is None:
            raise ValueError(f"{path}: not a version 1.0 or 2.0 .npy file")
        shape, fortran_order, dtype = header
        if fortran_order or not shape:
            raise ValueError(f"{path}: expected a C-ordered array with at least one axis")
        start = fh.tell()
        row_shape = shape[1:]
        row_bytes = math.prod(row_shape) * dtype.itemsize
        out = np.empty((rows.shape[0], *row_shape), dtype=dtype)
        if row_bytes == 0:
            return out
        per_chunk = max(1, CHUNK_BYTES // row_bytes)
        taken = 0
        while taken < rows.shape[0]:
            first = int(rows[taken])
            last = int(np.searchsorted(rows, first + per_chunk)) - 1  # the last row taken in this chunk
            stop = int(rows[last]) + 1
            chunk = np.empty((stop - first, *row_shape), dtype=dtype)
            fh.seek(start + first * row_bytes)
            if fh.readinto(memoryview(chunk).cast("B")) != chunk.nbytes:
                raise ValueError(f"{path}: shorter than its header says")
            out[taken : last + 1] = chunk[rows[taken : last + 1] - first]
            taken = last + 1
    return out


def read_csr_rows(directory: Path, matrix: str, rows: np.ndarray, with_data: bool) -> sp.csr_matrix:
    """Rows ``rows`` (ascending) of the CSR matrix ``matrix`` (a or at) of :func:`write_scratch`, n columns.

    Without ``with_data`` the entries are ones (a pattern).
    """
    indptr = read_npy(directory / f"{matrix}.indptr.npy")
    n = indptr.shape[0] - 1
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    del indptr
    row_ptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    positions = np.repeat(starts - row_ptr[:-1], lengths) + np.arange(row_ptr[-1], dtype=np.int64)
    indices = read_rows(directory / f"{matrix}.indices.npy", positions)
    data = read_rows(directory / f"{matrix}.data.npy", positions) if with_data else \
        np.ones(positions.shape[0], dtype=np.int8)
    return sp.csr_matrix((data, indices, row_ptr), shape=(rows.shape[0], n))


def _remote_pairs(part_of_col: np.ndarray, cols: np.ndarray, rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (part, column) pairs with part != ``rank``, sorted by part then column."""
    remote = part_of_col != rank
    keys = sorted_unique(part_of_col[remote] * n + cols[remote])
    return keys // n, keys % n


@dataclass(frozen=True)
class RankCounts:
    """What one rank's shard contributes to the partition's metrics (:func:`distgcn.partitioning.metrics.summarize`)."""

    sent: int
    """Rows of H it sends per SpMM."""
    received: int
    messages_sent: int
    messages_received: int
    nonzeros: int
    """Its rows' nonzeros: its part's weight, as the metrics weigh parts."""
    size: int
    connectivity: int
    """Its columns' share of the column-net cut: over each owned column, the parts reading it, minus one."""
    cut_pairs: int
    """Its vertices' neighbours (in the symmetrised pattern) in other parts: each cut edge counts at both ends."""


def cut_own_shard(rank: int, job: RankJob) -> tuple[Shard, RankCounts]:
    """This rank's shard, cut from the files rank 0 wrote to ``job.staging``, and its share of the metrics."""
    staging = Path(job.staging)
    scratch = staging / SCRATCH
    if not scratch.is_dir():
        raise InputError("this rank does not see the graph rank 0 wrote there: --out must be on a filesystem "
                         "that every rank sees", path=staging)
    parts = read_npy(staging / PARTS_FILE)
    inject_shard_fault(rank)
    n = parts.shape[0]
    mine = np.flatnonzero(parts == rank)  # ascending global ids
    rows = read_csr_rows(scratch, "a", mine, with_data=True)
    local = part_order(rows[:, mine], job.vertex_order)
    owned = mine[local]
    block = rows[local]
    del rows
    cols = block.indices.astype(np.int64)
    col_owner = parts[cols]
    halo_owner, halo_cols = _remote_pairs(col_owner, cols, rank, n)
    remote = col_owner != rank
    neighbours = [np.repeat(owned, np.diff(block.indptr))[remote] * n + cols[remote]]
    del cols, col_owner, remote
    readers = read_csr_rows(scratch, "a" if job.symmetric else "at", mine, with_data=False)
    reader_owner = parts[readers.indices]
    column = np.repeat(mine, np.diff(readers.indptr))  # the column of each of Â's nonzeros read (row of Âᵀ)
    send_receiver, send_cols = _remote_pairs(reader_owner, column, rank, n)
    remote = reader_owner != rank
    neighbours.append(column[remote] * n + readers.indices[remote])
    counts = RankCounts(
        sent=send_cols.shape[0], received=halo_cols.shape[0], messages_sent=sorted_unique(send_receiver).shape[0],
        messages_received=sorted_unique(halo_owner).shape[0], nonzeros=int(np.count_nonzero(block.data)),
        size=owned.shape[0],
        connectivity=sorted_unique(column * job.identity.nparts + reader_owner).shape[0]
        - int(np.count_nonzero(np.diff(readers.indptr))),
        cut_pairs=sorted_unique(np.concatenate(neighbours)).shape[0])
    del readers, reader_owner, column, remote, neighbours, parts
    local_column = np.empty(n, dtype=np.int64)
    local_column[owned] = np.arange(owned.shape[0])
    plan = Plan(halo_cols, halo_owner, send_cols, send_receiver, local_column[send_cols])
    vertex = {name: read_rows(scratch / f"{name}.npy", mine)[local] for name in VERTEX_FIELDS}
    return assemble_shard(rank, job.identity, owned, OwnedRows(block, **vertex), plan, local_column), counts


def merged_metrics(counts: list[RankCounts], n: int) -> dict:
    """The partition's metrics from every rank's counts, as :func:`distgcn.partitioning.metrics.partition_metrics` gives
    them for the whole graph."""
    def per_part(field: str) -> np.ndarray:
        return np.array([getattr(c, field) for c in counts], dtype=np.int64)

    nonzeros = per_part("nonzeros")
    return summarize(len(counts), n, int(nonzeros.sum()), sent=per_part("sent"), received=per_part("received"),
                     messages_sent=per_part("messages_sent"), messages_received=per_part("messages_received"),
                     part_weights=nonzeros, part_sizes=per_part("size"),
                     connectivity=int(per_part("connectivity").sum()), cut=int(per_part("cut_pairs").sum()) // 2)


# ---- the job ---------------------------------------------------------------------------------------------------

def check_job(ranks: int, nparts: int, partitioning: PartitionerConfig, out: str | Path, force: bool,
              inputs: list[Path]) -> Path:
    """Refuse, before any load, a job whose rank count is not the part count, a partitioner the model cannot use,
    or an output that is not free; the checked output path (one rank's step of an agreement)."""
    if ranks != nparts:
        raise InputError(f"--parts {nparts} but the job has {ranks} MPI ranks: rank-written shards need one rank "
                         f"per part (mpiexec -n {nparts} distgcn partition ...), or run one process")
    check_partitioner(partitioning.model, partitioning.partitioner, partitioning.preset)
    return check_output(out, force, inputs)


def write_partition_on_ranks(group: Group, options: GraphOptions, out: str | Path, nparts: int,
                             partitioning: PartitionerConfig | str, *, force: bool = False, quiet: bool = False,
                             verbose: bool = False, vertex_order: str = VERTEX_ORDER) -> dict | None:
    """Partition on rank 0, cut, measure and write each shard on its own rank; meta.json's contents on rank 0,
    else None.

    Collective over ``group``, whose size must be ``nparts``. ``partitioning``: how rank 0 computes the parts
    (as :func:`distgcn.shard.write.write_partition` takes it).
    """
    partitioning = partitioner_config(partitioning)
    root = group.rank == 0
    progress = Progress.for_rank(group.rank, quiet=quiet, verbose=verbose)
    inputs = input_paths(options.spec, partitioning.parts_file)

    out = agree(group, lambda: check_job(group.size, nparts, partitioning, out, force, inputs))

    def prepare() -> tuple[RankJob, dict] | None:
        return _prepare_on_root(options, out, nparts, partitioning, progress, vertex_order) if root else None

    prepared = agree_on_failure(group, prepare)
    job: RankJob = group.allgather_object(prepared[0] if root else None)[0]

    def write_own() -> tuple[dict, RankCounts]:
        shard, counts = cut_own_shard(group.rank, job)
        with writing_partition(out):
            return write_shard(Path(job.staging), shard, progress), counts

    try:
        with progress.phase(f"cutting, measuring and writing shards on {nparts} ranks") as phase:
            written = group.allgather_object(agree_on_failure(group, write_own))
            metrics = merged_metrics([counts for _, counts in written], job.identity.n_global)
            phase.finish(metrics_line(metrics))
        entries = [entry for entry, _ in written]
        meta = agree_on_failure(group, lambda: _finish_on_root(job, prepared[1], entries, metrics, out, force, inputs)
                     if root else None)
    except BaseException:  # a failure of a step is every rank's together: none writes to the staging any more
        if root:
            remove_staging(Path(job.staging))
        raise
    if root:
        progress.info(f"wrote {out} ({nparts} shards, each written by its rank)")
    return meta


def _prepare_on_root(options: GraphOptions, out: Path, nparts: int, partitioning: PartitionerConfig,
                     progress: Progress, vertex_order: str) -> tuple[RankJob, dict]:
    """Partition; write parts.npy and the graph for the ranks into a new staging directory.

    Returns the ranks' job and what meta.json needs of the graph; the graph is dropped when this returns.
    """
    data, a_hat, parts, info = load_and_partition(options, nparts, partitioning, progress)
    identity = ShardIdentity(nparts, a_hat.shape[0], data.num_classes,
                             partition_id(data.fingerprint, parts, nparts), data.fingerprint)
    with staging_directory(out) as staging, progress.phase("writing the graph for the ranks") as phase:
        write_parts(staging, parts)
        symmetric = write_scratch(staging / SCRATCH, data, a_hat)
        phase.finish("Â symmetric: the ranks read their rows of Âᵀ from it" if symmetric
                     else "with Âᵀ's pattern")
    meta_parts = {"fields": data.fields, "info": info, "source": graph_source(options)}
    return RankJob(str(staging), identity, symmetric, vertex_order), meta_parts


def _finish_on_root(job: RankJob, meta_parts: dict, entries: list[dict], metrics: dict, out: Path, force: bool,
                    inputs: list[Path]) -> dict:
    """Remove the scratch folder, write meta.json last and rename the staging directory to ``out``."""
    staging = Path(job.staging)
    with writing_partition(out):
        shutil.rmtree(staging / SCRATCH)
        meta = directory_meta(staging, meta_parts["fields"], job.identity.partition_id,
                              job.identity.graph_fingerprint, meta_parts["info"], metrics, meta_parts["source"],
                              job.vertex_order, entries)
        finish_directory(staging, out, meta, force=force, inputs=inputs)
    return meta
