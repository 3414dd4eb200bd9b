"""``distgcn partition``: partition a graph offline and write the partition directory.

The directory is the hand-off to the runtime (one on-disk format):

- ``meta.json``: graph fingerprint and sizes, model, partitioner, preset,
  epsilon, seed, partition time, tool versions, the exact communication
  metrics, the partition id, and each shard's file name and checksum;
- ``parts.npy``: the part vector, one int per vertex of the loaded graph;
- ``shard-RRRRR.npz``: one file per rank (see :mod:`distgcn.shard`).

The directory is written under a temporary name and renamed at the end, so
a failed or interrupted run never leaves a half-written partition, and an
existing directory is never overwritten unless asked.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.distribute import META_FILE, shard_filename
from distgcn.errors import InputError
from distgcn.graph import Graph
from distgcn.prepare import GraphOptions, prepare_graph
from distgcn.progress import NORMAL, QUIET, VERBOSE, Progress
from distgcn.safe_io import prepare_output_dir
from distgcn.sampling.cli_options import SamplerSpec

from .metrics import partition_metrics
from .models import compute_parts
from .shards import iter_shards, partition_id

META_VERSION = 1


def write_partition(options: GraphOptions, out: str | Path, nparts: int, model: str, *, epsilon: float = 0.03,
                    seed: int = 0, partitioner: str | None = None, preset: str | None = None,
                    parts_file: str | None = None, force: bool = False, quiet: bool = False,
                    verbose: bool = False, sampler: SamplerSpec | None = None, shp: dict | None = None,
                    vertex_order: str = "rcm", vertex_weight: str = "nonzeros") -> dict:
    """Load, partition, measure and shard a graph; return the metadata written to meta.json.

    Progress goes to stderr (see :mod:`distgcn.progress`): none with ``quiet``, details with ``verbose``.
    ``sampler`` and ``shp`` configure the stochastic model (see :func:`partition.models.compute_parts`);
    ``vertex_order`` numbers each shard's rows (:func:`partition.shards.local_orders`);
    ``vertex_weight`` is what the partition balances (:func:`partition.weights.vertex_weights`).
    """
    out = check_output(out, force)  # fail before the long work, not after
    progress = Progress(QUIET if quiet else VERBOSE if verbose else NORMAL)
    with progress.phase(f"loading {options.spec}") as phase:
        graph, a_hat = prepare_graph(options)
        phase.finish(f"{graph.num_vertices} vertices, {a_hat.nnz} nonzeros in Â")
    with progress.phase(f"partitioning ({model}, P={nparts})") as phase:
        parts, info = compute_parts(model, a_hat, nparts, epsilon=epsilon, seed=seed, partitioner=partitioner,
                                    preset=preset, parts_file=parts_file, sampler=sampler, shp=shp,
                                    vertex_weight=vertex_weight)
        phase.finish(f"the partitioner took {info['partition_s']:.2f}s")
    progress.detail("partitioner: " + json.dumps({k: v for k, v in info.items() if k != "partition_s"}))
    with progress.phase("measuring communication") as phase:
        metrics = partition_metrics(a_hat, parts, nparts)
        phase.finish(f"volume {metrics['volume']['total']} rows, {metrics['messages']['total']} messages, "
                     f"imbalance {metrics['imbalance']:.3f}")
    return save_partition(out, graph, a_hat, parts, info, metrics, graph_source(options), progress, vertex_order)


def graph_source(options: GraphOptions) -> dict:
    """How a graph was read, as meta.json's ``graph`` object records it."""
    return {"spec": options.spec, "symmetrize": options.symmetrize, "feature_norm": options.feature_norm,
            "random_features_seed": options.seed if options.features else None}


def check_output(out: str | Path, force: bool) -> Path:
    """Refuse an output that is a file, a symlink, or (without ``force``) a non-empty directory."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError("output exists and is not a directory; refusing to replace it", path=out)
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError("output exists and is not an empty directory (pass --force to replace it)", path=out)
    prepare_output_dir(out.parent, what="parent directory of --out")
    return out


def save_partition(out: Path, graph: Graph, a_hat: sp.csr_matrix, parts: np.ndarray, info: dict, metrics: dict,
                   source: dict, progress: Progress, vertex_order: str = "rcm") -> dict:
    """Write the directory of a graph already partitioned and measured; return its meta.json contents.

    ``source`` says how the graph was read (``spec``, ``symmetrize``, ``feature_norm``,
    ``random_features_seed``); the caller has checked ``out`` with :func:`check_output`.
    """
    nparts = int(metrics["parts"])
    fingerprint = graph.fingerprint()
    pid = partition_id(fingerprint, parts, nparts)

    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should be an ordinary directory
    try:
        np.save(staging / "parts.npy", parts.astype(np.int64))
        shards = []
        with progress.phase("writing shards", total=nparts) as phase:
            for shard in iter_shards(graph, a_hat, parts, nparts, pid, vertex_order):
                name = shard_filename(shard.rank)
                checksum = shard.save(staging / name)
                shards.append({"rank": shard.rank, "file": name, "sha256": checksum,
                               "n_owned": shard.n_owned, "n_halo": shard.n_halo})
                progress.detail(f"{name}: {shard.n_owned} owned rows, {shard.n_halo} halo rows")
                phase.advance()
        meta = {
            "format_version": META_VERSION,
            "partition_id": pid,
            "graph": {
                "spec": source["spec"],
                "name": graph.name,
                "fingerprint": fingerprint,
                "n": graph.num_vertices,
                "edges": graph.num_edges,
                "nnz": int(a_hat.nnz),
                "features": int(graph.features.shape[1]),
                "classes": graph.num_classes,
                "symmetrize": source["symmetrize"],
                "feature_norm": source["feature_norm"],
                "random_features_seed": source["random_features_seed"],
            },
            "parts": nparts,
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
            "shards": shards,
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress.info(f"wrote {out} ({nparts} shards)")
    return meta
