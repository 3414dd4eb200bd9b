"""Column-net hypergraph model of Â, partitioned with Mt-KaHyPar or KaHyPar.

One vertex per row of Â (weight = nonzeros of the row), one net per column
``j`` whose pins are the rows with a nonzero in column ``j`` (the diagonal
included). With that model the connectivity-minus-one objective (km1) of a
partition equals, exactly, the total number of H rows the SpMM ``Â H`` sends
(Çatalyürek & Aykanat, 1999; the VLDB'23 paper, Section 4).

The pins of net ``j`` are column ``j`` of the CSC form of Â, so the
hypergraph is built as the CSC ``indptr``/``indices`` arrays of the nonzero
pattern, with no other copy of the structure on the Python side. Mt-KaHyPar
reads it from an hMETIS file that numpy writes (:mod:`distgcn.partitioning.hmetis`), not
from one Python sequence per net (issue #16).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import ContextManager

import numpy as np
import scipy.sparse as sp

from distgcn.config import EPSILON, VERTEX_WEIGHT
from distgcn.errors import InputError
from distgcn.io.leftovers import scratch_directory
from distgcn.partitioning.hmetis import write_hmetis
from distgcn.partitioning.tbb_memory import release_pooled_memory
from distgcn.partitioning.weights import vertex_weights
from distgcn.runtime.progress import c_stdout_to_ticker
from distgcn.runtime.threads import available_cores

__all__ = [
    "MTKAHYPAR_PRESETS",
    "KAHYPAR_PRESETS",
    "DEFAULT_PARTITIONER",
    "DEFAULT_PRESET",
    "HYPERGRAPH_PARTITIONERS",
    "column_net",
    "hypergraph_parts",
    "partition_nets",
    "resolve_auto",
]

DEFAULT_PARTITIONER = "mtkahypar"
HYPERGRAPH_PARTITIONERS = ("mtkahypar", "kahypar")
# The project default for Mt-KaHyPar is "auto": QUALITY followed by 5 V-cycles
# for nparts <= AUTO_VCYCLES_MAX_PARTS on at most AUTO_VCYCLES_MAX_PINS pins, the
# tool's DEFAULT preset otherwise.
# Measured on soc-Slashdot0902, epsilon = 0.03, 2 cores (benchmarks/partitioners.py,
# benchmarks/results/partitioners-2026-11-22.json): the plain DEFAULT, QUALITY and
# HIGHEST_QUALITY presets missed the project's P=2 target (km1 <= 28,078); QUALITY
# + 3 V-cycles met it in 5 of 6 runs, QUALITY + 5 V-cycles in 5 of 5 (15-30 s).
# V-cycles cost 3-5x the time for ~1-2% at P=16..64 and did not finish P=512 in
# 400 s, hence DEFAULT for large P (P=512: 40 s).
DEFAULT_PRESET = {"mtkahypar": "auto", "kahypar": "fast"}
AUTO_VCYCLES_MAX_PARTS = 8
# Above this many pins (nonzeros of Â) auto is DEFAULT whatever nparts (issue #16). Measured on R-MAT graphs
# (edge_factor 12), P = 4, 2 threads, CPU seconds of the partition call (benchmarks/hypergraph_scale.py): QUALITY
# + 5 V-cycles costs 2.9x DEFAULT for 1.8% less km1 at 7.9*10^5 pins (23.8 vs 8.1 s), and DEFAULT alone grows a
# little faster than the pins (8.1, 51, 279 s at 0.79, 3.2, 13.2 * 10^6). The limit keeps the V-cycles to about a
# minute on 2 cores (soc-Slashdot0902, 1.09*10^6 pins, keeps them: 15-30 s).
AUTO_VCYCLES_MAX_PINS = 2_000_000
# Above AUTO_VCYCLES_MAX_PINS pins, nets of more than LARGE_NET_MEANS times the mean net size (and at least
# LARGE_NET_MIN_PINS pins) are left out of the partitioner's input (partition_nets' max_net_pins): a net of s pins
# adds at most k - 1 to km1 however it is cut, while the partitioner's work on it grows with s. R-MAT hubs are
# such nets. Measured on scale 20 (13.2*10^6 pins, mean 12.6; P = 4, DEFAULT preset, 2 threads, idle machine;
# exact km1 of the whole hypergraph; docs/scale.md): every net kept 87.2 s, 632,344, 1.97 GB peak; cap 1,000
# pins (22% of the pins left out) 71.2 s, 632,296, 1.65 GB; cap 300 (40%) 49.4 s, 635,747, 1.41 GB; cap 100
# (60%) 30.3-30.5 s, 637,827-637,947 (+0.9%), 1.19-1.29 GB; cap 50 (70%) 27.4 s, 636,445, 1.19 GB. An hour
# later: every net kept 145.6 s, 638,185; cap 50 50.4-52.8 s, 631,529-633,382 (the times vary that much).
LARGE_NET_MEANS = 4
LARGE_NET_MIN_PINS = 50

# name -> (Mt-KaHyPar PresetType, number of V-cycles after the first partition)
MTKAHYPAR_PRESETS = {
    "auto": None,  # resolved by resolve_auto()
    "default": ("DEFAULT", 0),
    "quality": ("QUALITY", 0),
    "quality_v3": ("QUALITY", 3),
    "quality_v5": ("QUALITY", 5),
    "highest_quality": ("HIGHEST_QUALITY", 0),
    "deterministic": ("DETERMINISTIC", 0),
    "deterministic_quality": ("DETERMINISTIC_QUALITY", 0),
    "large_k": ("LARGE_K", 0),
}


def resolve_auto(nparts: int, num_pins: int) -> str:
    """The preset "auto" stands for: V-cycles where they pay and finish (few parts, a small hypergraph)."""
    small = nparts <= AUTO_VCYCLES_MAX_PARTS and num_pins <= AUTO_VCYCLES_MAX_PINS
    return "quality_v5" if small else "default"


KAHYPAR_PRESETS = {
    "fast": "kahypar_km1_fast.ini",
    "quality": "kahypar_km1_quality.ini",
}


def column_net(a_hat: sp.spmatrix, vertex_weight: str = VERTEX_WEIGHT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(net_indptr, pins, vertex_weights) of the column-net hypergraph of ``a_hat``.

    ``net_indptr``/``pins`` are the CSC ``indptr``/``indices`` of the nonzero
    pattern; ``vertex_weights`` are :func:`distgcn.partitioning.weights.vertex_weights`
    under ``vertex_weight`` (default: the nonzeros of each row, at least 1).
    """
    a = a_hat.tocsr()
    n = a.shape[0]
    if not np.all(a.data):  # a stored zero is no nonzero (np.all of no entries is True)
        a = a.copy()
        a.eliminate_zeros()
    # The pattern with 1-byte values: converting it to CSC costs ~5 bytes per
    # nonzero instead of copying the float values too.
    pattern = sp.csr_matrix((np.ones(a.nnz, dtype=np.int8), a.indices, a.indptr), shape=a.shape)
    csc = pattern.tocsc()
    csc.sort_indices()
    assert csc.indptr.shape[0] == n + 1
    return csc.indptr, csc.indices, vertex_weights(a, vertex_weight)


