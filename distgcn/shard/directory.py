"""The partition directory: the one on-disk hand-off from partitioning to training.

A partition directory holds

- ``meta.json`` (:data:`META_FILE`): how the graph was read and partitioned,
  the exact communication metrics, the partition id, and each shard's file name
  and checksum (schema :data:`META`; every key in docs/architecture.md);
- ``parts.npy`` (:data:`PARTS_FILE`): the part vector, int64, one entry per vertex;
- ``shard-RRRRR.npz`` (:func:`shard_filename`): each rank's :class:`~distgcn.shard.rank_shard.Shard`.

This module is the only one that knows these names and keys: it writes a
directory (:func:`write_directory`, from shards that ``distgcn/shard/cut.py``
cuts), reads it back (:func:`read_meta`, :func:`verify_parts_file`,
:func:`load_listed_shard`: nothing is used before it is checked against
meta.json), and defines the identity that ties shards to one graph and part
vector (:func:`partition_id`). Readers are the runtime
(:mod:`distgcn.shard.distribute`), ``stats`` and ``report``.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from distgcn.data.graph import Graph
from distgcn.data.prepare import GraphOptions
from distgcn.errors import (
    InputError,
    describe_os_error,
    is_environment_error,
    lookup_failure,
)
from distgcn.io.digests import file_sha256
from distgcn.io.leftovers import process_exists, remove_abandoned
from distgcn.io.safe_io import (
    PARTITION,
    PARTITION_FILE,
    aside_pattern,
    check_directory_target,
    replace_directory,
)
from distgcn.io.schema import (
    COUNT,
    HEX64,
    Float,
    Int,
    Key,
    List,
    Obj,
    Str,
    check,
    json_problem,
    validate,
)
from distgcn.runtime import signals
from distgcn.runtime.progress import Progress
from distgcn.shard.rank_shard import Shard, read_arrays

META_VERSION = 1
META_FILE = "meta.json"
PARTS_FILE = "parts.npy"


def shard_filename(rank: int) -> str:
    return f"shard-{rank:05d}.npz"


# ---- identity ------------------------------------------------------------

def partition_id(graph_fingerprint: str, parts: np.ndarray, nparts: int) -> str:
    """Ties every shard to one graph and one part vector (docs/architecture.md, Identifiers)."""
    h = hashlib.sha256(graph_fingerprint.encode())
    h.update(np.asarray(nparts, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(parts, dtype=np.int64).tobytes())
    return h.hexdigest()[:32]


# ---- meta.json -----------------------------------------------------------

_SUMMARY = Obj({"total": Float(minimum=0), "avg": Float(minimum=0), "max": Float(minimum=0)})

META = Obj({
    "format_version": Key(Int(minimum=1), required=False),
    "partition_id": Str(r"[0-9A-Za-z_-]{1,128}", "an identifier of letters and digits"),
    "parts": Int(minimum=1),
    "graph": Key(Obj({"name": Key(Str(nullable=True), False), "spec": Key(Str(nullable=True), False),
                      "fingerprint": Key(Str(nullable=True), False), "n": Key(COUNT, False),
                      "nnz": Key(COUNT, False), "edges": Key(COUNT, False), "features": Key(COUNT, False),
                      "classes": Key(COUNT, False)}), required=False),
    "model": Key(Str(nullable=True), False),
    "partitioner": Key(Str(nullable=True), False),
    "preset": Key(Str(nullable=True), False),
    "epsilon": Key(Float(minimum=0, nullable=True), False),
    "seed": Key(Int(nullable=True), False),
    "partition_s": Key(Float(minimum=0, nullable=True), False),
    "volume": Key(_SUMMARY, False),
    "messages": Key(_SUMMARY, False),
    "max_recv_volume": Key(Int(minimum=0, nullable=True), False),
    "max_recv_messages": Key(Int(minimum=0, nullable=True), False),
    "imbalance": Key(Float(minimum=0), False),
    "connectivity_minus_one": Key(Int(minimum=0, nullable=True), False),
    "edge_cut": Key(Int(minimum=0, nullable=True), False),
    "parts_sha256": Key(HEX64, False),
    "shards": List(Obj({"rank": COUNT, "file": Str(r"[^/\\\x00]+", "a file name (no directory)"),
                        "sha256": HEX64, "n_owned": COUNT, "n_halo": COUNT})),
})
"""meta.json, as :func:`write_directory` writes it (keys that only some versions write are optional)."""

MINIBATCH_META = Obj({
    "sampler": Key(Obj({"name": Str(), "batch_size": Int(minimum=1),
                        "options": Key(Obj(), False)}, nullable=True), False),
    "shp_samples": Key(Int(minimum=0, nullable=True), False),
    "partition_info": Key(Obj({"km1_reported": Key(COUNT, False)}), False),
})
"""The stochastic model's fields of meta.json, which :data:`META` leaves out: only ``stats`` reads them."""


