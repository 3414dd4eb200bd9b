"""What the figures and tables show, computed apart from drawing: timings with their spread, the slowest rank's
split, strong scaling, groups of partition models, shared colour limits."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from distgcn.report.inputs import Partition, Run, describe, model_sort_key

__all__ = ["CONTENTION", "SPLIT_PARTS", "BalanceLimits", "ScalingPoint", "Timing", "balance_limits", "colour_limits",
           "describe", "model_groups", "scaling_series", "setting_groups", "timing"]

Item = TypeVar("Item", Run, Partition)

SPLIT_PARTS = (("compute_s", "compute"), ("comm_wait_s", "halo wait"), ("allreduce_s", "allreduce"))
"""The parts of an epoch's time, each recorded for the slowest rank as ``slowest_KEY``."""
CONTENTION = ("oversubscribed", "busy node")
"""The reasons a run's threads waited for a core (:attr:`distgcn.report.inputs.Run.contention`), in this order."""
REPEATS_SPREAD = "range over {n} repeats"
EPOCHS_SPREAD = "interquartile range over epochs"


@dataclass
class Timing:
    """The steady epoch time of one setting (one run, or repeats of it): median, spread, and its split."""

    median_s: float
    low_s: float
    high_s: float
    spread: str
    """What low..high is: the range of the repeats' medians, or one run's per-epoch interquartile range."""
    split_s: dict[str, float] | None
    """compute/halo wait/allreduce of the median, in the slowest rank's proportions: sums to ``median_s``.
    None when a run did not record the slowest rank's split."""
    repeat_medians_s: list[float]
    contention: list[str] | None
    """Why some run's threads waited for a core (:attr:`Run.contention`, over the runs); None if no run recorded
    it, empty if none did."""

    load_known: bool
    """Whether every run recorded its node's load (files older than the load average did not)."""

    @property
    def contended(self) -> bool | None:
        return None if self.contention is None else bool(self.contention)


def timing(runs: list[Run]) -> Timing:
    """Repeats of one setting: the median of their medians and their range; one run: its per-epoch quartiles.

    The split divides the median in the proportions the slowest rank of each epoch spent in each part,
    pooled over the steady epochs of every run: a split of one rank's own epoch, so it never exceeds it.
    """
    medians = [run.steady("epoch_s") for run in runs]
    if len(runs) > 1:
        median, low, high, spread = statistics.median(medians), min(medians), max(medians), \
            REPEATS_SPREAD.format(n=len(runs))
    else:
        epochs = runs[0].steady_series("epoch_s")
        median, (low, high), spread = medians[0], np.percentile(epochs, [25, 75]).tolist(), EPOCHS_SPREAD
    split = None
    if all(run.has_split for run in runs):
        total = sum(run.steady_series("epoch_s").sum() for run in runs)
        parts = {key: sum(run.steady_series(f"slowest_{key}").sum() for run in runs) for key, _ in SPLIT_PARTS}
        split = {key: median * part / total if total > 0 else 0.0 for key, part in parts.items()}
    known = [run.contention for run in runs if run.contention is not None]
    contention = [reason for reason in CONTENTION if any(reason in reasons for reasons in known)] if known else None
    return Timing(median, low, high, spread, split, medians, contention, all(run.busy is not None for run in runs))


def setting_groups(runs: list[Run]) -> dict[tuple[str | None, str | None, int | None], list[Run]]:
    """Runs of one graph, partition model and P: repeats of one setting, in input order."""
    groups: dict[tuple[str | None, str | None, int | None], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.graph, run.model, run.ranks), []).append(run)
    return groups


@dataclass
class ScalingPoint:
    """Steady epoch time at one P, relative to the smallest P of its series."""

    ranks: int
    timing: Timing
    speedup: float
    efficiency: float
    runs: int

    @property
    def epoch_s(self) -> float:
        return self.timing.median_s

    @property
    def above_ideal(self) -> bool:
        """Parallel efficiency above 1: faster than P times the smallest P can be, so the smallest P's time holds
        something else, mostly waiting for a core (threads beyond the cores, a busy node): a sign of contention,
        not a result."""
        return self.efficiency > 1.0 + EFFICIENCY_TOLERANCE