def _check_args(a_hat: sp.spmatrix, nparts: int, epsilon: float) -> int:
    if not sp.issparse(a_hat) or a_hat.ndim != 2 or a_hat.shape[0] != a_hat.shape[1]:
        raise InputError("the normalized adjacency must be a square scipy sparse matrix")
    n = int(a_hat.shape[0])
    if int(nparts) != nparts or nparts < 1:
        raise InputError(f"the number of parts must be an integer >= 1, got {nparts}")
    if nparts > n:
        raise InputError(f"cannot split {n} vertices into {nparts} non-empty parts (need nparts <= n)")
    if not (epsilon > 0) or not np.isfinite(epsilon):
        raise InputError(f"epsilon (allowed imbalance) must be > 0, got {epsilon}")
    return n


# ---------------------------------------------------------------------------
# Mt-KaHyPar
# ---------------------------------------------------------------------------

_MTK_LOCK = threading.Lock()
_MTK = None  # the process-wide Initializer: mtkahypar.initialize() may run only once
_MTK_THREADS = 0


def _mtkahypar(threads: int | None):
    """The process-wide Mt-KaHyPar initializer and the thread count it really uses.

    Mt-KaHyPar sets up its TBB thread pool once per process; a later request
    for another thread count cannot be honoured and gets the first one.
    """
    global _MTK, _MTK_THREADS
    import mtkahypar

    with _MTK_LOCK:
        if _MTK is None:
            nthreads = int(threads) if threads else available_cores()
            _MTK = mtkahypar.initialize(nthreads, False)
            _MTK_THREADS = nthreads
        return _MTK, _MTK_THREADS


@contextlib.contextmanager
def _scratch_directory() -> Iterator[str]:
    """A temporary directory under ``TMPDIR`` for the hypergraph file, or an InputError saying where to point it."""
    with contextlib.ExitStack() as stack:
        try:
            directory = stack.enter_context(scratch_directory("hmetis"))
        except OSError as err:
            raise InputError(f"cannot write the hypergraph file for Mt-KaHyPar in {tempfile.gettempdir()}: "
                             f"{err.strerror or err}; point TMPDIR at a directory with room") from err
        yield str(directory)


