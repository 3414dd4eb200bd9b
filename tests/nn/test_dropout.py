"""The keyed dropout mask: fixed by (seed, epoch, layer, global row, column), whatever the implementation."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import warnings
from unittest import mock

import numpy as np
import pytest
import torch
from conftest import devices
from hash_oracle import MASK, PHI_INCREMENT, oracle_mix64

from distgcn.hashing import uniforms
from distgcn.kernels import dropout as dropout_kernel
from distgcn.kernels import tricks
from distgcn.nn import dropout
from distgcn.nn.dropout import (
    dropout_key,
    keyed_dropout,
    keyed_dropout_matmul,
    keyed_keep_mask,
    keyed_keep_values,
    scaled_keep_mask_torch,
)


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


@pytest.mark.parametrize("device", devices())
def test_mask_is_the_documented_hash_of_row_and_column(device: str):
    """Each mask entry from its definition (distgcn/kernels/dropout.py's docstring), in Python ints: entry (r, j) of a
    width-w mask is lane j mod 4 (16 bits, low lane first) of mix64(r · ceil(w/4) + key · GOLDEN + j div 4) mod 2**64,
    kept iff the lane is at least round(p · 65536). Checked for the dense mask, the entries of a sparse input, the
    torch form that GPU ranks compute, and at a p whose threshold equals one of the lanes (that entry is kept)."""
    key = dropout_key(5, 4, 1)
    ids = [0, 1, 7, 2**33 + 5, 123456789]

    def lane(row: int, col: int, width: int) -> int:
        counter = (row * ((width + 3) // 4) + key * PHI_INCREMENT + col // 4) & MASK
        return (oracle_mix64(counter) >> (16 * (col % 4))) & 0xFFFF

    for width in (1, 5, 8, 9):
        lanes = np.array([[lane(r, j, width) for j in range(width)] for r in ids])
        for p in (0.1, 0.9, int(lanes[-1, -1]) / 65536):
            want = lanes >= round(p * 65536)
            np.testing.assert_array_equal(keyed_keep_mask(np.array(ids), width, p, key), want)
            rows, cols = np.nonzero(np.ones_like(want))
            got = keyed_keep_values(np.array(ids)[rows], cols, width, p, key)
            np.testing.assert_array_equal(got, want[rows, cols])
            on_torch = scaled_keep_mask_torch(torch.tensor(ids, device=device), width, p, key, torch.float64)  # a GPU's
            np.testing.assert_array_equal(on_torch.cpu().numpy(), want / (1.0 - p))
        assert keyed_keep_mask(np.array(ids), width, int(lanes[-1, -1]) / 65536, key)[-1, -1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dropout_of_other_dtypes_keeps_and_scales_by_the_definition(dtype) -> None:
    """Outside the compiled float32/float64 pass (other dtypes, and every GPU tensor), the same mask scaled by
    1 / (1 - p): p = 0.75 makes the scale 4, exact in every dtype."""
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
    ids = np.arange(300, 350)
    y = keyed_dropout(x, ids, 0.75, 9)
    keep = torch.from_numpy(keyed_keep_mask(ids, 6, 0.75, 9))
    assert y.dtype == dtype
    torch.testing.assert_close(y, torch.where(keep, x * 4, torch.zeros_like(x)), rtol=0, atol=0)


def test_keep_threshold_is_capped_at_the_largest_lane_for_sparse_entries_too():
    """p within 2**-17 of 1 rounds to 65536, capped at 65535: entries whose lane is 65535 stay kept, in the dense
    mask and in the entries of a sparse input alike."""
    p, key = 1 - 2**-17, dropout_key(2, 0, 0)
    ids = np.arange(60000)
    rows, cols = np.nonzero(keyed_keep_mask(ids, 4, p, key))
    assert rows.size > 0
    for r, c in zip(rows[:3].tolist(), cols[:3].tolist()):
        assert (oracle_mix64((r + key * PHI_INCREMENT + c // 4) & MASK) >> (16 * c)) & 0xFFFF == 65535
    assert keyed_keep_values(ids[rows], cols, 4, p, key).all()


def test_hashing_wraps_modulo_2_64_without_a_warning():
    """Keys times GOLDEN overflow by design (arithmetic modulo 2**64): no caller may see an overflow warning."""
    ids = np.arange(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        key = dropout_key(2**64 - 1, 2**63, 7)
        uniforms(key, ids)
        keyed_keep_mask(ids, 3, 0.5, key)
        keyed_keep_values(ids, ids % 3, 3, 0.5, key)
        x = np.ones((5, 3))
        dropout_kernel.masked_scale(x, ids, 0.5, key, np.empty_like(x))


def test_cpu_dropout_takes_the_compiled_pass_and_stores_no_mask():
    """On the CPU in float32/float64 the mask is never materialised (distgcn/memory/prediction.py counts no mask there)."""
    x = torch.ones(8, 5, dtype=torch.float64)
    with mock.patch.object(dropout, "keyed_keep_mask", side_effect=AssertionError("mask built")):
        for dtype in (torch.float32, torch.float64):
            keyed_dropout(x.to(dtype), np.arange(8), 0.5, 3)


@pytest.mark.parametrize("dtype,chunk_bytes", [(torch.float64, dropout.CHUNK_BYTES),
                                               (torch.float32, dropout.CHUNK_BYTES),
                                               (torch.bfloat16, dropout.CHUNK_BYTES),
                                               (torch.float64, 100), (torch.float32, 100)])
@pytest.mark.parametrize("x_needs_grad", [True, False])
def test_dropout_then_product_equals_the_two_steps(dtype, x_needs_grad: bool, chunk_bytes: int,
                                                   monkeypatch) -> None:
    """keyed_dropout_matmul gives the output and both gradients of keyed_dropout(x) @ w, on the compiled pass and
    on the mask path (bfloat16, as on a GPU), up to rounding: its products run in other operand layouts than @
    (distgcn/kernels/dense.py), and in many slices (100 bytes: 1-3 rows each) the weight gradient sums the slices."""
    monkeypatch.setattr(dropout, "CHUNK_BYTES", chunk_bytes)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 12, generator=gen).to(dtype)
    w = torch.randn(12, 5, generator=gen).to(dtype)
    g = torch.randn(40, 5, generator=gen).to(dtype)
    ids = np.arange(700, 740)
    results = []
    for fused in (True, False):
        xi, wi = x.clone().requires_grad_(x_needs_grad), w.clone().requires_grad_(True)
        y = keyed_dropout_matmul(xi, wi, ids, 0.4, 17) if fused else keyed_dropout(xi, ids, 0.4, 17) @ wi
        y.backward(g)
        results.append((y.detach(), wi.grad, xi.grad))
    (y1, gw1, gx1), (y2, gw2, gx2) = results
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(gw1, gw2)
    if x_needs_grad:
        torch.testing.assert_close(gx1, gx2)
    else:
        assert gx1 is None and gx2 is None


def test_dropout_then_product_keeps_only_its_inputs_for_the_backward() -> None:
    """What autograd saves for dropout(x) @ w is x and w themselves: no dropped copy of x (distgcn/memory/prediction.py
    counts none), while the two-step form saves one."""
    x = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)

    def saved_storages(fn) -> set[int]:
        storages: set[int] = set()

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages.add(t.untyped_storage().data_ptr())
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return storages

    inputs = {x.untyped_storage().data_ptr(), w.untyped_storage().data_ptr()}
    assert saved_storages(lambda: keyed_dropout_matmul(x, w, np.arange(30), 0.5, 1)) <= inputs
    assert not saved_storages(lambda: keyed_dropout(x, np.arange(30), 0.5, 1) @ w) <= inputs


def test_dropout_then_product_without_dropout_is_the_plain_product() -> None:
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    g = torch.randn(6, 2, dtype=torch.float64)
    keyed_dropout_matmul(x, w, np.arange(6), 0.0, 5).backward(g)
    expected = x.detach().numpy() @ w.detach().numpy()
    np.testing.assert_allclose(keyed_dropout_matmul(x, w, np.arange(6), 0.0, 5).detach().numpy(), expected,
                               rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), x.detach().numpy().T @ g.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), g.numpy() @ w.detach().numpy().T, rtol=1e-12)


@pytest.mark.parametrize("rows,width,out", [(1000, 64, 8), (2600, 20, 5), (257, 7, 3), (3, 12, 1), (0, 8, 2),
                                             (40, 4100, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_pass_product_and_gradients_equal_a_float64_oracle(rows: int, width: int, out: int, dtype) -> None:
    """dropout_kernel.dropped_product(_backward) against numpy in float64 with keyed_keep_mask's mask: many
    partial blocks (1000 rows: 4 rows each, the weight gradient's four rows at a time; 2600 rows: 11 each, two
    fours and three more), a width not a multiple of four, no rows at all, a width too wide for the backward's
    stack (its run-time-width loop)."""
    gen = np.random.default_rng(rows + width)
    x = gen.standard_normal((rows, width)).astype(dtype)
    w = gen.standard_normal((width, out)).astype(dtype)
    g = gen.standard_normal((rows, out)).astype(dtype)
    ids = gen.permutation(10 * rows + 1)[:rows]
    dropped = x.astype(np.float64) * keyed_keep_mask(ids, width, 0.3, 99) / 0.7
    tolerance = {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 1e-4, "atol": 1e-4}
    got = dropout_kernel.dropped_product(x, ids, 0.3, 99, w, np.empty((rows, out), dtype=dtype))
    np.testing.assert_allclose(got, dropped @ w, **tolerance)
    grad_x, grad_w = dropout_kernel.dropped_product_backward(x, g, ids, 0.3, 99, w, True)
    np.testing.assert_allclose(grad_x, (g.astype(np.float64) @ w.T) * keyed_keep_mask(ids, width, 0.3, 99) / 0.7,
                               **tolerance)
    np.testing.assert_allclose(grad_w, dropped.T @ g, **tolerance)
    assert grad_w.shape == (width, out) and grad_w.flags.c_contiguous
    assert dropout_kernel.dropped_product_backward(x, g, ids, 0.3, 99, w, False)[0] is None


def test_one_pass_product_is_the_same_bits_on_any_number_of_threads() -> None:
    """Each row alone, and the weight gradient's blocks fixed by the rows: 1 and 2 threads agree bit for bit."""
    gen = np.random.default_rng(5)
    x = gen.standard_normal((5000, 64)).astype(np.float32)
    w = gen.standard_normal((64, 8)).astype(np.float32)
    g = gen.standard_normal((5000, 8)).astype(np.float32)
    ids = np.arange(5000)
    results = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            product = dropout_kernel.dropped_product(x, ids, 0.5, 7, w, np.empty((5000, 8), dtype=np.float32))
            results.append((product, *dropout_kernel.dropped_product_backward(x, g, ids, 0.5, 7, w, True)))
    finally:
        torch.set_num_threads(before)
    for one, two in zip(*results):
        assert np.array_equal(one, two)


def test_narrow_dropout_product_takes_the_one_pass_loop_and_wide_ones_do_not() -> None:
    x = torch.randn(20, 16, dtype=torch.float64)
    with mock.patch.object(dropout_kernel, "dropped_product", side_effect=AssertionError("one pass")) as one_pass:
        keyed_dropout_matmul(x, torch.randn(16, 9, dtype=torch.float64), np.arange(20), 0.5, 1)
        with pytest.raises(AssertionError, match="one pass"):
            keyed_dropout_matmul(x, torch.randn(16, 8, dtype=torch.float64), np.arange(20), 0.5, 1)
    assert one_pass.call_count == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("read_again", [False, True])
def test_relu_folded_into_the_one_pass_product_equals_a_float64_oracle(dtype, read_again: bool) -> None:
    """relu_keyed_dropout_matmul: x becomes relu(x) in place (a NaN stays, as torch.relu_), the product is
    (relu(x) · mask) @ w, and the gradients are the chain rule worked by hand in numpy: d x = ((G Wᵀ) · mask) where
    x > 0, else 0 (NaN rows: threshold_backward passes the gradient, NaN > 0 being false only for <=); d W =
    (relu(x) · mask)ᵀ G. ``read_again``: relu(x) also feeds a second sum, whose gradient is added where x > 0."""
    gen = np.random.default_rng(11)
    rows, width, out, p, key = 300, 12, 5, 0.4, 21
    x0 = gen.standard_normal((rows, width)).astype(dtype)
    x0[3, 2] = np.nan
    w0 = gen.standard_normal((width, out)).astype(dtype)
    g = gen.standard_normal((rows, out)).astype(dtype)
    r = gen.standard_normal((rows, width)).astype(dtype)
    ids = gen.permutation(5 * rows)[:rows]
    mask = keyed_keep_mask(ids, width, p, key) / (1 - p)
    relu = np.where(x0 < 0, 0.0, x0.astype(np.float64))
    want_out = (relu * mask) @ w0.astype(np.float64)
    positive = ~(x0 <= 0)  # NaN counts as positive: threshold_backward zeroes only where x <= 0
    want_dx = np.where(positive, (g.astype(np.float64) @ w0.T.astype(np.float64)) * mask, 0.0)
    if read_again:
        want_dx += np.where(positive, r, 0.0)
    want_dw = (relu * mask).T @ g.astype(np.float64)

    pre = torch.from_numpy(x0.copy()).requires_grad_(True)
    x = pre * 1  # a layer's output: not a leaf, so it may change in place; its gradient is pre's
    w = torch.from_numpy(w0).requires_grad_(True)
    assert dropout.relu_fuses(x, w, p) and not dropout.relu_fuses(x, w, 0.0)
    product, activation = dropout.relu_keyed_dropout_matmul(x, w, ids, p, key)
    assert activation is x
    loss = (product * torch.from_numpy(g)).sum()
    if read_again:
        loss = loss + (activation * torch.from_numpy(r)).sum()
    loss.backward()
    tolerance = {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 1e-4, "atol": 1e-4}
    np.testing.assert_array_equal(x.detach().numpy(), relu.astype(dtype))
    assert np.isnan(want_out[3]).all() and np.isnan(want_dw[2]).all()  # NaN · 0 is NaN: the NaN row spreads
    np.testing.assert_allclose(product.detach().numpy(), want_out, **tolerance)  # NaN where the oracle has NaN
    np.testing.assert_allclose(pre.grad.numpy(), want_dx, **tolerance)
    np.testing.assert_allclose(w.grad.numpy(), want_dw, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_gcn_with_the_relu_folded_trains_to_the_same_bits_as_without(dtype) -> None:
    """GCN hands its hidden layer's pre-activation to an output layer of at most NARROW_PRODUCT_WIDTH columns,
    which applies the ReLU in its kernels both ways; with that turned off (ReLU as its own autograd step) three
    steps of training give the same losses, logits and weight gradients bit for bit (its switch,
    ``Tricks.relu_folding``). Also checks the fold is taken
    (in training with dropout only) and that layer_outputs still lists the ReLU's output."""
    from distgcn.nn import model as model_module

    gen = torch.Generator().manual_seed(3)
    n = 60
    a = torch.rand(n, n, generator=gen, dtype=dtype)
    a = (a + a.T) / n

    def aggregate(h: torch.Tensor) -> torch.Tensor:
        return a @ h

    x = torch.randn(n, 10, generator=gen, dtype=dtype)
    labels = torch.randint(0, 4, (n,), generator=gen)
    ids = np.arange(100, 100 + n)

    def train(fold: bool) -> list:
        gcn = model_module.GCN([10, 16, 4], dropout=0.5, seed=9, dtype=dtype)
        record = []
        with mock.patch.object(tricks, "TRICKS", tricks.Tricks(relu_folding=fold)), \
                mock.patch.object(dropout, "relu_fuses", wraps=dropout.relu_fuses) as asked:
            for epoch in range(3):
                gcn.zero_grad()
                logits = gcn(x, aggregate, ids, epoch)
                loss = torch.nn.functional.cross_entropy(logits, labels)
                loss.backward()
                record += [loss.detach().clone(), logits.detach().clone()] + [w.grad.clone() for w in gcn.weights]
                with torch.no_grad():
                    for w in gcn.weights:
                        w -= 0.5 * w.grad
            assert asked.call_count == 3
        gcn.eval()
        hidden = gcn.layer_outputs(x, aggregate, ids, 3)[0]
        assert hidden.min() >= 0 and (hidden == 0).any()
        return record

    for folded, plain in zip(train(True), train(False), strict=True):
        assert torch.equal(folded, plain)
    with mock.patch.object(dropout_kernel, "dropped_product", wraps=dropout_kernel.dropped_product) as one_pass:
        train(True)
    assert [call.kwargs.get("relu") for call in one_pass.call_args_list] == [True] * 3


BACKWARD_CACHE_HITS = """
import numpy as np
from distgcn.kernels import dropout as dropout_kernel, dropout_loops

dropout_kernel.compile_now(np.dtype(np.float32), [64, 5000])  # a width compiled in, and the run-time-width loop
print(sum(sum(dropout_loops.backward_loop(width).stats.cache_hits.values()) for width in (64, 0)))
"""


def test_a_second_process_loads_the_width_compiled_backward_from_numbas_cache(tmp_path) -> None:
    """The backward pass is compiled per input width (about 1 s each); a rank started later must find it on disk,
    which a closure cell that pickles differently in each process would prevent."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    hits = [subprocess.run([sys.executable, "-c", BACKWARD_CACHE_HITS], capture_output=True, text=True, env=env,
                           timeout=300, check=True).stdout.split()[-1] for _ in range(2)]
    assert hits == ["0", "2"]


def test_slices_are_sized_for_their_device_and_row_ids_go_there_once() -> None:
    """keyed_dropout_matmul drops x a slice at a time: CHUNK_BYTES on the CPU, the larger DEVICE_CHUNK_BYTES
    elsewhere (a GPU's slice costs launches, not cache), and the row ids are moved to x's device once per call.
    A tensor on torch's ``meta`` device stands in for a GPU's here: it has a device that is not the CPU and no
    data (the GPU run itself is in docs/gpu.md)."""
    rows, width = 300_000, 64
    on_cpu = torch.empty((rows, width), dtype=torch.float32)
    elsewhere = torch.empty((rows, width), dtype=torch.float32, device="meta")
    row_bytes = width * 4
    for x, chunk_bytes in ((on_cpu, dropout.CHUNK_BYTES), (elsewhere, dropout.DEVICE_CHUNK_BYTES)):
        slices = dropout._row_chunks(x)
        assert [s.start for s in slices] == list(range(0, rows, chunk_bytes // row_bytes))
        assert all(s.stop - s.start == chunk_bytes // row_bytes for s in slices)
    assert dropout.DEVICE_CHUNK_BYTES > dropout.CHUNK_BYTES
    ids = np.arange(rows) * 3
    assert dropout._ids_beside(ids, on_cpu) is ids
    moved = dropout._ids_beside(ids, elsewhere)
    assert isinstance(moved, torch.Tensor) and moved.device.type == "meta" and moved.dtype == torch.int64
    assert moved.shape == (rows,)
