"""distgcn/kernels/kept_buffers.py: a kept buffer is handed out again only when nothing refers to its memory, and
training with kept buffers gives the bits of training without them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import distgcn
from distgcn.kernels import kept_buffers as activation_buffers
from distgcn.kernels.dense import affine
from distgcn.kernels.kept_buffers import kept_between_epochs
from distgcn.nn.relu import relu_

SPEC = "synthetic:sbm,n=240,classes=3,features=8,avg_degree=6"


@pytest.fixture
def keep_every_size(monkeypatch):
    """Kept buffers for tensors of any size, so that small test graphs use them."""
    monkeypatch.setattr(activation_buffers, "MIN_BYTES", 0)


def test_a_buffer_comes_back_only_once_nothing_refers_to_its_memory(keep_every_size) -> None:
    with kept_between_epochs() as buffers:
        first = activation_buffers.empty((50, 8), torch.float32)
        address = first.data_ptr()
        view, array = first[10:], first.numpy()
        del first
        assert activation_buffers.empty((50, 8), torch.float32).data_ptr() != address  # a view and an array
        del view
        assert activation_buffers.empty((50, 8), torch.float32).data_ptr() != address  # the array
        del array
        again = activation_buffers.empty((50, 8), torch.float32)
        assert again.data_ptr() == address and again.shape == (50, 8) and again.is_contiguous()
        assert activation_buffers.empty((50, 8), torch.float64).data_ptr() != address  # another dtype
        assert len(buffers) == 3


def test_outside_the_scope_and_below_the_size_nothing_is_kept(monkeypatch) -> None:
    assert activation_buffers.kept() is None
    first = activation_buffers.empty((50, 8), torch.float32)
    address = first.data_ptr()
    del first
    with kept_between_epochs() as buffers:
        monkeypatch.setattr(activation_buffers, "MIN_BYTES", 50 * 8 * 4 + 1)
        activation_buffers.empty((50, 8), torch.float32)
        assert len(buffers) == 0
        monkeypatch.setattr(activation_buffers, "MIN_BYTES", 50 * 8 * 4)
        activation_buffers.empty((50, 8), torch.float32)
        assert len(buffers) == 1
    assert activation_buffers.kept() is None
    del address


def test_a_tensor_saved_for_the_backward_pass_is_not_handed_out(keep_every_size) -> None:
    """The affine output is saved (by the ReLU) and the SpMM-like input too: buffers asked for between forward and
    backward, and scribbled on, must be others, so the gradients equal plain torch's."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 6, generator=gen, dtype=torch.float64)
    w = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    b = torch.randn(6, generator=gen, dtype=torch.float64)
    g = torch.randn(40, 6, generator=gen, dtype=torch.float64)
    with kept_between_epochs():
        inputs = activation_buffers.empty((40, 6), torch.float64)
        inputs.copy_(x)
        w_ = w.clone().requires_grad_(True)
        b_ = b.clone().requires_grad_(True)
        out = relu_(affine(inputs, w_, b_))
        for _ in range(4):
            activation_buffers.empty((40, 6), torch.float64).fill_(float("nan"))
        del inputs
        out.backward(g)
    w_ref = w.clone().requires_grad_(True)
    b_ref = b.clone().requires_grad_(True)
    torch.relu(torch.addmm(b_ref, x, w_ref)).backward(g)
    assert torch.equal(w_.grad, w_ref.grad) and torch.equal(b_.grad, b_ref.grad)


def test_requests_within_a_factor_of_two_keep_no_more_buffers_than_were_alive_at_once(keep_every_size) -> None:
    """Sampled batches ask for varying sizes: the kept buffers grow instead of adding up."""
    rng = np.random.default_rng(0)
    with kept_between_epochs() as buffers:
        alive: list[torch.Tensor] = []
        for rows in rng.integers(100, 200, size=200):
            alive = alive[-2:]  # so three at most are alive at once, the new one included
            alive.append(activation_buffers.empty((int(rows), 16), torch.float32))
            assert len(buffers) <= 3
        assert buffers.nbytes <= 3 * 200 * 16 * 4


def test_each_thread_keeps_its_own_buffers(keep_every_size) -> None:
    """In-process ranks are threads: one rank's buffers are never handed to another."""
    import threading

    seen: dict[str, object] = {}

    def rank() -> None:
        seen["before"] = activation_buffers.kept()
        with kept_between_epochs() as buffers:
            activation_buffers.empty((30, 4), torch.float32)
            seen["inside"] = buffers
        seen["after"] = activation_buffers.kept()

    with kept_between_epochs() as mine:
        other = threading.Thread(target=rank)
        other.start()
        other.join()
        assert seen["before"] is None and seen["after"] is None
        assert seen["inside"] is not mine and len(seen["inside"]) == 1 and len(mine) == 0
        assert activation_buffers.kept() is mine


def test_affine_and_relu_equal_torch_both_ways() -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(33, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: relu_(affine(x, w, b)), (x, w, b))
    g = torch.randn(33, 4, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(relu_(affine(x, w, b)), (x, w, b), g)
    theirs = torch.autograd.grad(torch.relu(x @ w + b), (x, w, b), g)
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)


def _train(ranks: int = 1, **keywords) -> list[distgcn.TrainResult]:
    """Each rank's result; more than one rank: in-process ranks (threads) on a random partition."""
    settings = dict(epochs=4, layers=3, hidden=(16, 12), dropout=0.5, seed=2, **keywords)
    if ranks == 1:
        return [distgcn.train(SPEC, partition_model="random", threads=1, **settings)]
    from distgcn.comm.transport.inprocess import run_ranks

    parts = distgcn.partition(SPEC, ranks, model="random")
    return run_ranks(ranks, lambda transport: distgcn.train(parts if transport.rank == 0 else None,
                                                            transport=transport, **settings))


@pytest.mark.parametrize("keywords", [{}, {"first_layer": "cached"}, {"dtype": "float64"},
                                      {"sampler": "node", "batch_size": 120}, {"ranks": 2}, {"conv": "sage"},
                                      {"conv": "gat", "heads": 2}],
                         ids=["exact", "cached", "float64", "minibatch", "two-ranks", "sage", "gat"])
def test_training_with_kept_buffers_gives_the_bits_of_training_without(monkeypatch, keywords) -> None:
    """With every activation kept (MIN_BYTES 0), each epoch reuses the last one's memory; a buffer handed out while
    still in use would change the losses or the weights."""
    monkeypatch.setattr(activation_buffers, "CAN_COUNT_USES", False)
    plain = _train(**keywords)
    monkeypatch.setattr(activation_buffers, "CAN_COUNT_USES", True)
    monkeypatch.setattr(activation_buffers, "MIN_BYTES", 0)
    handed_out = {"new": 0, "again": 0}
    original = activation_buffers.KeptBuffers.empty

    def counting(self, shape, dtype):
        before = len(self)
        tensor = original(self, shape, dtype)
        handed_out["new" if len(self) > before else "again"] += 1
        return tensor

    monkeypatch.setattr(activation_buffers.KeptBuffers, "empty", counting)
    kept = _train(**keywords)
    assert handed_out["again"] > 3 * handed_out["new"] > 0  # most requests were served by last epoch's buffers
    for kept_rank, plain_rank in zip(kept, plain, strict=True):
        assert [r["loss"] for r in kept_rank.history] == [r["loss"] for r in plain_rank.history]
        for a, b in zip(kept_rank.weights, plain_rank.weights, strict=True):
            assert np.array_equal(a, b)
        for a, b in zip(kept_rank.layer_outputs, plain_rank.layer_outputs, strict=True):
            assert np.array_equal(a, b)