@dataclass(frozen=True)
class StagedNets:
    """The nets a partitioner will get, written to an hMETIS file; what the cap left out."""

    path: str
    num_vertices: int
    max_net_pins: int
    nets_left_out: int


def _stage_nets(directory: str, indptr: np.ndarray, pins: np.ndarray, weights: np.ndarray,
                net_weights: np.ndarray | None, max_net_pins: int | None) -> StagedNets:
    """Write the nets of at most ``max_net_pins`` pins (0: all) as an hMETIS file in ``directory``.

    Its arrays are this call's only: once it returns, the caller may free the pins before the tool runs.
    Mt-KaHyPar's reader drops single-pin nets, which never count in km1.
    """
    indptr, pins, net_weights, max_net_pins, left_out = _without_large_nets(indptr, pins, net_weights, max_net_pins)
    path = os.path.join(directory, "nets.hgr")
    try:
        write_hmetis(path, indptr, pins, weights, net_weights)
    except OSError as err:
        raise InputError(f"cannot write the hypergraph file for Mt-KaHyPar ({int(pins.shape[0])} pins, about "
                         f"{8 * int(pins.shape[0]) // 2**20 + 1} MiB) in {directory}: "
                         f"{err.strerror or err}; point TMPDIR at a directory with room") from err
    return StagedNets(path, int(weights.shape[0]), max_net_pins, left_out)


def _partition_mtkahypar(staged: StagedNets, nparts, epsilon, seed, resolved, threads, vcycles, while_tool_runs):
    """``resolved``: a preset name other than auto (resolved by the whole hypergraph's size).

    ``while_tool_runs`` is entered before the tool reads the file: from then on it needs nothing of the caller's.
    """
    import mtkahypar

    name, preset_vcycles = MTKAHYPAR_PRESETS[resolved]
    if not hasattr(mtkahypar.PresetType, name):
        raise InputError(f"Mt-KaHyPar {mtkahypar.__version__} has no preset {name}")
    vcycles = preset_vcycles if vcycles is None else int(vcycles)
    mtk, nthreads = _mtkahypar(threads)
    ctx = mtk.context_from_preset(getattr(mtkahypar.PresetType, name))
    ctx.set_partitioning_parameters(int(nparts), float(epsilon), mtkahypar.Objective.KM1)
    ctx.num_vcycles = vcycles
    ctx.logging = False
    mtkahypar.set_seed(int(seed))
    with while_tool_runs():
        hg = mtk.hypergraph_from_file(staged.path, ctx, mtkahypar.FileFormat.HMETIS)
        with c_stdout_to_ticker() as shown:  # its log names the step it is in: the progress line shows it
            ctx.logging = shown
            phg = hg.partition(ctx)
    parts = np.asarray(phg.get_partition(), dtype=np.int64)
    info = {"threads": nthreads, "vcycles": vcycles, "resolved_preset": resolved, "mtkahypar_preset": name,
            "km1_reported": int(phg.km1()), "version": _mtkahypar_version()}
    del phg, hg
    info["pooled_memory_released"] = release_pooled_memory(mtkahypar)
    return parts, info


def _mtkahypar_version() -> str:
    # the extension reports "dev"; the installed distribution knows better
    from importlib import metadata

    try:
        return metadata.version("mtkahypar")
    except metadata.PackageNotFoundError:  # pragma: no cover
        import mtkahypar

        return str(mtkahypar.__version__)


# ---------------------------------------------------------------------------
# KaHyPar
# ---------------------------------------------------------------------------


def _partition_kahypar(indptr, pins, weights, net_weights, nparts, epsilon, seed, preset):
    import kahypar

    fname = KAHYPAR_PRESETS.get(preset)
    if fname is None:
        raise InputError(f"unknown KaHyPar preset '{preset}': expected one of {', '.join(KAHYPAR_PRESETS)}")
    n = weights.shape[0]
    num_nets = indptr.shape[0] - 1
    # KaHyPar takes the index/pin vectors directly (copied once into C++ vectors).
    hg = kahypar.Hypergraph(n, num_nets, indptr, pins, int(nparts), net_weights, weights)
    ctx = kahypar.Context()
    ref = resources.files("partition") / "presets" / fname
    with resources.as_file(ref) as path:
        if not path.is_file():  # KaHyPar would keep its empty context and never return
            raise InputError("KaHyPar preset file missing from the installed package: reinstall distgcn", path=path)
        ctx.loadINIconfiguration(str(path))
    ctx.setK(int(nparts))
    ctx.setEpsilon(float(epsilon))
    ctx.setSeed(int(seed))
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    parts = np.fromiter((hg.blockID(v) for v in range(n)), dtype=np.int64, count=n)
    info = {"threads": 1, "km1_reported": int(kahypar.connectivityMinusOne(hg)),
            "version": getattr(kahypar, "__version__", "unknown"), "preset_file": fname}
    return parts, info


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------


