"""The keyed dropout mask: fixed by (seed, epoch, layer, global row, column), whatever the implementation."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from distgcn import dropout_kernel
from distgcn.dropout import dropout_key, keyed_dropout, keyed_keep_mask


def test_mask_is_pinned():
    """Speeding the mask up must not change it: runs and checkpoints of earlier versions rely on it."""
    mask = keyed_keep_mask(np.arange(100), 7, 0.3, dropout_key(1, 2, 3))
    digest = hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()
    assert digest == "b2f468357194d8fbc240f166518b9d1101744ef62fda152bc75f2b2600c6b982"


def test_a_row_mask_does_not_depend_on_the_other_rows():
    ids = np.random.default_rng(0).permutation(5000)[:900]
    key = dropout_key(7, 1, 0)
    whole = keyed_keep_mask(ids, 13, 0.5, key)
    np.testing.assert_array_equal(keyed_keep_mask(ids[::3], 13, 0.5, key), whole[::3])
    assert abs(whole.mean() - 0.5) < 0.02


def test_dropout_scales_kept_entries_and_backpropagates_the_mask():
    x = torch.randn(300, 9, dtype=torch.float64, requires_grad=True)
    ids = np.arange(1000, 1300)
    y = keyed_dropout(x, ids, 0.25, 11)
    keep = torch.from_numpy(keyed_keep_mask(ids, 9, 0.25, 11))
    torch.testing.assert_close(y, x.detach() * keep * (1 / 0.75), rtol=0, atol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, keep.double() * (1 / 0.75), rtol=0, atol=0)
    assert keyed_dropout(x, ids, 0.0, 11) is x


def test_entries_survive_independently_with_probability_one_minus_p():
    """Inverted dropout's definition (Srivastava et al., 2014), checked without the mask's code: each entry kept
    with probability 1 - p, independently of the others (every column and pair of columns), and scaled by
    1 / (1 - p) so that E[dropout(x)] = x. Bounds are 4 binomial standard errors."""
    rows, width = 20000, 7
    for p in (0.1, 0.5, 0.85):
        x = torch.ones(rows, width, dtype=torch.float64)
        mask = keyed_dropout(x, np.arange(rows), p, dropout_key(3, 1, 0)).numpy()
        assert set(np.unique(mask).tolist()) == {0.0, 1 / (1 - p)}
        assert abs(mask.mean() - 1) <= 4 * np.sqrt(p / (1 - p) / mask.size)
        kept = mask > 0
        q = 1 - p
        assert np.all(np.abs(kept.mean(axis=0) - q) <= 4 * np.sqrt(q * (1 - q) / rows))
        both = (kept[:, :, None] & kept[:, None, :]).mean(axis=0)[np.triu_indices(width, 1)]
        assert np.all(np.abs(both - q * q) <= 4 * np.sqrt(q * q * (1 - q * q) / rows))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 3, 4, 7, 16, 64, 65])
def test_compiled_pass_gives_the_numpy_mask_times_x_bitwise(dtype, width: int) -> None:
    """The one-pass kernel is x * (keep * scale) of the numpy definition, bit for bit, rows at any offset."""
    rng = np.random.default_rng(width)
    for p, offset in ((0.5, 0), (0.1, 2**40 + 17), (0.9, 123457), (1 - 2**-17, 5)):
        ids = rng.permutation(4000)[:257] + offset
        x = rng.standard_normal((257, width)).astype(dtype)
        x[0, 0], x[1, -1] = np.nan, -np.inf
        key = dropout_key(int(rng.integers(2**62)), 3, 1)
        mask = keyed_keep_mask(ids, width, p, key).astype(dtype) * dtype(1 / (1 - p))
        got = dropout_kernel.masked_scale(x, ids, p, key, np.empty_like(x))
        with np.errstate(invalid="ignore"):  # -inf * 0
            want = x * mask
        np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))
