"""distgcn.steps.cross_entropies: the per-row cross-entropy and its gradient, against a float64 numpy oracle."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from distgcn.steps import cross_entropies


def _oracle(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loss per row and the gradient of their sum, softmax − one-hot, in float64 with the row's maximum taken off."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    loss = -np.log(probabilities[rows, labels])
    grad = probabilities.copy()
    grad[rows, labels] -= 1.0
    return loss, grad


@pytest.mark.parametrize("classes", [1, 2, 8, 41])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_entropies_and_gradient_equal_the_oracle(classes: int, dtype) -> None:
    gen = torch.Generator().manual_seed(classes)
    logits = (torch.randn(257, classes, generator=gen, dtype=torch.float64) * 4).to(dtype).requires_grad_(True)
    labels = torch.randint(0, classes, (257,), generator=gen)
    loss = cross_entropies(logits, labels)
    loss.sum().backward()
    expected, grad = _oracle(logits.detach().double().numpy(), labels.numpy())
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(loss.detach().double().numpy(), expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(logits.grad.double().numpy(), grad, rtol=tolerance, atol=tolerance)


def test_large_logits_do_not_overflow() -> None:
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [-1e4, 1e4, 0.0]], dtype=torch.float32)
    loss = cross_entropies(logits, torch.tensor([0, 0]))
    np.testing.assert_allclose(loss.numpy(), [0.0, 2e4], rtol=1e-6)


def test_the_backward_keeps_only_the_logits_and_one_number_a_row() -> None:
    """What autograd keeps for the loss: the logits, their log-sum-exp and the labels; autograd's own backward
    of the same expression kept more (distgcn/steps.py)."""
    logits = torch.randn(500, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 8, (500,))
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        cross_entropies(logits, labels)
    assert sum(t.numel() * t.element_size() for t in saved) <= (500 * 8 + 500) * 8 + labels.numel() * 8


@pytest.mark.parametrize("kept", [False, True])
def test_the_loss_of_some_rows_is_the_loss_of_their_selection_bit_for_bit(kept: bool, monkeypatch) -> None:
    """``rows``: the loss of those rows and a gradient of all the logits, zero elsewhere, the bits autograd gives
    through index_select (also when the gradient's buffer is a kept one, reused and so not zero beforehand)."""
    from distgcn import activation_buffers

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
