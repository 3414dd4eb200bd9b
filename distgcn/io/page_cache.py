"""Arrays kept in the kernel's page cache instead of this process's memory, and heap given back.

An array written to a file under ``TMPDIR`` and mapped back copy-on-write keeps its values and type while its
pages live in the page cache, which can drop and re-read them: a process holds only the pages it reads, and
can give those back (:func:`drop_pages`). The partition steps use this for what waits while a partitioner runs
(distgcn/shard/spill.py, the engines on the ranks) and for the features a rank sends in the cut
(distgcn/shard/rank_rows.py).
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import scipy.sparse as sp

from distgcn.io.leftovers import scratch_directory

CSR_ARRAYS = ("data", "indices", "indptr")
"""The arrays of a CSR matrix."""


def mapped_copy(array: np.ndarray) -> np.ndarray:
    """``array``'s values in a copy-on-write mapping of an unlinked file under ``TMPDIR`` (a plain ndarray)."""
    with scratch_directory("spill") as directory:
        path = directory / "array.npy"
        np.save(path, array, allow_pickle=False)
        return np.asarray(np.load(path, mmap_mode="c"))  # the mapping outlives the file's name


def spilled(array: np.ndarray) -> np.ndarray:
    """``array`` as a file mapping (:func:`mapped_copy`), or as it is if it is one already or if ``TMPDIR``
    cannot take it (it then stays in memory: more memory, the same values)."""
    if file_mapped(array):
        return array
    try:
        return mapped_copy(array)
    except OSError:
        return array


def spill_matrix(matrix: sp.csr_matrix) -> None:
    """Move a CSR matrix's arrays to file mappings in place (:func:`spilled`: each stays in memory if ``TMPDIR``
    cannot take it)."""
    for name in CSR_ARRAYS:
        setattr(matrix, name, spilled(getattr(matrix, name)))


def return_freed_heap() -> None:
    """glibc's ``malloc_trim``: memory this process has freed goes back to the system (else it stays in the
    resident set, where the next step's peak would stand on it); nothing where the C library has none."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def drop_pages(array: np.ndarray, lo: int, hi: int) -> None:
    """Give back the pages that rows ``[lo, hi)`` of a file-mapped ``array`` hold in this process (the file keeps
    their values: a later read maps them in again); nothing for an array in memory. Only whole pages inside the
    rows are dropped."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, mmap.mmap) or hi <= lo or not array.flags.c_contiguous:
        return
    start = np.frombuffer(base, dtype=np.uint8).ctypes.data
    row_bytes = array[:1].nbytes
    first = array.ctypes.data - start + lo * row_bytes
    last = first + (hi - lo) * row_bytes
    first = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE
    last = last // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        base.madvise(mmap.MADV_DONTNEED, first, last - first)


def file_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file mapping (its chain of bases ends in an mmap)."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap)
