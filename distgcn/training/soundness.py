"""Warnings for a training run that will finish but whose numbers cannot be read as they look.

Each is one line that says what is wrong and what to do; rank 0 prints them before training starts
(:func:`distgcn.training.pipeline.run`). They refuse nothing: a test on a laptop may oversubscribe on purpose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from distgcn.kernels import PRODUCTS

__all__ = ["NodeUse", "NodeVerdict", "contention", "judge", "node_record", "one_thread_kernel", "own_load_bound",
           "random_labels"]


LOAD_WINDOW_S = 60.0
"""The 1-minute load average's time constant: the kernel's exponential average of the run queue."""
LOAD_SAMPLE_S = 5.0
"""How often the kernel samples the run queue for the load average."""
LOAD_MARGIN = 0.5
"""Other processes' load beyond the CPUs this job leaves free that makes a node busy: half a CPU's worth, above
the background an idle node shows (daemons, a shell)."""


@dataclass(frozen=True)
class NodeUse:
    """What one rank saw of its node: gathered from every rank, judged on rank 0 (:func:`judge`)."""

    host: str
    cpus: tuple[int, ...]
    """The CPUs this rank may run on (its affinity)."""
    node_cpus: int
    """All of the node's CPUs: the load average counts the tasks on every one of them."""
    threads: int
    """This rank's compute threads."""
    load: float | None
    """The node's 1-minute load average, read as the run started (before the graph was loaded); None: unknown."""
    age_s: float | None
    """How long this rank's process had run when ``load`` was read; None: unknown."""


@dataclass(frozen=True)
class NodeVerdict:
    """One node of the job: its ranks' threads against the cores they may use, and other processes' load."""

    host: str
    ranks: int
    threads: int
    """The most compute threads of one of its ranks."""
    cores: int
    """The CPUs its ranks may run on together (the union of their affinities)."""
    bound_cores: int | None
    """The fewest CPUs one of its ranks may run on, where that is fewer than the rank's threads; else None."""
    node_cpus: int
    load: float | None
    other_load: float | None
    """``load`` less the most this job can have added to it (:func:`own_load_bound`), at least 0; None: unknown."""

    @property
    def demand(self) -> int:
        """Threads this job runs on the node: ranks × threads."""
        return self.ranks * self.threads

    @property
    def oversubscribed(self) -> bool:
        """More of this job's threads than the cores they may run on: each waits for a core some of the time."""
        return self.demand > self.cores or self.bound_cores is not None

    @property
    def busy(self) -> bool | None:
        """Other processes run more tasks than the node's CPUs this job leaves free (by :data:`LOAD_MARGIN`), so
        this job's threads share CPUs with them; None without a load average."""
        if self.other_load is None:
            return None
        return self.other_load > max(0, self.node_cpus - self.demand) + LOAD_MARGIN


def own_load_bound(demand: int, age_s: float | None) -> float:
    """The most a job of ``demand`` threads, started ``age_s`` seconds ago, can have added to the 1-minute load
    average: the kernel's average of the run queue, sampled every 5 s, moves towards what was added as
    1 - exp(-t / 60); ``age_s`` unknown: all of ``demand``."""
    if age_s is None:
        return float(demand)
    return demand * -math.expm1(-(age_s + LOAD_SAMPLE_S) / LOAD_WINDOW_S)


def judge(nodes: list[NodeUse]) -> list[NodeVerdict]:
    """Each node of the job once, in the order of its first rank (``nodes``: every rank's view).

    The load is the highest its ranks read, less the most this job can have added by the oldest rank's age: what
    is left was other processes' (a lower estimate: the job may have added less).
    """
    by_host: dict[str, list[NodeUse]] = {}
    for node in nodes:
        by_host.setdefault(node.host, []).append(node)
    verdicts = []
    for host, seen in by_host.items():
        ranks, threads = len(seen), max(node.threads for node in seen)
        cores = len(set().union(*(node.cpus for node in seen)))
        bound = [len(node.cpus) for node in seen if node.threads > len(node.cpus)]
        loads = [node.load for node in seen if node.load is not None]
        other = None
        if loads:
            ages = [node.age_s for node in seen]
            age = None if None in ages else max(age for age in ages if age is not None)
            other = max(0.0, max(loads) - own_load_bound(ranks * threads, age))
        verdicts.append(NodeVerdict(host, ranks, threads, cores, min(bound) if bound else None,
                                    max(node.node_cpus for node in seen), max(loads) if loads else None, other))
    return verdicts


