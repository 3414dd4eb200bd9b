"""The kernels' tricks, each one a switch, so that a benchmark can re-measure on any host what each is worth.

Every switch is on by default (the kernels as they run in training). ``DISTGCN_KERNEL_TRICKS_OFF`` (field names,
comma-separated) turns some off for a whole process; a benchmark may instead assign another :class:`Tricks` to
:data:`TRICKS` between calls (benchmarks/kernel_ablation.py alternates both in one process). The kernels read
:data:`TRICKS` when they run, and a loop compiled without a trick is a loop of its own in numba's cache. Only
``two_chains`` changes the bits of a result; every other switch changes the speed alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

TRICKS_OFF_VARIABLE = "DISTGCN_KERNEL_TRICKS_OFF"


@dataclass(frozen=True)
class Tricks:
    """One switch per trick of the CPU kernels (:mod:`distgcn.kernels.csr`, :mod:`~distgcn.kernels.dropout`,
    :mod:`~distgcn.kernels.logits`)."""

    stack_sums: bool = True
    """Products compiled for their width, a row's sums in registers (off: the run-time-width loop, sums on the
    heap)."""
    prefetch: bool = True
    """The product asks for the row of H ``csr.PREFETCH_AHEAD`` nonzeros ahead, into L1."""
    two_chains: bool = True
    """Rows of at most 64 bytes are summed in two chains of multiply-adds (off: one chain, other bits)."""
    claimed_blocks: bool = True
    """``csr.BLOCKS_PER_THREAD`` row blocks per thread, each claimed by the next thread free (off: one block per
    thread)."""
    compiled_dropout: bool = True
    """Keyed dropout as one compiled pass each way that regenerates its mask (off: torch's operations on a float
    mask, the same bits)."""
    one_pass_product: bool = True
    """dropout(x) @ w with a narrow w as one compiled pass each way (off: dropout, then torch's product)."""
    relu_folding: bool = True
    """A hidden layer's ReLU applied by the next layer's one-pass kernels, both ways (off: its own step)."""
    compiled_logits: bool = True
    """The loss with its gradient, and the argmax, each one compiled pass over the logits (off: torch's
    operations)."""

    @classmethod
    def from_environment(cls) -> Tricks:
        """All on, less those named in ``DISTGCN_KERNEL_TRICKS_OFF``."""
        names = [name.strip() for name in os.environ.get(TRICKS_OFF_VARIABLE, "").split(",") if name.strip()]
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"{TRICKS_OFF_VARIABLE}: no trick named {', '.join(unknown)} (known: {', '.join(known)})")
        return cls(**dict.fromkeys(names, False))


TRICKS = Tricks.from_environment()
"""The switches the kernels read when they run."""
