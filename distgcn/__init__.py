"""Distributed full-graph GCN training; the Python API (docs/api.md) is importable from here.

The API's names are resolved on first use, so ``import distgcn`` (and every
command-line start) does not pay for scipy, torch or MPI until they are needed.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
"""The package's version: pyproject.toml reads it from here, ``distgcn --version`` prints it."""

_API = ("GraphOptions", "Partition", "RankOutputs", "SavedWeights", "TrainResult", "VertexRows", "default_transport",
        "from_networkx", "from_pyg", "from_scipy", "load_graph", "load_weights", "partition", "predict", "to_networkx",
        "to_scipy", "train")

__all__ = list(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        from distgcn import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