def node_record(nodes: list[NodeUse], device: str) -> dict[str, Any]:
    """What the metrics file's run header records of the job's nodes beside rank 0's ranks and cores: rank 0's
    threads, its node's load average and the other processes' share of it, and the verdicts over every node
    (None on a GPU, whose ranks compute on the GPU rather than on the node's cores; ``busy`` None also where no
    node has a load average)."""
    verdicts = judge(nodes)
    first = verdicts[0]  # rank 0's node: nodes are judged in the order of their first rank
    busy = [verdict.busy for verdict in verdicts if verdict.busy is not None]
    cpu = device == "cpu"
    return {"threads_per_rank": nodes[0].threads,
            "load_average": None if first.load is None else round(first.load, 2),
            "other_load": None if first.other_load is None else round(first.other_load, 2),
            "oversubscribed": any(verdict.oversubscribed for verdict in verdicts) if cpu else None,
            "busy": (any(busy) if busy else None) if cpu else None}


def contention(nodes: list[NodeUse]) -> str | None:
    """One warning line when the job's threads will wait for a core on some node: more threads than the cores
    they may use (oversubscribed), or a node whose other processes leave too few CPUs free (busy). The node
    worst off is named; an epoch's time then includes that wait, and the comm share counts it as communication.
    """
    verdicts = judge(nodes)

    def where(verdict: NodeVerdict, alike: list[NodeVerdict]) -> str:
        return "this node" if len(verdicts) == 1 else \
            f"node {verdict.host} ({len(alike)} of the job's {len(verdicts)} nodes are so)"

    over = [v for v in verdicts if v.oversubscribed]
    if over:
        v = max(sorted(over, key=lambda v: v.host), key=lambda v: v.demand / v.cores)
        if v.bound_cores is not None and v.demand <= v.cores:
            return (f"warning: a rank on {where(v, over)} may run on {_count(v.bound_cores, 'core')} (its CPU "
                    f"affinity) but has {v.threads} threads, so they wait for a core and epoch times include that "
                    f"wait: use --threads {v.bound_cores}, or bind each rank to {v.threads} cores")
        fix = (f"use --threads {v.cores // v.ranks} (cores per rank)" if v.ranks <= v.cores else
               f"launch at most {v.cores} ranks per node (mpiexec -n {v.cores}) with --threads 1, or spread them "
               f"over more nodes")
        return (f"warning: {_count(v.ranks, 'rank')} × {_count(v.threads, 'thread')} share {v.cores} cores on "
                f"{where(v, over)}, so threads wait for a core: epoch times include that wait and the comm share "
                f"measures it, not communication: {fix}")
    busy = [v for v in verdicts if v.busy]
    if busy:
        v = max(sorted(busy, key=lambda v: v.host), key=lambda v: (v.other_load or 0.0) / v.node_cpus)
        fits = int((v.node_cpus - (v.other_load or 0.0)) // v.ranks)
        fix = f", or with --threads {fits}" if 1 <= fits < v.threads else ""
        return (f"warning: {where(v, busy)} is busy: its load average is {v.load:.2f}, of which other processes "
                f"hold about {v.other_load:.1f} of its {v.node_cpus} CPUs beside this run's "
                f"{_count(v.ranks, 'rank')} × {_count(v.threads, 'thread')}, so epoch times include waiting for "
                f"a CPU and vary from run to run: time this run on an idle node{fix}")
    return None


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def random_labels(spec: str | None, drawn: bool, classes: int) -> str | None:
    """Labels drawn at random carry no signal: accuracy stays at chance, whatever the run does.

    ``spec`` is the graph's spec (None for a graph given in memory), ``drawn`` whether random features and labels
    were asked for (``--features F --classes C``), ``classes`` the label count. An R-MAT graph has labels only as
    random ones; an SBM's are its communities, which the structure predicts (docs/data.md).
    """
    if spec is None or spec.startswith("synthetic:sbm") or not (drawn or spec.startswith("synthetic:rmat")):
        return None
    return (f"warning: the labels are random ({classes} classes drawn for an unlabelled graph, as the paper does), "
            f"so accuracy stays near chance (1/{classes}): read this run for time and communication, not accuracy")


def one_thread_kernel(kernel: str, threads: int) -> str | None:
    """A product kernel that runs on one thread (scipy's): with more, only the dense products use them, and an
    epoch's time reads as if the rank's cores did not help."""
    if PRODUCTS[kernel].parallel or threads <= 1:
        return None
    return (f"warning: --spmm-kernel {kernel} multiplies the sparse blocks on one thread, so --threads {threads} "
            f"speeds up only the dense products: use --spmm-kernel auto (our loops, on every thread) unless you "
            f"want {kernel}'s products")