def _shards_match_parts(meta: dict) -> str | None:
    shards = meta["shards"]
    if len(shards) != meta["parts"]:
        return f"field shards: {len(shards)} entries for {meta['parts']} parts"
    for index, entry in enumerate(shards):
        if entry["rank"] != index:
            return f"field shards[{index}].rank: expected {index}, got {entry['rank']}"
    return None


def validate_meta(meta: Any, source: str | Path) -> dict:
    validate(meta, META, source)
    check(_shards_match_parts, meta, source)
    return meta


def validate_minibatch_fields(meta: dict, directory: Path) -> dict:
    """meta.json's stochastic-model fields, against :data:`MINIBATCH_META`."""
    validate(meta, MINIBATCH_META, directory / META_FILE)
    return meta


def minibatch_volume(meta: dict) -> float | None:
    """The stochastic model's objective: its cut over the sampled minibatches divided by their count, an unbiased
    estimate of the rows one minibatch SpMM moves (partition/stochastic.py); None for any other model."""
    samples = meta.get("shp_samples")
    km1 = meta.get("partition_info", {}).get("km1_reported")
    return km1 / samples if meta.get("model") == "stochastic" and samples and km1 is not None else None


def graph_source(options: GraphOptions) -> dict:
    """How a graph was read, as meta.json's ``graph`` object records it."""
    return {"spec": options.spec, "symmetrize": options.symmetrize, "feature_norm": options.feature_norm,
            "random_features_seed": options.seed if options.features else None}


# ---- writing -------------------------------------------------------------

def input_paths(spec: str | None, *more: str | Path | None) -> list[Path]:
    """The files a run reads (a graph spec that names a path, a parts file): never to be replaced."""
    paths = [Path(spec)] if spec and not spec.startswith("synthetic:") else []
    return paths + [Path(p) for p in more if p is not None]


def check_output(out: str | Path, force: bool, inputs: list[Path] | None = None) -> Path:
    """Refuse an output that is not free, not an earlier partition, or (without ``force``) any earlier one.

    Never the working directory, one of its parents, or an input (:mod:`distgcn.io.safe_io`).
    """
    return check_directory_target(Path(out), PARTITION, force=force, inputs=inputs or [])