def hypergraph_parts(
    a_hat: sp.spmatrix,
    nparts: int,
    epsilon: float = EPSILON,
    seed: int = 0,
    partitioner: str = DEFAULT_PARTITIONER,
    preset: str | None = None,
    *,
    threads: int | None = None,
    vcycles: int | None = None,
    return_info: bool = False,
    vertex_weight: str = VERTEX_WEIGHT,
    max_net_pins: int | None = None,
    while_tool_runs: Callable[[], ContextManager[object]] = contextlib.nullcontext,
):
    """Partition the rows of ``a_hat`` minimising km1 of the column-net hypergraph.

    ``epsilon`` bounds every part's weight (:func:`distgcn.partitioning.weights.vertex_weights`
    of its rows under ``vertex_weight``; default: their nonzeros) by
    ``(1 + epsilon) * ceil(total / nparts)`` -- the guarantee both tools give.
    ``partitioner`` is ``"mtkahypar"`` (presets: the tool's default, quality,
    highest_quality, deterministic, deterministic_quality, large_k;
    quality_v3 / quality_v5 = quality + 3 / 5 V-cycles; and auto, the project
    default = quality_v5 for nparts <= 8 on at most 2*10^6 pins, default
    otherwise: :func:`resolve_auto`) or ``"kahypar"``
    (presets: fast, quality -- the ini files in ``partition/presets``).
    ``threads`` and ``vcycles`` (override of the preset's V-cycles) apply to
    Mt-KaHyPar only; threads default to all cores. Only the deterministic
    presets, and KaHyPar, give the same partition for the same seed.
    ``max_net_pins`` and ``while_tool_runs``: as for :func:`partition_nets` (large graphs leave their largest
    nets out; the column-net arrays are freed before the tool runs).
    Returns int64 part ids; with ``return_info`` also a dict.
    """
    n = _check_args(a_hat, nparts, epsilon)
    partitioner, preset = _resolve_tool(partitioner, preset, vcycles)
    if nparts == 1:
        parts = np.zeros(n, dtype=np.int64)
        info = {"partitioner": partitioner, "preset": preset, "objective": "km1", "threads": 0, "km1_reported": 0}
    else:
        parts, info = _partition_nets(lambda: column_net(a_hat, vertex_weight), int(a_hat.count_nonzero()), nparts,
                                      net_weights=None, epsilon=epsilon, seed=seed, partitioner=partitioner,
                                      preset=preset, threads=threads, vcycles=vcycles, max_net_pins=max_net_pins,
                                      while_tool_runs=while_tool_runs)
    return (parts, info) if return_info else parts


def large_net_pins(indptr: np.ndarray) -> int:
    """The size above which a net counts as large: LARGE_NET_MEANS times the mean, at least LARGE_NET_MIN_PINS."""
    nets = max(1, int(indptr.shape[0]) - 1)
    return max(LARGE_NET_MIN_PINS, math.ceil(LARGE_NET_MEANS * int(indptr[-1]) / nets))


