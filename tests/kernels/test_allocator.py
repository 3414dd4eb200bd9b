"""``train``'s process keeps the memory an epoch frees (distgcn/kernels/allocator.py), counted in page faults.

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
    from distgcn.kernels.allocator import keep_freed_memory
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


HUGE = """
import sys
from distgcn.kernels.allocator import prefer_huge_pages
if sys.argv[1] == "huge":
    assert prefer_huge_pages()
import torch
x = torch.ones(64 << 18)  # 64 MiB, touched
print(sum(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")))
"""


def thp_mode() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "absent"
    return text.split("[")[1].split("]")[0]


@pytest.mark.skipif(thp_mode() != "madvise", reason="huge pages only on request: the kernel's THP mode is madvise")
def test_train_asks_torch_for_huge_pages_on_large_blocks():
    def huge_kib(mode: str) -> int:
        return int(subprocess.run([sys.executable, "-c", HUGE, mode], capture_output=True, text=True,
                                  check=True).stdout)

    assert huge_kib("default") == 0
    assert huge_kib("huge") >= 32 << 10  # most of the 64 MiB block


def test_the_train_command_is_reached_before_torch_is_imported():
    """prefer_huge_pages works only before torch's import: the CLI and train's module must not import it."""
    code = "import sys, distgcn.cli.main, distgcn.cli.train; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
