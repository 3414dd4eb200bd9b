"""The keys that define a distributed batch: which vertices it holds is a hash of these and global ids only.

A batch's every random choice is :func:`distgcn.hashing.uniforms` of a key
below and a partition-independent counter (a global vertex id, a global edge
pair, a walker id, a step number), so the batch is a function of (seed,
epoch, batch) alone; the whole-graph oracle of the tests
(``tests/oracles/minibatch_reference.py``) uses these same keys.
"""

from __future__ import annotations

from distgcn.hashing import derive_key

_SALT = 0x5A3C_17E9_B0D4_6F21
"""Separates the sampling stream from dropout's, which hashes the same (seed, epoch, index) triples."""

ROOTS, STEP, START, POP, MOVE = 1, 2, 3, 4, 5
"""The ``stream`` argument of :func:`stream_key` for each use of the hash by the walk samplers
(:mod:`.walks`: rw roots and steps; frontier starts, pops and moves)."""


def batch_key(seed: int, epoch: int, batch: int) -> int:
    """The key of one minibatch; epoch 0 is the normalization pre-sampling pass."""
    return derive_key(seed ^ _SALT, epoch, batch)


def stream_key(key: int, stream: int, index: int = 0) -> int:
    """An independent key derived from a batch's ``key``, for one use (``stream``) and one step (``index``).

    Walk samplers hash several counters per batch (roots by vertex id, each
    step by walker id); separate keys keep those uniforms independent.
    """
    return derive_key(key, stream, index)
