"""The counter-based hash (distgcn.hashing) against an oracle written from its documented formula in Python ints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import devices
from hash_oracle import MASK, PHI_INCREMENT, oracle_mix64

from distgcn.hashing import (
    GOLDEN,
    as_int64,
    derive_key,
    mix64,
    mix64_inplace,
    mix64_int64_inplace,
    uniforms,
)


def test_mix64_gives_splitmix64s_published_outputs():
    """splitmix64.c seeded with 0 starts 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, ...: mix64(n · GOLDEN)."""
    published = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC]
    counters = np.array([(n * PHI_INCREMENT) & MASK for n in range(1, 5)], dtype=np.uint64)
    assert [int(v) for v in mix64(counters)] == published
    assert [oracle_mix64(int(c)) for c in counters] == published
    assert int(GOLDEN) == PHI_INCREMENT


def test_mix64_and_its_inplace_form_match_the_oracle():
    values = [0, 1, 2, 0xFFFFFFFFFFFFFFFF, 1 << 63, 12345678901234567890,
              *np.random.default_rng(4).integers(0, 2**63, 50, dtype=np.int64).tolist()]
    x = np.array(values, dtype=np.uint64)
    expected = [oracle_mix64(v) for v in values]
    assert [int(v) for v in mix64(x)] == expected
    assert x.tolist() == values  # mix64 leaves its input alone
    assert mix64_inplace(x) is x and [int(v) for v in x] == expected
    assert [int(v) for v in mix64(x.reshape(2, -1)).reshape(-1)] == [oracle_mix64(v) for v in expected]


@pytest.mark.parametrize("device", devices())
def test_the_int64_form_matches_the_oracle_on_numpy_and_torch(device: str):
    """Signed int64 arithmetic (torch has no uint64 on a GPU): the same bits, read as uint64."""
    values = [0, 1, 2, 0xFFFFFFFFFFFFFFFF, 1 << 63, (1 << 63) - 1, 12345678901234567890,
              *np.random.default_rng(5).integers(0, 2**64, 50, dtype=np.uint64).tolist()]
    expected = [oracle_mix64(v) for v in values]
    assert [as_int64(v) for v in (0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64)] == [0, 2**63 - 1, -2**63, -1, 0]
    for x in (np.array([as_int64(v) for v in values], dtype=np.int64),
              torch.tensor([as_int64(v) for v in values], dtype=torch.int64, device=device)):
        with np.errstate(over="ignore"):
            assert mix64_int64_inplace(x) is x
        assert [int(v) & MASK for v in x.tolist()] == expected


def test_derive_key_folds_each_part_through_mix64():
    def oracle(seed: int, *parts: int) -> int:
        k = seed & MASK
        for part in parts:
            k = oracle_mix64(k ^ ((part * PHI_INCREMENT) & MASK))
        return k

    for seed, parts in [(0, ()), (0, (0, 0)), (1, (2, 3)), (-5, (7,)), (2**64 - 1, (1, 2**64 - 1)),
                        (0x5A3C17E9B0D46F21 ^ 9, (0, 12, 4))]:
        assert derive_key(seed, *parts) == oracle(seed, *parts)
    assert derive_key(0, 0, 1) == 0xE220A8397B1DCDAF


def test_uniforms_are_the_top_53_bits_of_the_keyed_counter():
    key = 0xD1B54A32D192ED03
    counters = np.array([0, 1, 5, 2**40 + 3, 2**64 - 1], dtype=np.uint64)
    expected = [(oracle_mix64((int(c) + key * PHI_INCREMENT) & MASK) >> 11) / 2**53 for c in counters]
    got = uniforms(key, counters)
    assert got.dtype == np.float64 and got.tolist() == expected
    assert uniforms(key, np.arange(5, dtype=np.int64)).tolist() == [
        (oracle_mix64((c + key * PHI_INCREMENT) & MASK) >> 11) / 2**53 for c in range(5)]
    assert np.all((got >= 0) & (got < 1))
