"""``distgcn partition``: partition a graph offline and write the partition directory.

The directory is the hand-off to the runtime (one on-disk format):

- ``meta.json``: graph fingerprint and sizes, model, partitioner, preset,
  epsilon, seed, partition time, tool versions, the exact communication
  metrics, the partition id, and each shard's file name and checksum;
- ``parts.npy``: the part vector, one int per vertex of the loaded graph;
- ``shard-RRRRR.npz``: one file per rank (see :mod:`distgcn.shard`).

The directory is written under a temporary name and renamed at the end, so
a failed or interrupted run never leaves a half-written partition; an
existing directory is replaced only if it is an earlier partition and
``--force`` asks for it (:mod:`distgcn.safe_io`).
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

from distgcn.distribute import META_FILE, PARTS_FILE, file_sha256, shard_filename
from distgcn.graph import Graph
from distgcn.prepare import GraphOptions, prepare_graph
from distgcn.progress import NORMAL, QUIET, VERBOSE, Progress
from distgcn.safe_io import PARTITION, check_directory_target, replace_directory
from distgcn.config import SamplerSpec

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
    inputs = input_paths(options.spec, parts_file)
    out = check_output(out, force, inputs)  # fail before the long work, not after
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
    return save_partition(out, graph, a_hat, parts, info, metrics, graph_source(options), progress, vertex_order,
                          force=force, inputs=inputs)


def graph_source(options: GraphOptions) -> dict:
    """How a graph was read, as meta.json's ``graph`` object records it."""
    return {"spec": options.spec, "symmetrize": options.symmetrize, "feature_norm": options.feature_norm,
            "random_features_seed": options.seed if options.features else None}


def input_paths(spec: str | None, *more: str | Path | None) -> list[Path]:
    """The files a run reads (a graph spec that names a path, a parts file): never to be replaced."""
    paths = [Path(spec)] if spec and not spec.startswith("synthetic:") else []
    return paths + [Path(p) for p in more if p is not None]


def check_output(out: str | Path, force: bool, inputs: list[Path] | None = None) -> Path:
    """Refuse an output that is not free, not an earlier partition, or (without ``force``) any earlier one.

    Never the working directory, one of its parents, or an input (:mod:`distgcn.safe_io`).
    """
    return check_directory_target(Path(out), PARTITION, force=force, inputs=inputs or [])


def save_partition(out: Path, graph: Graph, a_hat: sp.csr_matrix, parts: np.ndarray, info: dict, metrics: dict,
                   source: dict, progress: Progress, vertex_order: str = "rcm", *, force: bool = False,
                   inputs: list[Path] | None = None) -> dict:
    """Write the directory of a graph already partitioned and measured; return its meta.json contents.

    ``source`` says how the graph was read (``spec``, ``symmetrize``, ``feature_norm``,
    ``random_features_seed``); the caller has checked ``out`` with :func:`check_output` (with the same
    ``force`` and ``inputs``: the check is repeated before an old directory is replaced).
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
            "parts_sha256": file_sha256(staging / PARTS_FILE),
            "shards": shards,
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        replace_directory(staging, out, PARTITION, force=force, inputs=inputs or [])
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress.info(f"wrote {out} ({nparts} shards)")
    return meta
