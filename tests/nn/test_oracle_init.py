"""The initial weights against the definition of Glorot & Bengio's uniform scheme, per layer shape.

Glorot & Bengio (2010), eq. 16: W ~ U[-b, b] with b = sqrt(6 / (fan_in + fan_out)),
so E[W] = 0 and Var[W] = b² / 3; biases start at zero (Kipf & Welling's GCN).
Every statistical check is a bound that a correct draw of N values breaks with
probability well below 1e-3 (the seeds are fixed, so the outcome is too), and
a slip of the usual kinds (fan_in · fan_out, 2 in place of 6, U[0, b]) breaks by far.
``torch.nn.init.xavier_uniform_``, the same scheme implemented elsewhere, draws
from the same distribution by a two-sample test. Two tests pin the draw itself:
float32 weights are the float64 draw rounded, and a seed's weights never change.
"""

from __future__ import annotations

import hashlib
from math import sqrt

import numpy as np
import pytest
import torch
from scipy import stats

from distgcn.nn.model import GCN, glorot_weights

WIDTHS = [[1433, 16, 7], [64, 256, 256, 8]]
"""Cora's shapes, and a deeper model whose layers all differ."""
P_MIN = 1e-3
Z = 4.0
"""Standard errors allowed for a mean or a variance: a correct draw exceeds it with probability ~6e-5."""
LAYERS = [pytest.param(widths, layer, id=f"{widths}-layer{layer}") for widths in WIDTHS
          for layer in range(len(widths) - 1)]


def _layer(widths: list[int], layer: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(fan_in, fan_out, weight, bias) of one layer of a freshly built model (built in the test, not at
    collection, so that what is checked is the code under test now)."""
    model = GCN(widths, dropout=0.5, seed=11, dtype=torch.float64)
    return (widths[layer], widths[layer + 1], model.weights[layer].detach().numpy(),
            model.biases[layer].detach().numpy())


@pytest.mark.parametrize("widths, layer", LAYERS)
def test_weights_follow_glorot_uniform(widths, layer):
    fan_in, fan_out, weight, bias = _layer(widths, layer)
    bound = sqrt(6.0 / (fan_in + fan_out))
    w = weight.ravel()
    n = w.size
    assert weight.shape == (fan_in, fan_out) and weight.dtype == np.float64
    assert np.all(bias == 0)
    assert np.abs(w).max() <= bound
    # P(max |w| < b (1 - t)) = (1 - t)^N, which is e^-10 for t = 10 / N
    assert np.abs(w).max() >= bound * (1 - 10 / n)
    assert abs(w.mean()) <= Z * bound / sqrt(3 * n)
    # Var[w²] = E[w⁴] - E[w²]² = b⁴/5 - b⁴/9 = 4 b⁴ / 45
    assert abs(w.var() - bound**2 / 3) <= Z * bound**2 * sqrt(4 / 45 / n)
    assert stats.kstest(w, stats.uniform(loc=-bound, scale=2 * bound).cdf).pvalue > P_MIN


@pytest.mark.parametrize("widths, layer", LAYERS)
def test_weights_are_distributed_as_torch_xavier_uniform(widths, layer):
    """torch stores a linear layer's weight as (fan_out, fan_in) and reads its fans from that shape."""
    fan_in, fan_out, weight, _ = _layer(widths, layer)
    generator = torch.Generator().manual_seed(fan_in * 1000 + fan_out)
    theirs = torch.empty(fan_out, fan_in, dtype=torch.float64)
    torch.nn.init.xavier_uniform_(theirs, generator=generator)
    theirs = theirs.numpy().ravel()
    assert np.abs(weight).max() <= np.abs(theirs).max() * (1 + 10 / theirs.size)
    assert stats.ks_2samp(weight.ravel(), theirs).pvalue > P_MIN


def test_float32_weights_are_the_float64_draws_rounded():
    """The model's dtype changes the storage, not the draw: runs in float32 and float64 start from one model."""
    wide, narrow = (GCN(WIDTHS[1], dropout=0.5, seed=11, dtype=dtype) for dtype in (torch.float64, torch.float32))
    for w64, w32 in zip(wide.weights, narrow.weights, strict=True):
        assert w32.dtype == torch.float32
        torch.testing.assert_close(w32, w64.to(torch.float32), rtol=0, atol=0)


def test_initial_weights_are_pinned():
    """A seed names the same initial weights in every version, so results stay reproducible across releases."""
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in glorot_weights([5, 4, 3], 0, torch.float64)))
    assert digest.hexdigest() == "aaa55ad53dfd949aa79828b62f902f24b24240713a785be7b01a3cf30cb37031"
