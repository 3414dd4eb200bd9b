"""The ``emulated_cluster`` fixture: benchmarks/cluster/emulated_cluster.py's namespaces, two nodes, for a test
module; skipped with the reason where the machine cannot make them (not root, no namespaces)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "benchmarks" / "cluster" / "emulated_cluster.py"


def cluster_module():
    """benchmarks/cluster/emulated_cluster.py, imported by its path (benchmarks/ is not a package)."""
    if "emulated_cluster" not in sys.modules:
        spec = importlib.util.spec_from_file_location("emulated_cluster", SOURCE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["emulated_cluster"] = module
        spec.loader.exec_module(module)
    return sys.modules["emulated_cluster"]


@pytest.fixture(scope="module")
def emulated_cluster() -> Iterator:
    """Two node namespaces on one switch, links unshaped until a test sets a rate; removed after the module."""
    module = cluster_module()
    reason = module.missing_requirements()
    if reason:
        pytest.skip(reason)
    with module.EmulatedCluster(nodes=2, name="t") as cluster:
        yield cluster
