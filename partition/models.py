"""Partitioning models: which rank owns each row of Â (1D row partition).

Every model returns an int64 array ``parts`` of length n with values in
``[0, nparts)``; rank ``p`` owns rows ``{v : parts[v] == p}`` of Â and H.

* ``random``      -- a seeded random permutation dealt round-robin (part sizes differ by <= 1);
* ``contiguous``  -- balanced blocks of consecutive vertex ids;
* ``graph``       -- METIS or KaMinPar edge-cut partition of the symmetrised graph of Â;
* ``hypergraph``  -- km1 partition of the column-net hypergraph of Â (exact volume model);
* ``stochastic``  -- km1 partition of the column nets of sampled minibatch subgraphs (SHP);
* ``external``    -- a part file computed elsewhere.

:func:`compute_parts` dispatches by name and returns the provenance for meta.json.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from importlib import metadata
from pathlib import Path
from typing import ContextManager

import numpy as np
import scipy.sparse as sp

from distgcn.config import (
    DISTRIBUTED_PARTITIONERS,
    EPSILON,
    PARTITION_MODELS,
    VERTEX_WEIGHT,
    PartitionerConfig,
)
from distgcn.errors import InputError
from distgcn.io.digests import file_sha256
from distgcn.partitioning import kaminpar_graph
from distgcn.partitioning.external import external_parts
from distgcn.partitioning.hypergraph import (  # noqa: F401 (re-export)
    DEFAULT_PARTITIONER,
    DEFAULT_PRESET,
    HYPERGRAPH_PARTITIONERS,
    hypergraph_parts,
)
from distgcn.partitioning.weights import vertex_weights

GIL_HOLDING_MODELS = frozenset({"graph", "hypergraph", "stochastic"})
"""Models whose partitioner (METIS, KaMinPar, Mt-KaHyPar, KaHyPar) runs as one C call that keeps the GIL until it
returns: their phase ticks from a process (distgcn.runtime.progress.Phase.outside_the_gil), as no thread of ours can run."""

__all__ = [
    "random_parts",
    "contiguous_parts",
    "graph_parts",
    "hypergraph_parts",
    "external_parts",
    "symmetric_graph",
    "graph_partitioner",
    "check_partitioner",
    "compute_parts",
    "run_model",
]


def _check_n_nparts(n: int, nparts: int) -> None:
    if isinstance(nparts, bool) or int(nparts) != nparts:
        raise InputError(f"the number of parts must be an integer, got {nparts!r}")
    if nparts < 1:
        raise InputError(f"the number of parts must be at least 1, got {nparts}")
    if nparts > n:
        raise InputError(f"cannot split {n} vertices into {nparts} non-empty parts (need nparts <= n)")


def _check_matrix(a_hat) -> int:
    if not sp.issparse(a_hat) or a_hat.ndim != 2 or a_hat.shape[0] != a_hat.shape[1]:
        raise InputError("the normalized adjacency must be a square scipy sparse matrix")
    return int(a_hat.shape[0])


def _check_epsilon(epsilon: float) -> None:
    if not (epsilon > 0) or not np.isfinite(epsilon):
        raise InputError(f"epsilon (allowed imbalance) must be > 0, got {epsilon}")


# ---------------------------------------------------------------------------
# trivial models
# ---------------------------------------------------------------------------


def random_parts(n: int, nparts: int, seed: int = 0) -> np.ndarray:
    """Random balanced partition: vertex ``perm[i]`` goes to part ``i % nparts``."""
    _check_n_nparts(n, nparts)
    perm = np.random.default_rng(seed).permutation(n)
    parts = np.empty(n, dtype=np.int64)
    parts[perm] = np.arange(n, dtype=np.int64) % nparts
    return parts


def contiguous_parts(n: int, nparts: int) -> np.ndarray:
    """Vertex ``i`` goes to part ``floor(i * nparts / n)``: blocks whose sizes differ by <= 1."""
    _check_n_nparts(n, nparts)
    return (np.arange(n, dtype=np.int64) * nparts) // n


# ---------------------------------------------------------------------------
# graph model (METIS or KaMinPar)
# ---------------------------------------------------------------------------

GRAPH_PARTITIONERS = ("metis", "kaminpar")
KAMINPAR_MIN_NNZ = 10_000_000
"""From this many nonzeros of Â the graph model runs KaMinPar unless told otherwise (docs/partitioning.md)."""


def symmetric_graph(a_hat: sp.spmatrix) -> sp.csr_matrix:
    """Pattern of A ∪ Aᵀ without self loops, int8 values, sorted indices."""
    a = a_hat.tocsr()
    n = a.shape[0]
    if not np.all(a.data):  # a stored zero is no nonzero (np.all of no entries is True)
        a = a.copy()
        a.eliminate_zeros()
    pat = sp.csr_matrix((np.ones(a.nnz, dtype=np.int8), a.indices, a.indptr), shape=(n, n))
    sym = (pat + pat.T).tocsr()
    sym.setdiag(0)
    sym.eliminate_zeros()
    sym.data[:] = 1
    sym.sort_indices()
    return sym


def graph_partitioner(partitioner: str | None, nnz: int) -> str:
    """The graph model's tool: the one named, else KaMinPar from :data:`KAMINPAR_MIN_NNZ` nonzeros of Â, else METIS."""
    if partitioner is None:
        return "kaminpar" if nnz >= KAMINPAR_MIN_NNZ else "metis"
    name = partitioner.lower()
    if name not in GRAPH_PARTITIONERS:
        raise InputError(f"unknown graph partitioner '{partitioner}': expected {' or '.join(GRAPH_PARTITIONERS)}")
    return name