def write_directory(out: Path, fields: dict, parts: np.ndarray, shards: Iterable[Shard], info: dict, metrics: dict,
                    source: dict, vertex_order: str, progress: Progress, *, force: bool = False,
                    inputs: list[Path] | None = None) -> dict:
    """Write the directory of a partitioned, measured and cut graph; return its meta.json contents.

    ``fields``: :func:`graph_fields` of the graph and its Â (numbers: the graph itself may be gone).
    ``shards`` are every rank's, in rank order; meta.json records the partition id and graph fingerprint
    they carry. ``info`` is what the partitioning model reported, ``metrics`` its communication metrics
    (``partition/metrics.py``), ``source`` how the graph was read (:func:`graph_source`). The directory is
    built under a temporary name next to ``out`` and renamed into place; the caller has checked ``out``
    with :func:`check_output` (with the same ``force`` and ``inputs``: the check is repeated before an
    old directory is replaced).
    """
    nparts = int(metrics["parts"])
    with staging_directory(out) as staging:
        write_parts(staging, parts)
        entries = []
        identity: tuple[str, str] | None = None
        with progress.phase("writing shards", total=nparts) as phase:
            for shard in shards:
                identity = identity or (shard.partition_id, shard.graph_fingerprint)
                if (shard.rank, shard.nparts, shard.partition_id, shard.graph_fingerprint) != \
                        (len(entries), nparts, *identity):
                    raise ValueError(f"shard of rank {shard.rank} is not rank {len(entries)}'s of the same "
                                     f"partition into {nparts} parts")
                entries.append(write_shard(staging, shard, progress))
                del shard  # else it is held while the next one is cut: two shards in memory instead of one
                phase.advance()
        if identity is None or len(entries) != nparts:
            raise ValueError(f"{len(entries)} shards for {nparts} parts")
        meta = directory_meta(staging, fields, *identity, info, metrics, source, vertex_order, entries)
        finish_directory(staging, out, meta, force=force, inputs=inputs)
    progress.info(f"wrote {out} ({nparts} shards)")
    return meta


STAGING_OWNER = ".distgcn-staging"
"""A staging directory's first file: the host and process that write it (removed before the rename into place)."""


_staging_lock = threading.Lock()
"""Held while a staging directory stops being this process's: its removal, or its owner file's before the rename."""
_staging_cleanups: dict[Path, int] = {}
"""This process's staging directories, each with its key among the stop-signal cleanups."""


@contextmanager
def writing_partition(out: Path) -> Iterator[None]:
    """Word a failure of the environment while the partition for ``out`` is written (a full disk, a quota) as
    bad input naming ``out``: the error of a write often names no file, or only the hidden staging one.
    The caller removes the staging directory (:func:`staging_directory` does)."""
    try:
        yield
    except OSError as exc:
        if not is_environment_error(exc):
            raise
        raise InputError(f"cannot write the partition directory ({describe_os_error(exc)})", path=out) from None


@contextmanager
def staging_directory(out: Path) -> Iterator[Path]:
    """A new directory next to ``out``, where its contents are written before it is renamed into place;
    removed if the block fails or is stopped by a signal, kept if it ends normally.

    First removes the staging directories of ``out`` that killed runs left
    behind (:func:`remove_abandoned_staging`): at 10^8 edges each holds GBs.
    A stop signal between making the directory and writing its owner file is
    raised only once both are done, here, where the cleanup sees it. Until
    :func:`finish_directory` renames it into place or :func:`remove_staging`
    removes it, a job's abort on a stop signal removes it too
    (:func:`distgcn.runtime.signals.add_cleanup`). A failure of the environment in the
    block is an InputError naming ``out`` (:func:`writing_partition`).
    """
    remove_abandoned_staging(out)
    staging: Path | None = None
    try:
        with writing_partition(out):
            with signals.stops_deferred():
                staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
                umask = os.umask(0)
                os.umask(umask)
                staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should be an ordinary one
                owner = {"host": socket.gethostname(), "pid": os.getpid()}
                (staging / STAGING_OWNER).write_text(json.dumps(owner) + "\n")
                _staging_cleanups[staging] = signals.add_cleanup(functools.partial(_remove_if_ours, staging))
            yield staging
    except BaseException:
        if staging is not None:
            remove_staging(staging)
        raise


def remove_staging(staging: Path) -> None:
    """Delete a staging directory of this process (what a removal cut short leaves, a later run removes)."""
    key = _staging_cleanups.pop(staging, None)
    if key is not None:
        signals.remove_cleanup(key)
    with _staging_lock:
        _remove_owner_file_last(staging)


