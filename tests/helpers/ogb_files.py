"""Small OGB datasets in the binary variant, as the ``ogb`` package writes them, for the tests that read them on
ranks (tests/data/test_rank_graph.py, tests/shard/test_write_on_ranks.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def write_ogb_binary(directory: Path, seed: int, n: int = 130, compressed: bool = True, column_major: bool = False,
                     training: bool = True) -> Path:
    """An OGB dataset in the binary variant (raw/data.npz, raw/node-label.npz, split/time/*.csv.gz), as the ogb
    package writes it: unknown labels (NaN) and vertices without an edge included; ``training=False``: the
    edges alone."""
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, n - 5, size=(2, 700))  # the last 5 vertices have no edge
    if column_major:
        edge_index = np.asfortranarray(edge_index)
    labels = rng.integers(0, 4, size=(n, 1)).astype(np.float32)
    labels[rng.choice(n, 9, replace=False)] = np.nan
    arrays = {"edge_index": edge_index, "num_nodes_list": np.array([n]), "num_edges_list": np.array([700]),
              "node_year": np.full((n, 1), 2020)}
    if training:
        arrays["node_feat"] = rng.standard_normal((n, 6)).astype(np.float32)
    save = np.savez_compressed if compressed else np.savez
    (directory / "raw").mkdir(parents=True)
    save(directory / "raw" / "data.npz", **arrays)
    if not training:
        return directory
    save(directory / "raw" / "node-label.npz", node_label=labels)
    order = rng.permutation(n)
    for part, ids in zip(("train", "valid", "test"), np.split(order, [60, 90])):
        (directory / "split" / "time").mkdir(parents=True, exist_ok=True)
        (directory / "split" / "time" / f"{part}.csv.gz").write_bytes(
            gzip.compress("".join(f"{v}\n" for v in np.sort(ids)).encode()))
    return directory