def _without_large_nets(indptr: np.ndarray, pins: np.ndarray, net_weights: np.ndarray | None,
                        max_net_pins: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The nets of at most ``max_net_pins`` pins (all of them for 0; None: :func:`partition_nets`' default),
    their weights (default 1), the cap and how many nets were left out."""
    if net_weights is None:
        net_weights = np.ones(int(indptr.shape[0]) - 1, dtype=np.int64)
    if max_net_pins is None:
        max_net_pins = large_net_pins(indptr) if int(pins.shape[0]) > AUTO_VCYCLES_MAX_PINS else 0
    max_net_pins = int(max_net_pins)
    sizes = np.diff(indptr)
    kept = sizes <= max_net_pins
    if max_net_pins <= 0 or kept.all():
        return indptr, pins, net_weights, max_net_pins, 0
    kept_indptr = np.zeros(int(kept.sum()) + 1, dtype=np.int64)
    np.cumsum(sizes[kept], out=kept_indptr[1:])
    return kept_indptr, pins[np.repeat(kept, sizes)], net_weights[kept], max_net_pins, int((~kept).sum())


def _resolve_tool(partitioner: str | None, preset: str | None, vcycles: int | None) -> tuple[str, str]:
    """Checked (partitioner, preset) names, defaults filled in."""
    if vcycles is not None and (int(vcycles) != vcycles or vcycles < 0):
        raise InputError(f"vcycles must be a non-negative integer, got {vcycles}")
    partitioner = (partitioner or DEFAULT_PARTITIONER).lower()
    if partitioner not in DEFAULT_PRESET:
        raise InputError(f"unknown hypergraph partitioner '{partitioner}': expected mtkahypar or kahypar")
    preset = (preset or DEFAULT_PRESET[partitioner]).lower()
    known = MTKAHYPAR_PRESETS if partitioner == "mtkahypar" else KAHYPAR_PRESETS
    if preset not in known:
        raise InputError(f"unknown {partitioner} preset '{preset}': expected one of {', '.join(known)}")
    return partitioner, preset


def partition_nets(
    indptr: np.ndarray,
    pins: np.ndarray,
    weights: np.ndarray,
    nparts: int,
    *,
    net_weights: np.ndarray | None = None,
    epsilon: float = EPSILON,
    seed: int = 0,
    partitioner: str | None = DEFAULT_PARTITIONER,
    preset: str | None = None,
    threads: int | None = None,
    vcycles: int | None = None,
    max_net_pins: int | None = None,
    while_tool_runs: Callable[[], ContextManager[object]] = contextlib.nullcontext,
) -> tuple[np.ndarray, dict]:
    """km1 partition (nparts >= 2) of any hypergraph given as nets ``pins[indptr[i]:indptr[i+1]]``.

    Shared by the column-net model (unit net weights) and the stochastic model,
    whose merged duplicate nets carry their multiplicity as ``net_weights``.
    ``weights`` are the vertex weights; options as for :func:`hypergraph_parts`.
    Nets of more than ``max_net_pins`` pins are left out of the partitioner's
    input (each would add at most ``(nparts - 1) * weight`` to km1); None: those
    above :func:`large_net_pins` when there are more than :data:`AUTO_VCYCLES_MAX_PINS` pins; 0: none.
    ``info["km1_reported"]`` is then the km1 of the nets kept. ``while_tool_runs()`` is entered around the
    partitioner's own run, when it needs no array of the caller's (:mod:`distgcn.shard.spill` frees memory there).
    """
    return _partition_nets(lambda: (indptr, pins, weights), int(pins.shape[0]), nparts, net_weights=net_weights,
                           epsilon=epsilon, seed=seed, partitioner=partitioner, preset=preset, threads=threads,
                           vcycles=vcycles, max_net_pins=max_net_pins, while_tool_runs=while_tool_runs)


def _partition_nets(nets: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]], num_pins: int, nparts: int, *,
                    net_weights: np.ndarray | None, epsilon: float, seed: int, partitioner: str | None,
                    preset: str | None, threads: int | None, vcycles: int | None, max_net_pins: int | None,
                    while_tool_runs: Callable[[], ContextManager[object]]) -> tuple[np.ndarray, dict]:
    """:func:`partition_nets` of the nets ``nets()`` builds: built only where they are needed, so that with
    Mt-KaHyPar they are freed once written to its file, before it runs."""
    partitioner, preset = _resolve_tool(partitioner, preset, vcycles)
    info: dict = {"partitioner": partitioner, "preset": preset, "objective": "km1"}
    # the preset and the cap go by the whole hypergraph's size, not by what is left after the cap
    resolved = resolve_auto(nparts, num_pins) if preset == "auto" else preset
    if partitioner == "mtkahypar":
        with _scratch_directory() as directory:
            staged = _stage_nets(directory, *nets(), net_weights, max_net_pins)
            parts, extra = _partition_mtkahypar(staged, nparts, epsilon, seed, resolved, threads, vcycles,
                                                while_tool_runs)
        n, max_net_pins, left_out = staged.num_vertices, staged.max_net_pins, staged.nets_left_out
    else:
        indptr, pins, weights = nets()
        indptr, pins, net_weights, max_net_pins, left_out = _without_large_nets(indptr, pins, net_weights,
                                                                                max_net_pins)
        n = int(weights.shape[0])
        with while_tool_runs():
            parts, extra = _partition_kahypar(indptr, pins, weights, net_weights, nparts, epsilon, seed, preset)
    info.update(max_net_pins=max_net_pins, nets_left_out=left_out, **extra)
    if parts.shape != (n,) or (n and (parts.min() < 0 or parts.max() >= nparts)):
        raise RuntimeError(f"{partitioner} returned an invalid partition")
    return parts, info
