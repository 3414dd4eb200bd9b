"""Keep the memory an epoch frees for the next epoch, instead of handing it back to the kernel.

Every epoch allocates the same activations again. glibc's malloc serves
blocks above its mmap threshold (128 KiB, raised on the fly up to 32 MiB)
with fresh mmaps and trims freed memory at the top of the heap back to the
kernel, so each epoch page-faults its activations in again: 740,000 minor
faults in 40 Slashdot epochs at P = 1 (`/usr/bin/time`), 130,000 with this
setting, and epochs about 10-20 % shorter (docs/performance.md). Blocks up
to 32 MiB now come from the heap, which is trimmed only beyond 2 GiB free;
larger ones stay mmaps (a scale-23 rank's 500 MiB activations are unchanged).

Only the ``train`` command's process calls this: the API leaves the caller's allocator as it is.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (glibc's malloc.h)."""
MMAP_THRESHOLD = 32 << 20
"""glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): larger values are refused."""
TRIM_THRESHOLD = 2**31 - 1
"""mallopt's largest value (a C int): freed memory at the heap's top returns to the kernel only beyond 2 GiB."""


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
