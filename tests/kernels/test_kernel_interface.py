"""The runtime, the memory model and the models reach the device kernels through distgcn.kernels only, and every
trick of the CPU kernels has a switch that leaves the default as it runs in training."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import ROOT
from layers import imported_modules, module_name

from distgcn.kernels import csr as csr_kernel
from distgcn.kernels import kernels_for, tricks

CALLERS = ("distgcn/training", "distgcn/spmm", "distgcn/memory", "distgcn/nn")
ALLOWED = {"distgcn.kernels", "distgcn.kernels.dense", "distgcn.kernels.kept_buffers", "distgcn.kernels.csr_tensors"}
"""The interface, and the device-independent torch helpers (dense products in the BLAS's layouts, kept buffers, the
CSR container that blocks cut on a device are built from)."""


def test_callers_import_no_kernel_module() -> None:
    kernel_modules = {f"distgcn.kernels.{p.stem}" for p in (ROOT / "distgcn/kernels").glob("*.py")} - ALLOWED
    found = []
    for folder in CALLERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            found += [f"{path.relative_to(ROOT)}:{line} imports {name}"
                      for line, name in imported_modules(tree, module_name(path), path.name == "__init__.py")
                      if name in kernel_modules]
    assert found == []


def test_the_switches_are_all_on_by_default_and_named_by_the_environment(monkeypatch) -> None:
    assert all(dataclasses.astuple(tricks.Tricks()))
    monkeypatch.setenv(tricks.TRICKS_OFF_VARIABLE, "two_chains, relu_folding")
    off = tricks.Tricks.from_environment()
    assert not off.two_chains and not off.relu_folding and off.stack_sums
    monkeypatch.setenv(tricks.TRICKS_OFF_VARIABLE, "stack_sums,no_such_trick")
    with pytest.raises(ValueError, match="DISTGCN_KERNEL_TRICKS_OFF: no trick named no_such_trick"):
        tricks.Tricks.from_environment()


@pytest.mark.parametrize("trick", ["stack_sums", "prefetch", "claimed_blocks", "two_chains"])
@pytest.mark.parametrize("width", [8, 16, 64])
def test_a_product_switched_off_gives_the_product(monkeypatch, trick: str, width: int) -> None:
    """Every product switch keeps the bits of the default, but ``two_chains`` where rows fit one vector (16 float32
    columns or fewer), which sums in another order."""
    a = sp.random(300, 200, density=0.05, format="csr", random_state=width, dtype=np.float32)
    dense = np.random.default_rng(width).standard_normal((200, width)).astype(np.float32)
    default, off = (np.empty((300, width), dtype=np.float32) for _ in range(2))
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, default, accumulate=False)
    monkeypatch.setattr(tricks, "TRICKS", tricks.Tricks(**{trick: False}))
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, off, accumulate=False)
    if trick == "two_chains" and width <= 16:
        np.testing.assert_allclose(off, default, rtol=1e-5, atol=1e-5)
        assert not np.array_equal(off, default)
    else:
        np.testing.assert_array_equal(off.view(np.uint32), default.view(np.uint32))


@pytest.mark.parametrize("trick", ["compiled_dropout", "one_pass_product", "compiled_logits"])
def test_a_pass_switched_off_takes_torch_s_operations(monkeypatch, trick: str) -> None:
    kernels = kernels_for("cpu")
    x, w = torch.randn(20, 16, dtype=torch.float64), torch.randn(16, 4, dtype=torch.float64)
    asked = {"compiled_dropout": lambda: kernels.compiles_dropout(x),
             "one_pass_product": lambda: kernels.one_pass_product(x, w),
             "compiled_logits": lambda: kernels.compiles_logits(x)}[trick]
    assert asked()
    monkeypatch.setattr(tricks, "TRICKS", tricks.Tricks(**{trick: False}))
    assert not asked()
    assert torch.equal(kernels.predicted_classes(x), x.argmax(dim=1))


def test_the_ablation_benchmark_writes_its_table_where_it_is_told(tmp_path) -> None:
    """benchmarks/kernel_ablation.py on a small graph: one row per switch and case, into --out only."""
    out = tmp_path / "ablation"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/kernel_ablation.py"), "--out", str(out),
                           "--graph", "synthetic:sbm,n=300,classes=3,features=4", "--widths", "16", "--threads", "1",
                           "--rounds", "2", "--repeats", "1", "--only", "stack_sums,compiled_logits"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ablation"]
    rows = [json.loads(line) for line in (out / "ablation.jsonl").read_text().splitlines()]
    assert [(r["trick"], r["case"]) for r in rows] == [
        ("stack_sums", "product 16 cols"), ("compiled_logits", "loss+backward 8 classes"),
        ("compiled_logits", "argmax 8 classes")]
    assert "| stack_sums | product 16 cols | 1 |" in (out / "ablation.md").read_text()
