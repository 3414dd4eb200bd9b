"""Memory for the activations every epoch allocates again: in huge pages, and kept for the next epoch.

Each epoch allocates the same activations anew, and by default each one is
faulted in again, 4 KiB at a time: 2.4 million minor faults in 6 epochs of
the 10^6-vertex R-MAT at P = 1 (`/usr/bin/time`), 740,000 in 40 of Slashdot.
Two settings of the ``train`` process remove most of them:

- torch's ``THP_MEM_ALLOC_ENABLE``: blocks of 2 MiB or more aligned to 2 MiB
  and advised as transparent huge pages, one fault per 2 MiB. R-MAT 10^6:
  10x fewer faults, epochs 1.2-1.4x shorter, the same peak RSS or lower.
- glibc's malloc keeps freed blocks of up to 32 MiB in its heap (mallopt),
  instead of returning them to the kernel: Slashdot's 21 MB activations
  are reused, not faulted in again (about 6 % per epoch; up to 152 MiB more
  peak on some scale-23 ranks, which the memory target still meets).

Blocks over 32 MiB glibc cannot be told to keep: the trainer keeps those
activations itself (:mod:`distgcn.kernels.kept_buffers`).

Only the ``train`` command's process does this: the API leaves the caller's process as it is. A user who sets
THP_MEM_ALLOC_ENABLE=0 keeps torch's default.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (glibc's malloc.h)."""
MMAP_THRESHOLD = 32 << 20
"""glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): larger values are refused."""
TRIM_THRESHOLD = 2**31 - 1
"""mallopt's largest value (a C int): freed memory at the heap's top returns to the kernel only beyond 2 GiB."""


def prefer_huge_pages() -> bool:
    """Ask torch for huge pages on large blocks; only possible before torch is imported (it reads the variable
    once). False if torch was imported already."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return True


def keep_freed_memory() -> bool:
    """Set glibc's malloc to reuse freed blocks of up to 32 MiB; False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
