"""Getting each rank its shard: from a partition directory, or built on rank 0 and sent.

A partition directory (written by ``distgcn partition``) lets every rank read
only its own file. For small graphs, ``train --graph`` partitions on rank 0
and sends each rank its shard through the transport, one at a time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .errors import InputError
from .graph import Graph
from .collective import agree
from .prepare import GraphOptions, prepare_graph
from .schema import validate_meta
from .shard import Shard, read_arrays
from .transport import Transport

META_FILE = "meta.json"
PARTS_FILE = "parts.npy"


def shard_filename(rank: int) -> str:
    return f"shard-{rank:05d}.npz"


def read_meta(directory: Path) -> dict:
    """meta.json of a partition directory, validated against :data:`distgcn.schema.META`."""
    path = directory / META_FILE
    if not path.is_file() and not path.is_symlink():
        raise InputError(f"not a partition directory (no {META_FILE})", path=directory)
    member(directory, META_FILE, "partition metadata")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read partition metadata ({exc})", path=path) from None
    except RecursionError:
        raise InputError("cannot read partition metadata (nested too deeply)", path=path) from None
    return validate_meta(meta, path)


def member(directory: Path, name: str, what: str) -> Path:
    """The path of a file that the partition directory names: a regular file inside it, not a link."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise InputError(f"{what} {name!r} is not a plain file name inside the directory", path=directory)
    path = directory / name
    if path.is_symlink():
        raise InputError(f"{what} is a symbolic link; a partition directory holds its own files", path=path)
    if not path.exists():
        raise InputError(f"{what} not found", path=path)
    if not path.is_file():
        raise InputError(f"{what} is not a regular file", path=path)
    return path


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_parts_file(directory: Path, meta: dict) -> None:
    """parts.npy against meta.json's ``parts_sha256`` (directories written before it have none to check)."""
    if "parts_sha256" not in meta:
        return
    path = member(directory, PARTS_FILE, "part vector")
    try:
        found = file_sha256(path)
    except OSError as exc:
        raise InputError(f"cannot read the part vector ({exc.strerror or exc})", path=path) from None
    if found != meta["parts_sha256"]:
        raise InputError(f"part vector does not match meta.json (sha256 {found[:12]}..., meta.json records "
                         f"{meta['parts_sha256'][:12]}...): it was changed after partitioning", path=path)


def load_listed_shard(directory: Path, meta: dict, rank: int) -> Shard:
    """Rank ``rank``'s shard, checked against its entry in meta.json before anything uses it."""
    entry = meta["shards"][rank]
    path = member(directory, entry["file"], f"shard of rank {rank} (shards[{rank}].file in meta.json)")
    arrays = read_arrays(path)
    shard = Shard.from_arrays(arrays, source=str(path))
    found = {"rank": shard.rank, "nparts": shard.nparts, "partition_id": shard.partition_id,
             "n_owned": shard.n_owned, "n_halo": shard.n_halo}
    recorded = {"rank": rank, "nparts": meta["parts"], "partition_id": meta["partition_id"],
                "n_owned": entry["n_owned"], "n_halo": entry["n_halo"]}
    for key, value in recorded.items():
        if found[key] != value:
            raise InputError(f"shard belongs to another partition or rank ({key} {found[key]!r}; meta.json "
                             f"records {value!r})", path=path)
    stored = str(arrays["checksum"])
    if stored != entry["sha256"]:
        raise InputError(f"shard does not match meta.json (checksum {stored[:12]}..., meta.json records "
                         f"{entry['sha256'][:12]}...): it was changed after partitioning", path=path)
    return shard


def load_own_shard(transport: Transport, directory: str | Path) -> Shard:
    """Each rank reads meta.json and its own shard file, checked against the job size and the others' plans."""
    directory = Path(directory)

    def step() -> Shard:
        meta = read_meta(directory)
        if meta["parts"] != transport.size:
            raise InputError(
                f"partition has {meta['parts']} parts but the job has {transport.size} ranks "
                f"(launch {meta['parts']} ranks, or partition again with --parts {transport.size})",
                path=directory,
            )
        shard = load_listed_shard(directory, meta, transport.rank)
        check_plan(shard)
        return shard

    shard = agree(transport, step)
    check_plans_agree(transport, shard, directory)
    return shard


def check_plan(shard: Shard) -> None:
    """One shard's communication plan is well formed: peers in range, offsets monotone and within the arrays."""
    source = f"shard of rank {shard.rank}"

    def offsets_ok(peers: np.ndarray, offsets: np.ndarray, length: int, name: str) -> None:
        if peers.ndim != 1 or offsets.ndim != 1 or offsets.shape[0] != peers.shape[0] + 1:
            raise InputError(f"{name}_offsets has {offsets.shape[0]} entries for {peers.shape[0]} peers "
                             "(expected one more)", path=source)
        if peers.size and (peers.min() < 0 or peers.max() >= shard.nparts or np.any(peers == shard.rank)
                           or np.any(np.diff(peers) <= 0)):
            raise InputError(f"{name}_peers must be increasing ranks in [0, {shard.nparts}) other than "
                             f"{shard.rank}, got {peers.tolist()[:8]}", path=source)
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != length:
            raise InputError(f"{name}_offsets must rise from 0 to {length}, got {offsets.tolist()[:8]}", path=source)

    offsets_ok(shard.send_peers, shard.send_offsets, int(shard.send_index.shape[0]), "send")
    offsets_ok(shard.recv_peers, shard.recv_offsets, shard.n_halo, "recv")
    if shard.send_index.size and (shard.send_index.min() < 0 or shard.send_index.max() >= shard.n_owned):
        raise InputError(f"send_index must hold owned rows in [0, {shard.n_owned})", path=source)
    if shard.owned_block.shape != (shard.n_owned, shard.n_owned) or \
            shard.halo_block.shape != (shard.n_owned, shard.n_halo):
        raise InputError(f"blocks are {shard.owned_block.shape} and {shard.halo_block.shape}; expected "
                         f"({shard.n_owned}, {shard.n_owned}) and ({shard.n_owned}, {shard.n_halo})", path=source)


def check_plans_agree(transport: Transport, shard: Shard, directory: Path) -> None:
    """Every row count a rank will send is the count its receiver expects (else the exchange would hang)."""
    def counts(peers: np.ndarray, offsets: np.ndarray) -> dict[int, int]:
        return {int(p): int(c) for p, c in zip(peers, np.diff(offsets))}

    plans = transport.allgather_object((counts(shard.send_peers, shard.send_offsets),
                                        counts(shard.recv_peers, shard.recv_offsets)))

    def step() -> None:
        expects = plans[transport.rank][1]
        sent = {sender: sends[transport.rank] for sender, (sends, _) in enumerate(plans) if transport.rank in sends}
        if sent != expects:
            wrong = sorted(r for r in set(sent) | set(expects) if sent.get(r) != expects.get(r))[0]
            raise InputError(f"the shards' plans disagree: rank {wrong} sends {sent.get(wrong, 0)} rows to rank "
                             f"{transport.rank}, which expects {expects.get(wrong, 0)} (a shard was changed after "
                             "partitioning: run 'distgcn partition' again)", path=directory)

    agree(transport, step)


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
