"""Timing for the kernel benchmarks run as scripts from this folder (``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(call: Callable[[], object], repeats: int) -> float:
    """Milliseconds: the median of ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def median_of_round_medians(call: Callable[[], object], repeats: int, rounds: int) -> float:
    """Milliseconds: the median over ``rounds`` of each round's median of ``repeats`` calls, as
    benchmarks/spmm_kernels.py times its kernels (a round slowed by another process moves one sample)."""
    return statistics.median(median_ms(call, repeats) for _ in range(rounds))
