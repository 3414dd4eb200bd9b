"""``train``'s process keeps the memory an epoch frees (distgcn/allocator.py), counted in page faults.

The pattern is an epoch's: four 20 MB arrays alive at once, freed, allocated again. Each run is a fresh
interpreter, since the setting is process-wide; the default run shows the faults the setting removes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi  # starts interpreters

EPOCHS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from distgcn.allocator import keep_freed_memory
    assert keep_freed_memory()
def epoch():
    live = [np.ones(5_000_000, dtype=np.float32) for _ in range(4)]
    del live
epoch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    epoch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_EPOCH = 4 * 20_000_000 // 4096


def minor_faults(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", EPOCHS, mode], capture_output=True, text=True, check=True)
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_freed_activations_are_reused_without_page_faults():
    default, kept = minor_faults("default"), minor_faults("keep")
    assert default > PAGES_PER_EPOCH / 2  # glibc's default hands part of them back, to fault them in again
    assert kept < default / 20
