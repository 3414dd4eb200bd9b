"""Run under a launcher: train on a partition directory and compare each rank's peak memory with distgcn.memory.prediction.

Measured on a CPU: the peak resident set (VmHWM) minus the resident set at a
baseline taken after imports, the transport and a small warm-up step (so that
library code paged in on first use is not counted), with the peak reset at the
baseline through /proc/self/clear_refs. On a GPU: torch.cuda.max_memory_allocated.
Rank 0 writes one JSON list, one entry per rank.
Usage: memory_check.py OUT.json DIR BACKEND HIDDEN LAYERS DTYPE EPOCHS KERNEL
"""

import gc
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.comm.transport.setup import make_transport
from distgcn.config import TrainConfig
from distgcn.kernels import kernels_for
from distgcn.memory.prediction import predict, shard_sizes
from distgcn.nn.dropout import keyed_dropout
from distgcn.shard.directory import shard_filename
from distgcn.shard.distribute import load_own_shard
from distgcn.training import optimizers
from distgcn.training.pipeline import _warm_up
from distgcn.training.trainer import Trainer


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def warm_up(device: torch.device) -> None:
    """Touch the kernels training uses (CSR product, dense products, keyed dropout, Adam) on tiny tensors.

    Keyed dropout runs numba's compiled kernel on the CPU: its first call imports numba and loads the code.
    """
    a = sp.random(8, 8, density=0.5, format="csr", random_state=0)
    csr = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                  torch.from_numpy(a.indices.astype(np.int64)), torch.from_numpy(a.data),
                                  size=a.shape, check_invariants=True).to(device)
    w = torch.ones((8, 4), dtype=torch.float64, device=device, requires_grad=True)
    opt = optimizers.Adam([w])  # the trainer's class
    h = keyed_dropout(torch.ones((8, 8), dtype=torch.float64, device=device), np.arange(8), 0.5, 1)
    loss = torch.relu(csr @ (h @ w)).sum()
    loss.backward()
    opt.step()


def main() -> None:
    out, directory, backend, hidden, layers, dtype, epochs, kernel = sys.argv[1:9]
    transport = make_transport(backend)
    device = transport.device
    warm_up(device)
    config = TrainConfig(layers=int(layers), hidden=(int(hidden),), epochs=int(epochs), dtype=dtype)
    kernels = kernels_for(device, kernel)
    # the train pipeline's own step before it loads a shard: numba's compiler is a library cost, not the trainer's.
    # Mirrored by hand, it drifted twice: a loop left out compiled inside the measured window, +30 MB with numba's
    # cache empty and +71 MB with its index holding other widths' loops
    _warm_up(kernels, config, transport.size > 1)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
        baseline = status_kib("VmRSS") * 1024
    shard = load_own_shard(transport, directory)
    trainer = Trainer(shard, transport, config, kernels)
    for _record in trainer.epochs():
        pass
    if device.type == "cuda":
        measured = torch.cuda.max_memory_allocated(device) - baseline
    else:
        measured = status_kib("VmHWM") * 1024 - baseline
    sizes = shard_sizes(Path(directory) / shard_filename(transport.rank))
    predicted = predict(sizes, config, device.type == "cuda", kernels.name)
    report = transport.allgather_object({"rank": transport.rank, "device": str(device), "measured": measured,
                                         "predicted": predicted})
    if transport.rank == 0:
        Path(out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
