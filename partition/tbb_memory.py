"""Memory a TBB-based partitioner has freed, handed back to the system.

Mt-KaHyPar allocates through TBB's scalable allocator (the libtbbmalloc its wheel bundles), which keeps freed
blocks in its own pools for reuse by the next allocation. A partition command makes one call, so the pools are
never reused: on a 10^6-vertex R-MAT (1.3·10^7 pins) the process kept 435 MB of the 560 MB the call had added,
and on the 10^8-nonzero one the metrics and shards were then built on top of several GB nobody used
(docs/scale.md). ``scalable_allocation_command(TBBMALLOC_CLEAN_ALL_BUFFERS)`` returns the pools; measured on
that 10^6-vertex graph it brought the resident size from 692 to 359 MB.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import ModuleType

TBBMALLOC_CLEAN_ALL_BUFFERS = 0
"""oneTBB's ``ScalableAllocationCmd`` (tbb/scalable_allocator.h): its first value."""
TBBMALLOC_OK, TBBMALLOC_NO_EFFECT = 0, 4
"""``ScalableAllocationResult``: done, or nothing was pooled."""


def release_pooled_memory(extension: ModuleType) -> bool:
    """Ask the libtbbmalloc bundled with ``extension`` (an imported wheel's module, as auditwheel lays it out:
    ``<name>.libs/libtbbmalloc-<hash>.so*`` beside it) to return its pools. True: done, or nothing was pooled;
    False: no such library, or it refused.

    dlopen of the path the extension already loaded gives the same library instance, so its pools are the ones
    cleaned.
    """
    libs = Path(extension.__file__).parent / f"{extension.__name__}.libs"
    candidates = sorted(path for path in libs.glob("libtbbmalloc-*.so*") if "proxy" not in path.name)
    if not candidates:
        return False
    allocator = ctypes.CDLL(str(candidates[0]))
    return allocator.scalable_allocation_command(TBBMALLOC_CLEAN_ALL_BUFFERS, None) in (TBBMALLOC_OK,
                                                                                         TBBMALLOC_NO_EFFECT)
