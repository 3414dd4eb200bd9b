"""Large activations in buffers kept from one epoch to the next, instead of memory mapped anew each time.

glibc's malloc keeps freed blocks only up to 32 MiB (:mod:`distgcn.kernels.allocator`);
a larger one goes back to the kernel when it is freed, and the next epoch's
activation of the same shape is faulted in again, as huge pages, with the
kernel compacting memory to find them. On the 10^6-vertex R-MAT (activations
of 1,048,576 × 64 float32, 256 MiB) that cost about 1.5 s of system time an
epoch on one thread, more than the epoch's own work.

Inside :func:`kept_between_epochs` (the trainer's epoch loop), the products,
dropouts and gradients that distgcn allocates take their large outputs from
:func:`empty`, which hands out a kept buffer large enough once nothing refers
to its memory any more (no tensor, view, NumPy array or tensor saved for a
backward pass), and keeps a new one otherwise. So each epoch reuses the
previous epoch's memory. Outside it, and for small or non-CPU tensors,
:func:`empty` is ``torch.empty``. The buffers belong to the thread that entered the scope (a
rank of the in-process transport is a thread) and are released when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

MIN_BYTES = 32 << 20
"""Smaller blocks are kept by glibc's malloc itself (:mod:`distgcn.kernels.allocator`)."""


def _use_count(buffer: torch.Tensor) -> int:
    """How many tensors (and storage objects) refer to ``buffer``'s memory, as torch counts them."""
    return torch._C._storage_Use_Count(buffer.untyped_storage()._cdata)


CAN_COUNT_USES = hasattr(torch._C, "_storage_Use_Count")
"""Whether this torch can tell that a buffer is free again; without it, :func:`empty` never reuses one."""


class KeptBuffers:
    """Buffers by dtype, each with the use count it has when nothing else refers to it.

    A request is served by the smallest free buffer that holds it and is at most twice its size, so a
    full-batch epoch's requests, the same every epoch, find last epoch's buffers. Where none fits, a new buffer
    of exactly the request's size is kept, and the largest free buffer too small for the request is let go:
    requests of varying size (sampled minibatches) then grow the buffers they reuse instead of adding to them.
    """

    def __init__(self) -> None:
        self._kept: dict[torch.dtype, list[tuple[torch.Tensor, int]]] = {}

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` over a kept buffer that nothing refers to, or over a new kept one."""
        kept = self._kept.setdefault(dtype, [])
        numel = _numel(shape)
        free = [(buffer.numel(), i) for i, (buffer, idle_count) in enumerate(kept) if _use_count(buffer) == idle_count]
        fitting = [(size, i) for size, i in free if numel <= size <= 2 * numel]
        if fitting:
            return _alias(kept[min(fitting)[1]][0], shape)
        too_small = [(size, i) for size, i in free if size < numel]
        if too_small:
            del kept[max(too_small)[1]]
        buffer = torch.empty(numel, dtype=dtype)
        kept.append((buffer, _use_count(buffer)))
        return _alias(buffer, shape)

    @property
    def nbytes(self) -> int:
        """Bytes kept, free or in use."""
        return sum(buffer.nbytes for kept in self._kept.values() for buffer, _ in kept)

    def __len__(self) -> int:
        return sum(len(kept) for kept in self._kept.values())


def _numel(shape: tuple[int, ...]) -> int:
    numel = 1
    for n in shape:
        numel *= n
    return numel


def _alias(buffer: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A new contiguous tensor of ``shape`` over the start of ``buffer``'s memory. It counts as a use of that memory
    for as long as it (or anything made from it) lives; a view would share the buffer's own count."""
    return torch.empty(0, dtype=buffer.dtype).set_(buffer.untyped_storage(), 0, shape)


_scope = threading.local()


def kept() -> KeptBuffers | None:
    """The calling thread's kept buffers, None outside :func:`kept_between_epochs`."""
    return getattr(_scope, "buffers", None)


@contextmanager
def kept_between_epochs() -> Iterator[KeptBuffers | None]:
    """Keep this thread's large activations for reuse until the outermost such scope ends (then they are freed).

    Yields the buffers (None where torch cannot count uses)."""
    if kept() is not None or not CAN_COUNT_USES:
        yield kept()
        return
    _scope.buffers = buffers = KeptBuffers()
    try:
        yield buffers
    finally:
        _scope.buffers = None


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """``torch.empty(shape)``, over a kept buffer where one applies (module docstring)."""
    shape = tuple(int(n) for n in shape)
    buffers = kept()
    device = torch.device(device)
    if buffers is None or device.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    if _numel(shape) * dtype.itemsize < MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return buffers.empty(shape, dtype)


def empty_like(x: torch.Tensor) -> torch.Tensor:
    """A contiguous :func:`empty` of x's shape, dtype and device."""
    return empty(tuple(x.shape), x.dtype, x.device)
