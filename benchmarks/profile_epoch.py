"""Where one rank's epoch goes: torch.profiler over `distgcn train DIR`, by operation, host (and GPU) time.

    python benchmarks/profile_epoch.py PARTITION_DIR [--epochs 3] [--threads N] [--backend nccl]

One unprofiled run first (compiled kernels, kept buffers, on a GPU the CUDA
context and cuSPARSE handles), then the profiled one; prints the operations
by host time and, with a GPU, by GPU time. The totals cover every epoch of
the run, evaluation included. For one rank (a partition into one part).
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from distgcn.cli import main


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partition")
    parser.add_argument("--epochs", default="3")
    parser.add_argument("--threads", help="train's --threads (default: train's)")
    parser.add_argument("--backend", help="train's --backend (nccl for a GPU)")
    parser.add_argument("--hidden", default="64")
    options = parser.parse_args()
    args = ["train", options.partition, "--epochs", options.epochs, "--quiet", "--hidden", options.hidden]
    args += ["--threads", options.threads] if options.threads else []
    args += ["--backend", options.backend] if options.backend else []
    main(args)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        main(args)
    keys = ["self_cpu_time_total"] + (["self_cuda_time_total"] if torch.cuda.is_available() else [])
    for key in keys:
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    run()
