"""The initial weights against the definition of Glorot & Bengio's uniform scheme, per layer shape.

Glorot & Bengio (2010), eq. 16: W ~ U[-b, b] with b = sqrt(6 / (fan_in + fan_out)),
so E[W] = 0 and Var[W] = b² / 3; biases start at zero (Kipf & Welling's GCN).
Every statistical check is a bound that a correct draw of N values breaks with
probability well below 1e-3 (the seeds are fixed, so the outcome is too), and
a slip of the usual kinds (fan_in · fan_out, 2 in place of 6, U[0, b]) breaks by far.
``torch.nn.init.xavier_uniform_``, the same scheme implemented elsewhere, draws
from the same distribution by a two-sample test.
"""

from __future__ import annotations

from math import sqrt

import numpy as np
import pytest
import torch
from scipy import stats

from distgcn.model import GCN

WIDTHS = [[1433, 16, 7], [64, 256, 256, 8]]
"""Cora's shapes, and a deeper model whose layers all differ."""
P_MIN = 1e-3
Z = 4.0
"""Standard errors allowed for a mean or a variance: a correct draw exceeds it with probability ~6e-5."""


def _layers():
    for widths in WIDTHS:
        model = GCN(widths, dropout=0.5, seed=11, dtype=torch.float64)
        for layer, (weight, bias) in enumerate(zip(model.weights, model.biases)):
            yield pytest.param(widths[layer], widths[layer + 1], weight.detach().numpy(), bias.detach().numpy(),
                               id=f"{widths}-layer{layer}")


LAYERS = list(_layers())


@pytest.mark.parametrize("fan_in, fan_out, weight, bias", LAYERS)
def test_weights_follow_glorot_uniform(fan_in, fan_out, weight, bias):
    bound = sqrt(6.0 / (fan_in + fan_out))
    w = weight.ravel()
    n = w.size
    assert weight.shape == (fan_in, fan_out)
    assert np.all(bias == 0)
    assert np.abs(w).max() <= bound
    # P(max |w| < b (1 - t)) = (1 - t)^N, which is e^-10 for t = 10 / N
    assert np.abs(w).max() >= bound * (1 - 10 / n)
    assert abs(w.mean()) <= Z * bound / sqrt(3 * n)
    # Var[w²] = E[w⁴] - E[w²]² = b⁴/5 - b⁴/9 = 4 b⁴ / 45
    assert abs(w.var() - bound**2 / 3) <= Z * bound**2 * sqrt(4 / 45 / n)
    assert stats.kstest(w, stats.uniform(loc=-bound, scale=2 * bound).cdf).pvalue > P_MIN


@pytest.mark.parametrize("fan_in, fan_out, weight, bias", LAYERS)
def test_weights_are_distributed_as_torch_xavier_uniform(fan_in, fan_out, weight, bias):
    """torch stores a linear layer's weight as (fan_out, fan_in) and reads its fans from that shape."""
    generator = torch.Generator().manual_seed(fan_in * 1000 + fan_out)
    theirs = torch.empty(fan_out, fan_in, dtype=torch.float64)
    torch.nn.init.xavier_uniform_(theirs, generator=generator)
    theirs = theirs.numpy().ravel()
    assert np.abs(weight).max() <= np.abs(theirs).max() * (1 + 10 / theirs.size)
    assert stats.ks_2samp(weight.ravel(), theirs).pvalue > P_MIN
