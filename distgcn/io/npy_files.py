"""Reading .npy and .npz files with numpy's header parsing under one process-wide lock.

numpy parses every array header with ``ast.literal_eval``. CPython 3.11 before 3.11.8 counted the AST
converter's recursion depth in interpreter-wide state, so two threads parsing at once could fail with
"SystemError: AST constructor recursion depth mismatch" when a garbage collection let the other thread
run mid-parse (CPython gh-106905). The in-process transport runs ranks as threads that load their shards
together, and CI's 3.11.7 failed so. In MPI ranks, which are processes, the lock is never contended.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

_HEADER_LOCK = threading.Lock()


def read_npy_header(fh: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """Shape, Fortran order and dtype of the .npy array starting at ``fh``'s position, leaving ``fh`` at its data.

    None for format 3.0 (only for non-ASCII field names) or an unknown version. numpy's errors pass through.
    """
    with _HEADER_LOCK:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(fh)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(fh)
        return None


def read_npz(path: Path, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays ``names`` (default: every array) of an .npz, no pickles; a name it lacks is left out.

    numpy's errors pass through (OSError, ValueError, EOFError, zipfile.BadZipFile).
    """
    with _HEADER_LOCK, np.load(path, allow_pickle=False) as archive:
        wanted = archive.files if names is None else [name for name in names if name in archive.files]
        return {name: archive[name] for name in wanted}


def read_npy(path: Path) -> np.ndarray:
    """The array of an .npy file, no pickles."""
    with _HEADER_LOCK:
        return np.load(path, allow_pickle=False)
