"""partition/tbb_memory.py finds the allocator Mt-KaHyPar's wheel bundles and asks it for its pools back.

What the release saves is measured in docs/scale.md; here: the library is found where the wheel puts it (a
changed layout would silently keep the pools otherwise), the call reports success, and a module without a bundled
allocator answers False.
"""

from __future__ import annotations

import types

import mtkahypar
import numpy as np

import distgcn.partitioning.hypergraph as hg
from distgcn.partitioning.tbb_memory import release_pooled_memory


def test_mtkahypars_allocator_is_found_and_releases(tmp_path):
    assert release_pooled_memory(mtkahypar)
    parts, info = hg.partition_nets(np.array([0, 2, 4]), np.array([0, 1, 1, 2]), np.ones(3, dtype=np.int64), 2,
                                    preset="deterministic")
    assert info["pooled_memory_released"] is True and parts.shape == (3,)


def test_a_module_without_a_bundled_allocator_answers_false(tmp_path):
    (tmp_path / "plain.py").write_text("")
    assert release_pooled_memory(types.SimpleNamespace(__file__=str(tmp_path / "plain.py"), __name__="plain")) is False
