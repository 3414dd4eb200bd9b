"""distgcn.training.steps.cross_entropies (compiled on the CPU, torch's operations elsewhere) and the predicted classes: the
per-row cross-entropy and its gradient against a float64 numpy oracle, argmax against numpy's."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from distgcn.kernels import logits as logits_kernel
from distgcn.training.steps import cross_entropies


def _oracle(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loss per row and the gradient of their sum, softmax − one-hot, in float64 with the row's maximum taken off."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    loss = -np.log(probabilities[rows, labels])
    grad = probabilities.copy()
    grad[rows, labels] -= 1.0
    return loss, grad


@pytest.fixture(params=["compiled", "torch"])
def loss_path(request, monkeypatch) -> str:
    """Each test once through the compiled passes (the CPU's) and once through torch's operations (a GPU's)."""
    if request.param == "torch":
        monkeypatch.setattr(logits_kernel, "compiled", lambda logits: False)
    return request.param


@pytest.mark.parametrize("classes", [1, 2, 8, 41])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_entropies_and_gradient_equal_the_oracle(classes: int, dtype, loss_path) -> None:
    gen = torch.Generator().manual_seed(classes)
    logits = (torch.randn(257, classes, generator=gen, dtype=torch.float64) * 4).to(dtype).requires_grad_(True)
    labels = torch.randint(0, classes, (257,), generator=gen)
    loss = cross_entropies(logits, labels)
    loss.sum().backward()
    expected, grad = _oracle(logits.detach().double().numpy(), labels.numpy())
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(loss.detach().double().numpy(), expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(logits.grad.double().numpy(), grad, rtol=tolerance, atol=tolerance)


def test_large_logits_do_not_overflow(loss_path) -> None:
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [-1e4, 1e4, 0.0]], dtype=torch.float32)
    loss = cross_entropies(logits, torch.tensor([0, 0]))
    np.testing.assert_allclose(loss.numpy(), [0.0, 2e4], rtol=1e-6)


def test_the_backward_keeps_only_one_gradient_row_a_row(loss_path) -> None:
    """What autograd keeps for the loss: each row's gradient (the size of the logits) and the row positions;
    autograd's own backward of the same expression kept more (distgcn/training/steps.py)."""
    logits = torch.randn(500, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 8, (500,))
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        cross_entropies(logits, labels)
    assert sum(t.numel() * t.element_size() for t in saved) <= 500 * 8 * 8


@pytest.mark.parametrize("kept", [False, True])
def test_the_loss_of_some_rows_is_the_loss_of_their_selection_bit_for_bit(kept: bool, monkeypatch, loss_path) -> None:
    """``rows``: the loss of those rows and a gradient of all the logits, zero elsewhere, the bits autograd gives
    through index_select (also when the gradient's buffer is a kept one, reused and so not zero beforehand)."""
    from distgcn.kernels import kept_buffers as activation_buffers

    monkeypatch.setattr(activation_buffers, "MIN_BYTES", 0)
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(300, 8, generator=gen, requires_grad=True)
    rows = torch.randperm(300, generator=gen)[:120]
    labels = torch.randint(0, 8, (120,), generator=gen)
    weights = torch.randn(120, generator=gen)
    expected = cross_entropies(logits.index_select(0, rows), labels)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    with activation_buffers.kept_between_epochs() if kept else contextlib.nullcontext():
        for _ in range(2):  # the second time round the kept gradient buffer holds the first one's values
            loss = cross_entropies(logits, labels, rows)
            (grad,) = torch.autograd.grad((loss * weights).sum(), logits)
            assert torch.equal(loss, expected.detach())
            assert torch.equal(grad.view(torch.int32), expected_grad.view(torch.int32))
            del grad


def test_a_nan_or_infinite_logit_gives_the_loss_torch_gives(loss_path) -> None:
    """A NaN must reach the loss (the trainer stops a diverged run on it); infinities as torch's logsumexp."""
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[0.0, nan, 1.0], [nan, 0.0, 1.0], [inf, 0.0, 1.0], [-inf, -inf, -inf], [2.0, -inf, 0.0]],
                          dtype=torch.float64)
    labels = torch.tensor([0, 2, 1, 0, 0])
    expected = torch.logsumexp(logits, dim=1) - logits.gather(1, labels.unsqueeze(1)).squeeze(1)
    assert torch.equal(cross_entropies(logits, labels).isnan(), expected.isnan())
    np.testing.assert_array_equal(cross_entropies(logits, labels).numpy(), expected.numpy())


def test_a_label_or_row_out_of_range_is_refused_not_read() -> None:
    logits = torch.zeros(4, 3)
    with pytest.raises(IndexError, match=r"labels must lie in \[0, 3\), got 0 to 3"):
        cross_entropies(logits, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(IndexError, match=r"rows must lie in \[0, 4\)"):
        cross_entropies(logits, torch.tensor([0, 1]), torch.tensor([1, 4]))


def test_the_loss_and_its_gradient_are_the_same_bits_on_any_number_of_threads() -> None:
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(20_000, 8, generator=gen, requires_grad=True)
    rows = torch.randperm(20_000, generator=gen)[:9_000]
    labels = torch.randint(0, 8, (9_000,), generator=gen)
    results = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            loss = cross_entropies(logits, labels, rows)
            (grad,) = torch.autograd.grad(loss.sum(), logits)
            results.append((loss.detach().clone(), grad.clone()))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_predicted_classes_are_numpys_first_largest_column(dtype) -> None:
    """The oracle is numpy's argmax (first largest column; a NaN counts as the largest, its first one wins)."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(-3, 4, (5_000, 8), generator=gen).to(dtype)  # small integers: many ties
    logits[7, 5] = logits[9, 0] = logits[11, 7] = float("nan")
    logits[11, 2] = float("nan")
    logits[13] = float("-inf")
    logits[15, 4] = float("inf")
    predicted = logits_kernel.predicted_classes(logits)
    assert predicted.dtype == torch.int64
    np.testing.assert_array_equal(predicted.numpy(), logits.numpy().argmax(axis=1))
    assert predicted[7] == 5 and predicted[9] == 0 and predicted[11] == 2 and predicted[13] == 0
    np.testing.assert_array_equal(predicted.numpy(), logits.argmax(dim=1).numpy())
