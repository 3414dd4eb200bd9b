"""Â and the vertex arrays moved out of the process's memory while a partitioner holds its own copy of the graph.

Mt-KaHyPar reads the column-net hypergraph from a file and builds its own structures, about 100 bytes per pin;
meanwhile ``distgcn partition`` needs neither Â nor the features until the part vector exists. At 10^8 nonzeros
those are 3.4 GB (docs/scale.md). Each array is written to a file under ``TMPDIR`` and mapped back
copy-on-write in its place, so the values stay where they were (same objects, same dtype) while the pages live
in the kernel's page cache, which can drop and re-read them, not in the process's resident memory. The files are
unlinked when the partitioner returns; the mappings keep them readable until the arrays are freed. Reading a
page back later costs a page-cache copy: seconds per GB, against minutes of partitioning.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.io.page_cache import CSR_ARRAYS, file_mapped, mapped_copy
from distgcn.runtime.progress import Progress
from distgcn.shard.cut import GraphData


@dataclass
class Spill:
    """Moves the vertex arrays, then Â's arrays, to files, in two steps of the hypergraph model.

    :meth:`move_vertex_arrays` runs as the partitioning starts (no model reads them); entering the instance
    (``compute_parts``' ``while_tool_runs``) moves Â's arrays once the column nets are written and before the
    tool reads them. The partitioner runs inside a progress phase that may have handed the terminal to a ticker
    process, so nothing is printed here: :meth:`report` says what happened once the phase is over. If a file
    cannot be written (``TMPDIR`` full or read-only), the arrays not yet moved stay in memory and the partitioner
    runs as before, with more memory.
    """

    data: GraphData
    a_hat: sp.csr_matrix
    moved_bytes: int = 0
    error: str | None = None

    def move_vertex_arrays(self) -> None:
        for name in list(self.data.arrays):
            if self.error is None:
                self.data.arrays[name] = self._moved(self.data.arrays[name])

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        self.move_vertex_arrays()  # a no-op where they are already mapped
        for name in CSR_ARRAYS:
            if self.error is None:
                setattr(self.a_hat, name, self._moved(getattr(self.a_hat, name)))
        yield

    def _moved(self, array: np.ndarray) -> np.ndarray:
        """``array`` mapped from a file, or itself (already mapped, or the file could not be written)."""
        if file_mapped(array):
            return array
        try:
            mapped = mapped_copy(array)
        except OSError as err:
            self.error = f"{err.strerror or err}"
            return array
        self.moved_bytes += array.nbytes
        return mapped

    def report(self, progress: Progress) -> None:
        if self.error is not None:
            progress.warn(f"could not move Â and the vertex arrays to {tempfile.gettempdir()} while the partitioner "
                          f"ran ({self.error}); {self.moved_bytes / 1e9:.2f} GB moved, the rest stayed in memory: "
                          "point TMPDIR at a directory with room")
        elif self.moved_bytes:
            progress.detail(f"{self.moved_bytes / 1e9:.2f} GB of Â and vertex arrays were mapped from "
                            f"{tempfile.gettempdir()} while the partitioner ran")