def graph_parts(a_hat: sp.spmatrix, nparts: int, epsilon: float = EPSILON, seed: int = 0,
                vertex_weight: str = VERTEX_WEIGHT, *, partitioner: str | None = None, preset: str | None = None,
                threads: int | None = None, return_info: bool = False):
    """k-way edge-cut partition of the undirected graph of ``a_hat`` by METIS or KaMinPar.

    ``partitioner`` None picks by size (:func:`graph_partitioner`). Vertex
    weights: :func:`distgcn.partitioning.weights.vertex_weights` (default: nonzeros of
    the row of Â, the work of the row in the SpMM), unit edge costs; every
    part's weight stays within about ``(1 + epsilon)`` times the average
    (METIS: ``ufactor = int(1000 * epsilon)``). ``preset`` and ``threads``
    are KaMinPar's (:func:`distgcn.partitioning.kaminpar_graph.kaminpar_parts`); METIS
    runs on one thread and has no presets. Returns int64 part ids; with
    ``return_info`` also the settings for meta.json.
    """
    n = _check_matrix(a_hat)
    _check_n_nparts(n, nparts)
    _check_epsilon(epsilon)
    tool = graph_partitioner(partitioner, a_hat.nnz)
    if preset is not None:
        _check_graph_preset(partitioner, preset)
    info: dict = {"partitioner": tool, "objective": "cut"}
    if nparts == 1:
        parts = np.zeros(n, dtype=np.int64)
    elif tool == "kaminpar":
        sym = symmetric_graph(a_hat)
        graph = kaminpar_graph.load_graph(sym.indptr, sym.indices, vertex_weights(a_hat, vertex_weight))
        del sym  # KaMinPar holds its own copy
        parts, extra = kaminpar_graph.kaminpar_parts(graph, nparts, epsilon=epsilon, seed=seed, threads=threads,
                                                     preset=preset)
        info.update(extra)
    else:
        parts = _metis_parts(a_hat, nparts, epsilon, seed, vertex_weight)
        info["ufactor"] = _ufactor(epsilon)
    return (parts, info) if return_info else parts


PTSCOTCH_PRESETS = {"default": 0x0, "quality": 0x1, "speed": 0x2, "balance": 0x4, "scalability": 0x10}
"""PT-Scotch's strategy flags (scotch.h: SCOTCH_STRATDEFAULT, ...QUALITY, ...SPEED, ...BALANCE, ...SCALABILITY)."""


def _check_graph_preset(partitioner: str | None, preset: str) -> None:
    """A preset names a KaMinPar context, so it comes with ``--partitioner kaminpar`` (METIS has none), or
    PT-Scotch's strategy flags."""
    if (partitioner or "").lower() == "ptscotch":
        if preset not in PTSCOTCH_PRESETS:
            raise InputError(f"--preset {preset}: PT-Scotch's presets are {', '.join(PTSCOTCH_PRESETS)}")
        return
    if (partitioner or "").lower() != "kaminpar":
        raise InputError(f"--preset {preset}: the graph model's presets are KaMinPar's; add --partitioner kaminpar "
                         "(METIS has none)")
    kaminpar_graph.kaminpar_preset(preset)


def _ufactor(epsilon: float) -> int:
    return max(1, int(round(epsilon * 1000)))


def _metis_parts(a_hat: sp.spmatrix, nparts: int, epsilon: float, seed: int, vertex_weight: str) -> np.ndarray:
    import pymetis

    n = int(a_hat.shape[0])
    sym = symmetric_graph(a_hat)
    idx = pymetis.zero_copy_dtype()
    xadj = sym.indptr.astype(idx, copy=False)
    adjncy = sym.indices.astype(idx, copy=False)
    del sym
    vweights = vertex_weights(a_hat, vertex_weight).astype(idx)
    options = pymetis.Options(seed=int(seed), ufactor=_ufactor(epsilon))
    # k-way for every k: its ufactor is the documented bound on the final
    # partition (recursive bisection applies it per bisection level).
    _, membership = pymetis.part_graph(
        int(nparts), pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
        recursive=False, options=options)
    parts = np.asarray(membership, dtype=np.int64)
    if parts.shape != (n,):
        raise RuntimeError("METIS returned a partition of the wrong length")
    return parts


