"""The matrix the SpMM kernel benchmarks run as scripts from this folder multiply (``python benchmarks/NAME.py``)."""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency


def rcm_adjacency(graph: str, symmetrize: bool) -> sp.csr_matrix:
    """Â of ``graph`` in float32, its rows and columns in reverse Cuthill-McKee order (the order #15's roofline
    target names), each row's indices sorted."""
    a = normalized_adjacency(load_graph(graph, symmetrize=symmetrize).adj, dtype=np.float32)
    order = reverse_cuthill_mckee((abs(a) + abs(a.T)).tocsr(), symmetric_mode=True)
    a = a[order][:, order].tocsr()
    a.sort_indices()
    return a


def product_arguments(description: str, threads: int = 1) -> argparse.ArgumentParser:
    """The options every script here that times products of one graph's RCM matrix takes; add the script's own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--graph", required=True)
    parser.add_argument("--symmetrize", action="store_true")
    parser.add_argument("--widths", default="16,64")
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def rcm_matrix_on_threads(args: argparse.Namespace) -> sp.csr_matrix:
    """torch's (and so the kernels') thread count set from ``args``, and ``args.graph``'s Â in RCM order."""
    import torch  # imported by the caller after its allocator choice, as train does

    torch.set_num_threads(args.threads)
    return rcm_adjacency(args.graph, args.symmetrize)
