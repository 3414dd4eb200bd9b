"""Warnings for a training run that will finish but whose numbers cannot be read as they look.

Each is one line that says what is wrong and what to do; rank 0 prints them before training starts
(:func:`distgcn.training.pipeline.run`). They refuse nothing: a test on a laptop may oversubscribe on purpose.
"""

from __future__ import annotations

from distgcn.kernels import PRODUCTS

__all__ = ["oversubscribed", "random_labels", "one_thread_kernel"]


def oversubscribed(nodes: list[tuple[str, int, int]]) -> str | None:
    """More ranks than cores on a node: ranks then wait for a core, and the time an epoch line reports as
    waiting on communication is mostly that wait.

    ``nodes``: each rank's (host name, ranks on its node, the node's cores); the most crowded node is named.
    """
    by_host = {host: (ranks, cores) for host, ranks, cores in nodes}
    crowded = {host: (ranks, cores) for host, (ranks, cores) in by_host.items() if ranks > cores}
    if not crowded:
        return None
    host, (ranks, cores) = max(sorted(crowded.items()), key=lambda item: item[1][0] / max(1, item[1][1]))
    where = "this node" if len(by_host) == 1 else \
        f"node {host} ({len(crowded)} of the job's {len(by_host)} nodes have more ranks than cores)"
    return (f"warning: {ranks} ranks share {cores} cores on {where}, so each rank waits for a core and "
            f"the comm share measures that waiting, not communication: launch at most {cores} ranks per node "
            f"(mpiexec -n {cores}), or spread them over more nodes")


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