# ---------------------------------------------------------------------------
# dispatcher
# ---------------------------------------------------------------------------


MODEL_PARTITIONERS = {"graph": GRAPH_PARTITIONERS, "hypergraph": HYPERGRAPH_PARTITIONERS,
                      "stochastic": HYPERGRAPH_PARTITIONERS}
"""The tools ``--partitioner`` may name for each model in one process; the other models run none."""
DISTRIBUTED_SERVES = {"parmetis": ("graph",), "ptscotch": ("graph",), "zoltan": ("graph", "hypergraph")}
"""The models each distributed partitioner (``config.DISTRIBUTED_PARTITIONERS``) serves, on MPI ranks."""


def check_partitioner(model: str, partitioner: str | None, preset: str | None = None) -> None:
    """Refuse a ``--partitioner`` the model cannot use, or a graph-model preset without KaMinPar, before any load."""
    if model == "graph" and preset is not None:
        _check_graph_preset(partitioner, preset)
    if partitioner is None or model not in PARTITION_MODELS:
        return
    if partitioner.lower() in DISTRIBUTED_SERVES:
        served = DISTRIBUTED_SERVES[partitioner.lower()]
        if model not in served:
            raise InputError(f"--partitioner {partitioner}: it partitions --model {' and '.join(served)} (on MPI "
                             f"ranks), not the {model} model")
        return
    allowed = MODEL_PARTITIONERS.get(model, ())
    if partitioner.lower() in allowed:
        return
    users = [name for name, tools in MODEL_PARTITIONERS.items() if partitioner.lower() in tools]
    uses = f"uses {' or '.join(allowed)}" if allowed else "runs no partitioner"
    where = f" ({partitioner} partitions --model {' and '.join(users)})" if users else ""
    raise InputError(f"--partitioner {partitioner}: the {model} model {uses}{where}")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def compute_parts(model: str, a_hat: sp.spmatrix, nparts: int, *, vcycles: int | None = None, shp: dict | None = None,
                  while_tool_runs: Callable[[], ContextManager[object]] = nullcontext,
                  **settings: object) -> tuple[np.ndarray, dict]:
    """:func:`run_model` with the settings as keywords: the fields of :class:`distgcn.config.PartitionerConfig`
    (their defaults where not given), and ``shp`` = {shp_epsilon, shp_delta, shp_samples} for the stochastic
    model's sample count."""
    config = PartitionerConfig(model=model, **(shp or {}), **settings)  # type: ignore[arg-type]
    return run_model(config, a_hat, nparts, vcycles=vcycles, while_tool_runs=while_tool_runs)


GRAPH_FREE_MODELS = ("random", "contiguous", "external")
"""The models whose part vector depends on the vertex count only: every rank can compute it alone."""


def graph_free_parts(config: PartitionerConfig, n: int, nparts: int, info: dict) -> np.ndarray:
    """The part vector of a model of :data:`GRAPH_FREE_MODELS` for n vertices; ``info`` gains what it reports."""
    model = (config.model or "").lower()
    if model == "random":
        info.update(seed=int(config.seed), partitioner="numpy.random.default_rng")
        return random_parts(n, nparts, config.seed)
    if model == "contiguous":
        return contiguous_parts(n, nparts)
    if config.parts_file is None:
        raise InputError("the external model needs a part file (parts_file)")
    parts = external_parts(config.parts_file, n, nparts)
    info.update(parts_file=str(config.parts_file), parts_file_sha256=file_sha256(Path(config.parts_file)))
    return parts


def start_model(config: PartitionerConfig, n: int, nparts: int) -> tuple[str, dict, dict]:
    """Check ``config`` for n vertices and ``nparts`` parts; return the model's name, the start of its ``info``
    and of the tools' versions (:func:`run_model`'s)."""
    model = (config.model or "").lower()
    _check_n_nparts(n, nparts)
    check_partitioner(model, config.partitioner, config.preset)
    sampler, shp = config.sampler, config.shp
    if model != "stochastic" and (sampler is not None or any(v is not None for v in (shp or {}).values())):
        what = "--sampler" if sampler is not None else "--shp-epsilon, --shp-delta and --shp-samples"
        raise InputError(f"{what}: only --model stochastic samples subgraphs, not the {model or 'unnamed'} model")
    if config.vertex_weight != VERTEX_WEIGHT and model not in ("graph", "hypergraph", "stochastic"):
        raise InputError(f"--vertex-weight: the {model or 'unnamed'} model balances vertex counts, not weights")
    info: dict = {"model": model, "nparts": int(nparts), "epsilon": None, "seed": None,
                  "partitioner": None, "preset": None}
    return model, info, {"numpy": np.__version__, "scipy": _version("scipy")}


