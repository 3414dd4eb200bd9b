"""Grouping runs and partitions for comparisons: strong scaling, and partition models at equal P."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .inputs import Partition, Run, model_sort_key

Item = TypeVar("Item", Run, Partition)


@dataclass
class ScalingPoint:
    """Steady epoch time at one P, relative to the smallest P of its series."""

    ranks: int
    epoch_s: float
    speedup: float
    efficiency: float
    runs: int


def describe(graph: str | None, model: str | None = None, ranks: int | None = None) -> str:
    """A group's name for legends and tables; unknown parts say so."""
    parts = [graph or "unknown graph"]
    if model is not None:
        parts.append(model)
    if ranks is not None:
        parts.append(f"P={ranks}")
    return ", ".join(parts)


def scaling_series(runs: list[Run]) -> dict[tuple[str | None, str | None], list[ScalingPoint]]:
    """Runs of one graph and partition model at two or more P; several runs at one P are averaged."""
    groups: dict[tuple[str | None, str | None], dict[int, list[float]]] = {}
    for run in runs:
        if run.ranks is not None:
            groups.setdefault((run.graph, run.model), {}).setdefault(run.ranks, []).append(run.steady("epoch_s"))
    series = {}
    for key, by_ranks in groups.items():
        if len(by_ranks) < 2:
            continue
        ranks = sorted(by_ranks)
        times = {p: sum(by_ranks[p]) / len(by_ranks[p]) for p in ranks}
        p0, t0 = ranks[0], times[ranks[0]]
        series[key] = [ScalingPoint(p, times[p], t0 / times[p], t0 * p0 / (times[p] * p), len(by_ranks[p]))
                       for p in ranks]
    return series


def model_groups(items: list[Item]) -> dict[tuple[str | None, int], list[Item]]:
    """Items of one graph and P that differ in partition model (two models at least), in RP, GP, HP, SHP order."""
    groups: dict[tuple[str | None, int], list[Item]] = {}
    for item in items:
        if item.ranks is not None and item.model is not None:
            groups.setdefault((item.graph, item.ranks), []).append(item)
    return {key: sorted(group, key=lambda item: model_sort_key(item.model))
            for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
            if len({item.model for item in group}) >= 2}
