"""distgcn's Adam and SGD (distgcn/training/optimizers.py) are torch's, without the torch._dynamo import.

Every step must equal torch.optim's bit for bit, their state_dicts must be
torch's (a checkpoint written by either class resumes in the other, through
the checkpoint's weights-only load), and a training process must never import
torch._dynamo: that import was seconds of every run's start.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, devices, mpiexec, random_edge_file

from distgcn.config import TrainConfig
from distgcn.training import optimizers
from distgcn.training.trainer import make_optimizer

SHAPES = [(), (7,), (5, 3), (2, 3, 4)]
"""A scalar, a bias-like vector, a weight matrix and a higher-order tensor."""

SETTINGS = {
    "adam": (optimizers.Adam, torch.optim.Adam, {"lr": 0.01, "weight_decay": 5e-4}),
    "adam-amsgrad": (optimizers.Adam, torch.optim.Adam, {"lr": 0.05, "weight_decay": 0.1, "amsgrad": True}),
    "sgd": (optimizers.SGD, torch.optim.SGD, {"lr": 0.1, "weight_decay": 5e-4}),
    "sgd-nesterov": (optimizers.SGD, torch.optim.SGD,
                     {"lr": 0.05, "weight_decay": 0.1, "momentum": 0.9, "nesterov": True}),
}
"""Each case: our class, torch's, and the constructor's settings (the first and third are what train uses)."""


def make_params(dtype: torch.dtype, device: str = "cpu", seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype).to(device)) for shape in SHAPES]


def clone(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


def set_grads(params: list[torch.nn.Parameter], step: int) -> None:
    """Seeded gradients of step ``step``; the last parameter has none on odd steps (torch then skips it)."""
    generator = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        grad = torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device)
        p.grad = None if i == len(params) - 1 and step % 2 else grad


def run(optimizer: torch.optim.Optimizer, steps: range) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for step in steps:
        optimizer.zero_grad()
        set_grads(params, step)
        optimizer.step()


def assert_same(a: object, b: object, where: str = "state") -> None:
    """Equal structure, with tensors equal bit for bit in dtype and shape."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def through_checkpoint(state: dict) -> dict:
    """``state`` saved and read back as a checkpoint's payload is (torch.save, weights-only torch.load)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_step_equals_torchs_bit_for_bit(setting, dtype, device):
    """On the CPU both take torch's single-tensor path, on a GPU its foreach kernels, as torch chooses."""
    ours_cls, torch_cls, kwargs = SETTINGS[setting]
    ours_params, torch_params = make_params(dtype, device), make_params(dtype, device)
    ours, theirs = ours_cls(ours_params, **kwargs), torch_cls(torch_params, **kwargs)
    for step in range(60):
        run(ours, range(step, step + 1))
        run(theirs, range(step, step + 1))
        for i, (p, q) in enumerate(zip(ours_params, torch_params)):
            assert torch.equal(p, q), f"parameter {i} (shape {SHAPES[i]}) differs after step {step + 1}"
    assert_same(ours.state_dict(), theirs.state_dict())


@pytest.mark.parametrize("direction", ["torch to ours", "ours to torch"])
@pytest.mark.parametrize("setting", ["adam", "sgd-nesterov"])
def test_state_resumes_in_the_other_class(setting, direction):
    """A checkpoint's optimizer state written by one class continues in the other exactly as in its own."""
    ours_cls, torch_cls, kwargs = SETTINGS[setting]
    writer_cls, reader_cls = (torch_cls, ours_cls) if direction == "torch to ours" else (ours_cls, torch_cls)
    params = make_params(torch.float32)
    writer = writer_cls(params, **kwargs)
    run(writer, range(7))
    saved = through_checkpoint(writer.state_dict())
    resumed_params = clone(params)
    reader = reader_cls(resumed_params, **kwargs)
    reader.load_state_dict(saved)
    run(writer, range(7, 20))
    run(reader, range(7, 20))
    for p, q in zip(params, resumed_params):
        assert torch.equal(p, q)
    assert_same(reader.state_dict(), writer.state_dict())


def test_make_optimizer_gives_ours_with_the_configured_settings():
    for name, cls in [("adam", optimizers.Adam), ("sgd", optimizers.SGD)]:
        optimizer = make_optimizer(make_params(torch.float32), TrainConfig(optimizer=name, lr=0.2, weight_decay=0.3))
        assert type(optimizer) is cls
        assert (optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["weight_decay"]) == (0.2, 0.3)


def test_step_hooks_and_closure_work_as_torchs():
    params = make_params(torch.float64)
    optimizer = optimizers.Adam(params, lr=0.1)
    seen = []
    optimizer.register_step_post_hook(lambda opt, args, kwargs: seen.append(opt))
    set_grads(params, 0)
    assert optimizer.step(lambda: 2.5) == 2.5
    assert seen == [optimizer]


def test_a_torch_lr_scheduler_drives_ours_as_torchs():
    """torch's schedulers accept only torch.optim.Optimizer instances and wrap their step: ours are both."""
    ours_params, torch_params = make_params(torch.float32), make_params(torch.float32)
    ours, theirs = optimizers.Adam(ours_params, lr=0.05), torch.optim.Adam(torch_params, lr=0.05)
    schedules = [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10) for opt in (ours, theirs)]
    for step in range(15):
        for optimizer, schedule in zip((ours, theirs), schedules):
            run(optimizer, range(step, step + 1))
            schedule.step()
    assert ours.param_groups[0]["lr"] == theirs.param_groups[0]["lr"] != 0.05
    for p, q in zip(ours_params, torch_params):
        assert torch.equal(p, q)


_MODULES_AFTER_TRAIN = """
import json, os, sys
from distgcn.cli.main import main

first = main(sys.argv[2:])
resumed = main([*sys.argv[2:], "--epochs", "4", "--resume"])
rank = int(os.environ.get("PMI_RANK", "0"))
with open(f"{sys.argv[1]}.{rank}", "w") as fh:
    json.dump({"codes": [first, resumed], "dynamo": "torch._dynamo" in sys.modules}, fh)
"""


def test_a_training_process_never_imports_torch_dynamo(tmp_path):
    """Two ranks train with checkpoints, then resume: every optimizer method runs, none loads the compiler."""
    edges = random_edge_file(tmp_path / "g.txt", 100, 400, seed=3)
    script = tmp_path / "modules_after_train.py"
    script.write_text(_MODULES_AFTER_TRAIN)
    args = ["train", "--graph", edges, "--features", "8", "--classes", "3", "--partition", "random",
            "--epochs", "2", "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "1", "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(script), str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    for rank in range(2):
        result = json.loads((tmp_path / f"out.{rank}").read_text())
        assert result["codes"] == [0, 0]
        assert not result["dynamo"], f"rank {rank} imported torch._dynamo (seconds of every run's start)"
