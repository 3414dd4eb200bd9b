"""``train --first-layer cached``: Â·X once at setup, then a local first layer.

Without dropout it is the same model as the exact mode (only the order of the
products differs), and it saves the first layer's exchange in every forward
pass (and the first layer's backward SpMM where the exact mode computes Â(XW)).
With dropout it is a different model, but still partition-independent.

The command line's pipeline runs on in-process ranks (threads); the real
mpiexec cases of the same pipeline are in tests/training/test_training.py and
tests/training/test_minibatch.py (the cached mode has no transport code of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_distgcn_in_process

SEED = 5


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> str:
    """A seeded random directed edge list (train --features/--classes give it data)."""
    rng = np.random.default_rng(21)
    src, dst = rng.integers(0, 120, 600), rng.integers(0, 120, 600)
    path = tmp_path_factory.mktemp("graphs") / "g.txt"
    path.write_text("".join(f"{s}\t{d}\n" for s, d in zip(src, dst) if s != d))
    return str(path)


def train(tmp_path: Path, graph: str, ranks: int, first_layer: str, hidden: str, dropout: str) -> list[dict]:
    """``distgcn train`` on ``ranks`` in-process ranks; its metrics records."""
    metrics = tmp_path / f"{first_layer}-{ranks}-{hidden}-{dropout}.jsonl"
    assert run_distgcn_in_process(["train", "--graph", graph, "--features", "8", "--classes", "3", "--partition",
                                   "random", "--dtype", "float64", "--epochs", "4", "--seed", str(SEED), "--hidden",
                                   hidden, "--dropout", dropout, "--first-layer", first_layer, "--metrics",
                                   str(metrics), "--quiet"], ranks) == [0] * ranks
    return [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize(("hidden", "fewer"), [("8", 2), ("4", 3)])
def test_cached_without_dropout_equals_exact_with_fewer_exchanges(tmp_path, graph, hidden, fewer, ranks):
    """8 -> 8: exact computes (ÂX)W, one exchange more per forward (train and eval); 8 -> 4: Â(XW), one more
    in the backward too."""
    exact = train(tmp_path, graph, ranks, "exact", hidden, "0")
    cached = train(tmp_path, graph, ranks, "cached", hidden, "0")
    np.testing.assert_allclose([r["loss"] for r in cached], [r["loss"] for r in exact], rtol=1e-10)
    for e, c in zip(exact, cached):
        assert e["spmm_exchanges"] - c["spmm_exchanges"] == fewer
        assert c["halo_rows"] * e["spmm_exchanges"] == e["halo_rows"] * c["spmm_exchanges"]  # same rows each
        assert c["train_acc"] == e["train_acc"]


def test_cached_with_dropout_is_partition_independent(tmp_path, graph):
    one = train(tmp_path, graph, 1, "cached", "8", "0.5")
    for ranks in (2, 3, 4):
        many = train(tmp_path, graph, ranks, "cached", "8", "0.5")
        np.testing.assert_allclose([r["loss"] for r in many], [r["loss"] for r in one], rtol=1e-10)
    exact = train(tmp_path, graph, 1, "exact", "8", "0.5")
    assert [r["loss"] for r in exact] != [r["loss"] for r in one]  # dropout after Â: another model