EFFICIENCY_TOLERANCE = 1e-9
"""An efficiency this close to 1 is 1: the smallest P's own is computed as t·p / (t·p)."""


def scaling_series(runs: list[Run]) -> dict[tuple[str | None, str | None], list[ScalingPoint]]:
    """Runs of one graph and partition model at two or more P; repeats at one P give a median and a spread.

    Runs on one rank (no partition, so no model) are the first point of every model's series of their graph.
    """
    series: dict[tuple[str | None, str | None], dict[int, list[Run]]] = {}
    single: dict[str | None, list[Run]] = {}
    for (graph, model, ranks), group in setting_groups(runs).items():
        if ranks == 1:
            single.setdefault(graph, []).extend(group)
        elif ranks is not None:
            series.setdefault((graph, model), {})[ranks] = group
    for graph, group in single.items():
        models = [key for key in series if key[0] == graph] or [(graph, None)]
        for key in models:
            series.setdefault(key, {})[1] = group
    result = {}
    for key, by_ranks in series.items():
        if len(by_ranks) < 2:
            continue
        ranks = sorted(by_ranks)
        timings = {p: timing(by_ranks[p]) for p in ranks}
        p0, t0 = ranks[0], timings[ranks[0]].median_s
        result[key] = [ScalingPoint(p, timings[p], t0 / timings[p].median_s, t0 * p0 / (timings[p].median_s * p),
                                    len(by_ranks[p])) for p in ranks]
    return result


def model_groups(items: list[Item]) -> dict[tuple[str | None, int], list[Item]]:
    """Items of one graph and P that differ in partition model (two models at least), in RP, GP, HP, SHP order."""
    groups: dict[tuple[str | None, int], list[Item]] = {}
    for item in items:
        if item.ranks is not None and item.model is not None:
            groups.setdefault((item.graph, item.ranks), []).append(item)
    return {key: sorted(group, key=lambda item: model_sort_key(item.model))
            for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
            if len({item.model for item in group}) >= 2}


def colour_limits(partitions: list[Partition]) -> dict[str | None, tuple[float, float]]:
    """One colour scale per graph for the communication matrices: 0 to the largest count any partition of that
    graph sends between two ranks, so that equal colours mean equal rows across the partitions compared."""
    limits: dict[str | None, tuple[float, float]] = {}
    for part in partitions:
        off_diagonal = part.comm[~np.eye(part.ranks, dtype=bool)]
        top = float(off_diagonal.max()) if off_diagonal.size else 0.0
        limits[part.graph] = (0.0, max(limits.get(part.graph, (0.0, 0.0))[1], top, 1.0))
    return limits


@dataclass(frozen=True)
class BalanceLimits:
    """The tops of the per-rank balance figures' axes for one graph (at least 1 each)."""

    volume: float
    """The most rows one rank sends or receives per SpMM, in any partition of the graph."""
    nonzeros: float
    """The most nonzeros of Â one rank owns, in any partition of the graph."""


def balance_limits(partitions: list[Partition]) -> dict[str | None, BalanceLimits]:
    """One pair of scales per graph for the balance figures, as :func:`colour_limits` for the matrices: partitions
    of one graph drawn to the same heights, so that a taller bar is more rows or nonzeros, not another scale."""
    limits: dict[str | None, BalanceLimits] = {}
    for part in partitions:
        volume = float(max(part.comm.sum(axis=1).max(initial=0), part.comm.sum(axis=0).max(initial=0)))
        nonzeros = float(part.nonzeros.max(initial=0))
        seen = limits.get(part.graph, BalanceLimits(1.0, 1.0))
        limits[part.graph] = BalanceLimits(max(seen.volume, volume), max(seen.nonzeros, nonzeros))
    return limits
