"""Per-rank communication and timing counters, reset every epoch."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields


@dataclass
class CommCounters:
    """What this rank sent and how long it waited, since the last reset."""

    halo_rows: int = 0
    halo_bytes: int = 0
    messages: int = 0
    spmm_exchanges: int = 0
    comm_wait_s: float = 0.0
    allreduce_s: float = 0.0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    @contextmanager
    def timing(self, attribute: str) -> Iterator[None]:
        """Add the wall time of the block to ``attribute``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, attribute, getattr(self, attribute) + time.perf_counter() - start)
