"""Compile the suite's numba loops ahead of the tests, on the core the suite leaves idle.

A fresh checkout has no numba cache, and each width a test multiplies at is a
loop of its own (about 1.5 s to compile: distgcn/kernels/csr.py), some three
minutes of compiling on 2 cores, while the suite keeps about one core busy.
When a run of the whole tree starts, conftest starts
this module as a niced process that compiles the loops below into the
checkout's cache (where the tests and the ranks they start look), in about the
order the tests first ask for them, and stops it when the session ends (or
once collection has selected fewer than MIN_TESTS tests).

Only speed depends on it: a loop missing here is compiled by the first test
that asks for it, as without this module, and a loop compiled here is the
same cache entry a test would have written. ``DISTGCN_TEST_WARMUP=0`` turns it off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MIN_TESTS = 500
"""Fewer tests selected (-k, a small tier): the warm-up stops, and the few loops they need compile as asked."""

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TRAINING = ((F32, (16, 8, 5)), (F64, (16, 8, 96, 64, 4, 6)), (F32, (6, 12)), (F64, (12,)),
            (F32, (4, 10, 7, 20, 32, 64, 96, 128, 256)), (F64, (10, 5, 7, 20, 48, 192)))
"""Hidden and input widths of the runs the tests train (products, transposes and dropout's backward), in about
the order the suite first trains at them."""
PRODUCT_WIDTHS = {F32: (1, 7, 17, 24, 32, 33, 47, 48, 100, 0, 4096, 56, 40, 172),
                  F64: (1, 7, 17, 24, 32, 33, 47, 48, 100, 40, 9, 0, 2048, 56, 60)}
"""Widths of tests/kernels/test_csr_kernel.py's products (0: the loop that reads the width at run time)."""
TRANSPOSE_WIDTHS = {F32: (1, 7, 17, 33, 100, 0), F64: (1, 7, 17, 33, 100, 0, 40)}
SWITCHED_OFF = ((False, True), (True, False))
"""(two chains, prefetch) of tests/kernels/test_kernel_interface.py's products with one trick off, f32 8/16/64."""


def compile_all() -> None:
    """Compile every loop listed above, training widths first (the earliest tests train)."""
    from distgcn.kernels import csr, dropout, logits

    for dtype, widths in TRAINING:
        logits.compile_now(dtype)
        for width in widths:
            dropout.compile_now(dtype, [width])
            _product(csr, dtype, width)
            _transpose(csr, dtype, width)
    for dtype in (F32, F64):
        for width in PRODUCT_WIDTHS[dtype]:
            _product(csr, dtype, width)
        for width in TRANSPOSE_WIDTHS[dtype]:
            _transpose(csr, dtype, width)
        dropout.compile_now(dtype, [csr.STACK_ACCUMULATOR_BYTES // dtype.itemsize + 1])  # the run-time-width backward
    for width in (8, 16, 64):
        for two_chains, prefetch in SWITCHED_OFF:
            _product(csr, F32, width, two_chains, prefetch)


def _no_rows(dtype: np.dtype) -> tuple:
    indptr = np.zeros(1, dtype=np.int32)
    dense = np.zeros((1, 1), dtype=dtype)
    return indptr, indptr[:0], dense[0, :0], dense, np.zeros((0, 1), dtype=dtype), np.zeros(2, dtype=np.int64)


def _product(csr, dtype: np.dtype, width: int, two_chains: bool = True, prefetch: bool = True) -> None:
    csr._compiled(width, two_chains, prefetch)(*_no_rows(dtype), 1, np.zeros(1, dtype=np.int64), False)


def _transpose(csr, dtype: np.dtype, width: int) -> None:
    csr._compiled_transpose(width)(*_no_rows(dtype))


def start() -> subprocess.Popen | None:
    """This module as a niced background process (None when DISTGCN_TEST_WARMUP=0)."""
    if os.environ.get("DISTGCN_TEST_WARMUP", "1") == "0":
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, __file__], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: os.nice(19))


def stop(process: subprocess.Popen | None) -> None:
    """End the process if it still runs (a cache entry being written is replaced whole, never left half)."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=30)


if __name__ == "__main__":
    compile_all()