def _remove_if_ours(staging: Path) -> None:
    """The stop-signal cleanup of ``staging``: delete it if its owner file still names this process (else
    :func:`finish_directory` has taken it over, to rename it into place)."""
    with _staging_lock:
        try:
            owner = json.loads((staging / STAGING_OWNER).read_text())
        except (OSError, ValueError):
            return
        if owner == {"host": socket.gethostname(), "pid": os.getpid()}:
            _remove_owner_file_last(staging)


def _remove_owner_file_last(staging: Path) -> None:
    """Delete ``staging``, its owner file last: a removal cut short (a peer's abort, a SIGKILL) leaves a directory
    that :func:`remove_abandoned_staging` still recognises."""
    try:
        entries = [entry for entry in staging.iterdir() if entry.name != STAGING_OWNER]
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    try:
        if [entry.name for entry in staging.iterdir()] in ([], [STAGING_OWNER]):
            (staging / STAGING_OWNER).unlink(missing_ok=True)
            staging.rmdir()
    except OSError:
        pass


def remove_abandoned_staging(out: Path) -> None:
    """Delete the staging directories of ``out`` whose writer is gone, saying so on stderr.

    Only a directory named as :func:`staging_directory` names them, holding its
    owner file, written on this host by a process that no longer exists (a
    SIGKILL, a node's OOM killer) is removed. Anything else, a staging
    directory of another host or of a live run included, is left alone. So is
    an old partition that a swap into ``out`` renamed aside
    (:func:`distgcn.io.safe_io.replace_directory`) and was killed before it
    deleted it: it is removed once the new one is in place at ``out``, else it
    is the only copy and stays.
    """
    if out.is_dir() and not out.is_symlink():
        remove_abandoned(out.parent, aside_pattern(out), "an old partition directory", accept=_holds_partition_files)
    for candidate in sorted(out.parent.glob(f".{glob.escape(out.name)}.*")):
        owner_file = candidate / STAGING_OWNER
        if candidate.is_symlink() or not candidate.is_dir() or not owner_file.is_file():
            continue
        try:
            owner = json.loads(owner_file.read_text())
            host, pid = owner["host"], int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
        if pid <= 0 or host != socket.gethostname() or process_exists(pid):
            continue
        why = f"a staging directory left by an interrupted run (process {pid} on this host has ended)"
        try:
            shutil.rmtree(candidate)
        except OSError as exc:
            print(f"distgcn: could not remove {candidate}, {why}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            continue
        print(f"distgcn: removed {candidate}: {why}", file=sys.stderr, flush=True)


def _holds_partition_files(path: Path) -> bool:
    """A directory that holds nothing but files ``partition`` writes (what is left of an old partition)."""
    try:
        return path.is_dir() and all(PARTITION_FILE.match(entry.name) for entry in path.iterdir())
    except OSError:
        return False


def write_parts(directory: Path, parts: np.ndarray) -> None:
    np.save(directory / PARTS_FILE, parts.astype(np.int64))


def write_shard(directory: Path, shard: Shard, progress: Progress) -> dict:
    """Write one shard into the (staging) directory; return its entry of meta.json's ``shards``."""
    name = shard_filename(shard.rank)
    checksum = shard.save(directory / name)
    progress.detail(f"{name}: {shard.n_owned} owned rows, {shard.n_halo} halo rows")
    return {"rank": shard.rank, "file": name, "sha256": checksum, "n_owned": shard.n_owned, "n_halo": shard.n_halo}


def graph_fields(graph: Graph, a_hat: sp.csr_matrix) -> dict:
    """What meta.json's ``graph`` records of the graph itself (its fingerprint aside); no features are 0 columns."""
    features = 0 if graph.features is None else int(graph.features.shape[1])
    return {"name": graph.name, "n": graph.num_vertices, "edges": graph.num_edges, "nnz": int(a_hat.nnz),
            "features": features, "classes": graph.num_classes}


def directory_meta(staging: Path, fields: dict, pid: str, fingerprint: str, info: dict, metrics: dict, source: dict,
                   vertex_order: str, entries: list[dict]) -> dict:
    """meta.json's contents for a staging directory that holds parts.npy and the shards of ``entries``.

    ``fields``: :func:`graph_fields`; ``pid`` and ``fingerprint``: what the shards carry.
    """
    return {
        "format_version": META_VERSION,
        "partition_id": pid,
        "graph": {
            "spec": source["spec"],
            "name": fields["name"],
            "fingerprint": fingerprint,
            "n": fields["n"],
            "edges": fields["edges"],
            "nnz": fields["nnz"],
            "features": fields["features"],
            "classes": fields["classes"],
            "symmetrize": source["symmetrize"],
            "feature_norm": source["feature_norm"],
            "random_features_seed": source["random_features_seed"],
        },
        "parts": int(metrics["parts"]),
        "vertex_order": vertex_order,
        "model": info.get("model"),
        "partitioner": info.get("partitioner"),
        "preset": info.get("preset"),
        "epsilon": info.get("epsilon"),
        "seed": info.get("seed"),
        "sampler": info.get("sampler"),
        "shp_samples": info.get("shp", {}).get("samples"),
        "partition_s": info["partition_s"],
        "partition_info": info,
        "tool_versions": {**info.get("versions", {}), "python": platform.python_version()},
        **metrics,
        "parts_sha256": file_sha256(staging / PARTS_FILE),
        "shards": entries,
    }


def finish_directory(staging: Path, out: Path, meta: dict, *, force: bool = False,
                     inputs: list[Path] | None = None) -> None:
    """Write meta.json last, then rename the complete staging directory to ``out`` (replacing an old one)."""
    (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    with _staging_lock:  # from here on, no stop-signal cleanup removes it
        (staging / STAGING_OWNER).unlink(missing_ok=True)
        key = _staging_cleanups.pop(staging, None)
        if key is not None:
            signals.remove_cleanup(key)
    replace_directory(staging, out, PARTITION, force=force, inputs=inputs or [])


# ---- reading -------------------------------------------------------------

def read_meta(directory: Path) -> dict:
    """meta.json of a partition directory, validated against :data:`META`."""
    path = directory / META_FILE
    if not path.is_file() and not path.is_symlink():
        failure = lookup_failure(directory)
        if failure is not None:
            raise InputError(f"cannot read the partition directory ({failure})", path=directory)
        raise InputError(f"not a partition directory (no {META_FILE})", path=directory)
    _member(directory, META_FILE, "partition metadata")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read partition metadata ({exc})", path=path) from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits, nested too deeply
        raise InputError(f"cannot read partition metadata ({json_problem(exc)})", path=path) from None
    return validate_meta(meta, path)


def _member(directory: Path, name: str, what: str) -> Path:
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


def verify_parts_file(directory: Path, meta: dict) -> None:
    """parts.npy against meta.json's ``parts_sha256`` (directories written before it have none to check)."""
    if "parts_sha256" not in meta:
        return
    path = _member(directory, PARTS_FILE, "part vector")
    try:
        found = file_sha256(path)
    except OSError as exc:
        raise InputError(f"cannot read the part vector ({exc.strerror or exc})", path=path) from None
    if found != meta["parts_sha256"]:
        raise InputError(f"part vector does not match meta.json (sha256 {found[:12]}..., meta.json records "
                         f"{meta['parts_sha256'][:12]}...): it was changed after partitioning", path=path)


def load_listed_shard(directory: Path, meta: dict, rank: int) -> Shard:
    """Rank ``rank``'s shard, checked against its entry in meta.json and its plan checked, before any use.

    Whether the plans of all ranks agree is a question across ranks (:func:`distgcn.shard.distribute.load_own_shard`).
    """
    entry = meta["shards"][rank]
    path = _member(directory, entry["file"], f"shard of rank {rank} (shards[{rank}].file in meta.json)")
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
    _check_plan(shard)
    return shard


def _check_plan(shard: Shard) -> None:
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
