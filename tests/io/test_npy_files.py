"""Rank threads of the in-process transport read .npz files at once without tripping CPython gh-106905.

numpy parses array headers with ``ast.literal_eval``, and on CPython 3.11 before 3.11.8 two threads doing so
can fail with "SystemError: AST constructor recursion depth mismatch" when a garbage collection lets the
other thread run mid-parse (CI's 3.11.7 failed a 3-rank in-process run so). The race is provoked here: a
collection on every allocation, garbage whose finaliser always leaves new garbage, and thread switches
every microsecond. Bare np.load fails so within 200 reads per thread on 3.11.7 (5 of 5 runs).
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from distgcn.io.npy_files import read_npy, read_npy_header, read_npz

THREADS = 4
ROUNDS = 200


def _errors_when_threads_read(read: Callable[[], object]) -> list[SystemError]:
    provoking = threading.Event()

    class Regrowing:
        """A reference cycle whose finaliser makes another, so every allocation runs Python code in gc."""

        def __del__(self) -> None:
            if provoking.is_set():
                cycle = Regrowing()
                cycle.self = cycle  # type: ignore[attr-defined]

    errors: list[SystemError] = []

    def reader() -> None:
        try:
            for _ in range(ROUNDS):
                read()
        except SystemError as exc:
            errors.append(exc)

    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    provoking.set()
    seed = Regrowing()
    seed.self = seed  # type: ignore[attr-defined]
    del seed
    gc.set_threshold(1)
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reader) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        provoking.clear()
        sys.setswitchinterval(interval)
        gc.set_threshold(*threshold)
        gc.collect()
    return errors


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "arrays.npz"
    np.savez(path, a=np.arange(6.0).reshape(2, 3), b=np.zeros(4, dtype=np.int32), c=np.ones((1, 2, 3)))
    np.save(tmp_path / "array.npy", np.arange(6.0).reshape(2, 3))
    return path


def test_locked_reads_from_threads_do_not_race(archive: Path) -> None:
    single = archive.with_name("array.npy")

    def read() -> None:
        arrays = read_npz(archive)
        assert arrays["a"].shape == (2, 3) and arrays["c"].shape == (1, 2, 3)
        assert read_npy(single).shape == (2, 3)
        with open(single, "rb") as fh:
            assert read_npy_header(fh) == ((2, 3), False, np.dtype(np.float64))

    assert _errors_when_threads_read(read) == []


def test_unlocked_numpy_reads_race_on_this_interpreter(archive: Path) -> None:
    """The provocation has power here: bare np.load from threads fails (unless the interpreter is fixed)."""
    def read() -> None:
        with np.load(archive) as npz:
            [npz[name] for name in npz.files]

    if not _errors_when_threads_read(read):
        pytest.skip("bare np.load from threads did not race: this interpreter has CPython's fix for gh-106905 "
                    "(3.11.8 and later), so the locked test cannot fail here")


def test_read_npz_takes_the_names_asked_for(archive: Path) -> None:
    assert sorted(read_npz(archive, ["c", "a", "missing"])) == ["a", "c"]