def run_model(config: PartitionerConfig, a_hat: sp.spmatrix, nparts: int, *, vcycles: int | None = None,
              while_tool_runs: Callable[[], ContextManager[object]] = nullcontext) -> tuple[np.ndarray, dict]:
    """Run the model ``config`` names; return ``(parts, info)`` with ``info`` ready for meta.json.

    ``info`` holds model, partitioner, preset, epsilon, seed, nparts,
    partition_s (wall seconds of the partitioning call) and the versions of
    the tools involved. ``config.threads`` and ``vcycles`` tune Mt-KaHyPar (see
    :func:`distgcn.partitioning.hypergraph.hypergraph_parts`). The stochastic model needs
    ``config.sampler`` (a :class:`distgcn.config.SamplerSpec`) and takes ``config.shp``
    (see :mod:`distgcn.partitioning.stochastic`).
    ``config.vertex_weight`` is what the graph, hypergraph and stochastic models balance
    (:func:`distgcn.partitioning.weights.vertex_weights`). The hypergraph model enters ``while_tool_runs()`` around
    Mt-KaHyPar's or KaHyPar's own run, when nothing of Â is needed (:class:`distgcn.shard.spill.Spill`).
    """
    epsilon, seed, partitioner, preset = config.epsilon, config.seed, config.partitioner, config.preset
    threads, sampler, shp = config.threads, config.sampler, config.shp
    vertex_weight = config.vertex_weight
    n = _check_matrix(a_hat)
    model, info, versions = start_model(config, n, nparts)
    if (partitioner or "").lower() in DISTRIBUTED_PARTITIONERS:
        raise InputError(f"--partitioner {partitioner} partitions on the ranks of an MPI job, each holding its "
                         f"share of the graph: run mpiexec -n {nparts} distgcn partition ... (docs/scale.md)")
    t0 = time.perf_counter()
    if model in GRAPH_FREE_MODELS:
        parts = graph_free_parts(config, n, nparts, info)
    elif model == "graph":
        parts, extra = graph_parts(a_hat, nparts, epsilon=epsilon, seed=seed, vertex_weight=vertex_weight,
                                   partitioner=partitioner, preset=preset, threads=threads, return_info=True)
        info.update(epsilon=float(epsilon), seed=int(seed), vertex_weight=vertex_weight, **extra)
        package = "pymetis" if extra["partitioner"] == "metis" else "kaminpar"
        versions[package] = _version(package)
    elif model == "hypergraph":
        _check_epsilon(epsilon)
        partitioner = (partitioner or DEFAULT_PARTITIONER).lower()
        parts, extra = hypergraph_parts(a_hat, nparts, epsilon=epsilon, seed=seed,
                                        partitioner=partitioner, preset=preset,
                                        threads=threads, vcycles=vcycles, return_info=True,
                                        vertex_weight=vertex_weight, while_tool_runs=while_tool_runs)
        info.update(epsilon=float(epsilon), seed=int(seed), vertex_weight=vertex_weight)
        extra = dict(extra)
        tool_version = extra.pop("version", None)
        info.update(extra)
        versions[partitioner] = tool_version or _version(partitioner)
    elif model == "stochastic":
        if sampler is None:
            raise InputError("the stochastic model needs a sampler (--sampler and --batch-size)")
        _check_epsilon(epsilon)
        from distgcn.partitioning.stochastic import stochastic_parts

        partitioner = (partitioner or DEFAULT_PARTITIONER).lower()
        counts = {name: value for name, value in shp.items() if value is not None}
        parts, extra = stochastic_parts(a_hat, nparts, sampler, **counts, epsilon=epsilon, seed=seed,
                                        partitioner=partitioner, preset=preset, threads=threads, vcycles=vcycles,
                                        vertex_weight=vertex_weight)
        info.update(epsilon=float(epsilon), seed=int(seed), sampler=sampler.as_dict(), vertex_weight=vertex_weight)
        extra = dict(extra)
        tool_version = extra.pop("version", None)
        info.update(extra)
        if nparts > 1:
            versions[partitioner] = tool_version or _version(partitioner)
    else:
        raise InputError(f"unknown partitioning model '{model}': expected one of {', '.join(PARTITION_MODELS)}")
    info["partition_s"] = time.perf_counter() - t0
    info["versions"] = versions
    return parts, info

